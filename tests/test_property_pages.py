"""Property-based tests (``hypothesis``) of the pages' helpers: any text a visitor can type gives the Attention
page's data, the Tokenization page's merge replay and live BPE trainer, and the URL and text parsers of ``ui/`` a
result or a clear message. The strategies and settings are those of ``input_strategies.py``."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from input_strategies import SHORT_TEXT, examples, source_or_none, utf8

from app_pages.attention import views as uav
from app_pages.decoding import lab
from charts.teaching import cell_html, pieces_html, token_spans_html
from decoding.stepping import Stepper
from model.tokenizer import TextTokenizer
from reading.analysis import attention_rollout, head_statistics, sequence_log_probs
from reading.trace import trace_pair
from teaching.bpe_replay import merge_table, pre_tokenize, replay, segmentations
from ui import url
from viz.attention import attention_heatmap, tokens_html
from viz.attention_views import lines_figure
from viz.token_labels import display_token, plotly_escape


# --- the Attention page's data -----------------------------------------------------------------------------------
@examples(20)
@given(text=SHORT_TEXT)
def test_trace_and_attention_helpers(ende, text):
    src = source_or_none(ende, text)
    if src is None:
        return
    model, tok, cfg = ende.model, ende.tokenizer, ende.config
    stepper = Stepper(model, src.ids, max_new_tokens=2)
    stepper.run_to_end()
    tgt = stepper.decoder_inputs()
    trace = trace_pair(model, tok, src.ids, tgt, src.offsets)
    n_src, n_tgt = len(src.ids), len(tgt)
    assert trace.attention["encoder"].shape[2:] == (n_src, n_src)
    assert trace.attention["cross"].shape[2:] == (n_tgt, n_src)
    for kind in ("encoder", "decoder", "cross"):
        q_labels, k_labels = trace.labels(kind)
        merged, q_words, k_words = uav.word_level(trace.attention[kind], q_labels, k_labels)
        assert merged.shape[-2:] == (len(q_words), len(k_words))
        assert torch.allclose(merged.sum(-1), torch.ones(()), atol=1e-3)
        stats = head_statistics(trace.attention[kind], eos_index=n_src - 1 if kind != "decoder" else None)
        assert len(uav.stats_frame(stats)) == cfg.n_heads * cfg.n_decoder_layers
    rollout = attention_rollout(trace.attention["encoder"])
    assert torch.allclose(rollout.sum(-1), torch.ones(n_src), atol=1e-3)
    with np.load(io.BytesIO(uav.attention_npz(trace)), allow_pickle=False) as npz:
        assert list(npz["src_tokens"]) == src.tokens and list(npz["src_ids"]) == src.ids
    mask = uav.head_masks(["cross L1 H1"], cfg.attention_layers(), cfg.n_heads)
    assert torch.isfinite(sequence_log_probs(model, src.ids, tgt + [cfg.eos_id], mask)).all()
    cross = trace.attention["cross"][-1, 0]
    attention_heatmap(cross, trace.tgt_tokens, trace.src_tokens, title=text[:40])
    lines_figure(trace.attention["encoder"][0, 0], src.tokens, src.tokens, query=0)
    utf8(token_spans_html(src.text, src.tokens[:-1], src.ids[:-1], src.offsets[:-1]))


# --- the Tokenization page's helpers -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ende_table(ende):
    return merge_table(ende.tokenizer.to_str())


@examples(100)
@given(text=SHORT_TEXT)
def test_merge_replay_ends_where_the_tokenizer_ends(ende, ende_table, text):
    """What the page does with the text box: pieces with spans, words, and the replay of every word's merges."""
    tok = ende.tokenizer
    enc = tok.encode(text)
    utf8(token_spans_html(text, enc.tokens, enc.ids, enc.offsets))
    seg = segmentations(text, enc.tokens)
    assert seg["pieces"] == enc.tokens
    pieces = []
    for word in pre_tokenize(tok.backend, text):
        steps = replay(word, ende_table)
        assert all(len(b.pieces) < len(a.pieces) for a, b in zip(steps, steps[1:], strict=False))
        utf8(pieces_html(steps[-1].pieces) + "".join(cell_html(p) for p in steps[-1].pieces))
        pieces += steps[-1].pieces
    assert pieces == enc.tokens


@examples(25)
@given(train_text=st.lists(SHORT_TEXT, min_size=1, max_size=6).map("\n".join), vocab=st.integers(30, 300))
def test_live_bpe_trainer_on_any_text(train_text, vocab):
    """The page's "Train your own BPE" on pasted text (the page asks for text when it is blank)."""
    if not train_text.strip():
        return
    lines = [line for line in train_text.splitlines() if line.strip()]
    mine = TextTokenizer.train(lines, vocab_size=vocab, min_frequency=1)
    table = merge_table(mine.to_str())
    assert len(table.vocab) == mine.vocab_size
    first = next(line for line in train_text.splitlines() if line.strip())
    enc = mine.encode(first)
    assert all(0 <= s <= e <= len(first) for s, e in enc.offsets)
    utf8(token_spans_html(first, enc.tokens, enc.ids, enc.offsets))


# --- ui/ parsers and viz text helpers -----------------------------------------------------------------------------
NUMBERISH = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "nan",
            "inf",
            "-inf",
            "1e400",
            "9" * 5000,
            "١٢",
            "1_0",
            "0x10",
            "3:1234,5:88",
            "all",
            "MEAN",
            "cross L2 H3",
            "encoder L1 H1",
            "self L9 H9",
            "1:2:3",
            ",,,",
            "2:-1",
            "\x00",
        ]
    ),
)
URL_VALUE = st.one_of(NUMBERISH, SHORT_TEXT)


@examples(200)
@given(raw=URL_VALUE)
def test_ui_parsers_and_text_helpers_take_any_string(ende, raw):
    """The URL and text-box parsers of ui/ and the label helpers of viz/ on any string: a value or None, never
    an exception."""
    layer, _ = url.index_param({"layer": raw}, "layer", 3, 2)
    assert 0 <= layer < 3
    head, _ = url.head_param({"head": raw}, "head", 4, "all")
    assert head in ("all", "mean") or 0 <= head < 4
    label = uav.parse_head_label(raw)
    masks = uav.head_masks([raw], {"encoder": 3, "decoder": 3, "cross": 3}, 4)
    assert label is not None or not masks
    pick = uav.grid_pick({"head_pick": [{"layer": raw, "head": raw}]})
    assert pick is None or pick[0] == pick[1]
    forced, note = url.forced_param({"forced": raw}, "forced", 8000, 127)
    assert all(1 <= s <= 127 and 0 <= t < 8000 for s, t in forced.items())
    assert url.forced_param({"forced": url.format_forced(forced)}, "forced", 8000, 127) == (forced, None)
    keys = ("strategy", "temperature", "top_k", "top_p", "seed", "beam", "alpha")
    settings_out, notes = lab.settings_from_link({k: raw for k in keys}, 8000)
    lab.sampling_config(settings_out)  # always valid for the widgets
    assert all(isinstance(n, str) for n in notes)
    for _value, note in (
        url.int_param({"n": raw}, "n", 5, 0, 100),
        url.float_param({"x": raw}, "x", 0.5, 0.0, 1.0),
        url.bool_param({"b": raw}, "b", True),
        url.int_list_param({"d": raw}, "d", [], 0, 63),
        url.text_param({"t": raw}, "t", "", 100),
        url.matrix_param({"m": raw}, "m", np.eye(2)),
    ):
        assert note is None or isinstance(note, str)
    assert 0 <= url.int_param({"n": raw}, "n", 5, 0, 100)[0] <= 100
    piece = lab.resolve_piece(ende.tokenizer, raw)
    assert piece is None or 0 <= piece < ende.tokenizer.vocab_size
    text, message = url.text_param({"t": raw}, "t", "", 100)
    assert len(text) <= 100 and (message is None) == (len(raw) <= 100)
    utf8(display_token(raw) + plotly_escape(raw) + cell_html(raw) + pieces_html([raw]) + tokens_html([raw], 0))
    assert "<" not in plotly_escape(raw) and "<" not in cell_html(raw)
    assert uav.word_labels([raw, "<eos>"])[-1] == "<eos>"
