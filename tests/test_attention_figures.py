"""The pure pieces of the Attention page's views: model grid, lines, token bars, head statistics, readable on a
projector (``viz/attention_views.py``, ``viz/grid.py``), the ``app_pages/attention/views.py`` helpers (labels, word
level, export) and ``reading.analysis.greedy_with_head_masks``, on synthetic weights and the tiny model of
``conftest.py``.
"""

from __future__ import annotations

import io
import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from app_pages.attention import views
from decoding.stepping import Stepper
from reading.analysis import greedy_with_head_masks, head_statistics, sequence_log_probs, word_ids
from reading.trace import trace_pair
from viz.attention_views import lines_figure, token_bar_figure
from viz.grid import ALTAIR_GRID_CELLS, GRID_LABEL_LIMIT, GRID_SMALLEST, model_grid_altair, model_grid_figure
from viz.head_stats import head_stat_heatmap, log_prob_figure


def random_attention(*shape: int, seed: int = 0) -> torch.Tensor:
    """Rows that sum to 1: ``[..., q, k]``."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)


def heatmaps(fig: go.Figure) -> list:
    return [t for t in fig.data if t.type == "heatmap"]


# --- viz: model grid ------------------------------------------------------------------------------------------
def test_model_grid_has_one_panel_per_layer_and_head():
    attn = random_attention(3, 4, 5, 6)
    q, k = [f"▁q{i}" for i in range(5)], [f"▁k{j}" for j in range(6)]
    fig = model_grid_figure(attn, q, k, title="grid")
    panels = heatmaps(fig)
    assert len(panels) == 3 * 4
    assert all(np.asarray(p.z).shape == (5, 6) for p in panels)
    assert np.allclose(np.asarray(panels[4 * 1 + 2].z), attn[1, 2].numpy())  # row-major: layer 2, head 3
    axes = fig.layout.to_plotly_json()
    assert "xaxis12" in axes and "yaxis12" in axes and "xaxis13" not in axes
    assert all(p.coloraxis == "coloraxis" for p in panels)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)  # the fixed 0-1 scale
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:2] == ["layer 1 · head 1", "layer 1 · head 2"] and titles[-1] == "layer 3 · head 4"
    # Tick labels on the outer axes only: x on the bottom row, y in the first column.
    assert fig.layout.xaxis9.showticklabels and list(fig.layout.xaxis9.ticktext) == [f"▁k{j}" for j in range(6)]
    assert not fig.layout.xaxis1.showticklabels
    assert fig.layout.yaxis5.showticklabels and not fig.layout.yaxis6.showticklabels


def test_model_grid_adapts_to_long_sentences_and_blanks_the_future():
    n = GRID_LABEL_LIMIT + 6
    attn = random_attention(2, 2, n, n)
    labels = [f"▁t{i}" for i in range(n)]
    fig = model_grid_figure(attn, labels, labels, causal=True)
    assert not any(ax.showticklabels for ax in (fig.layout.xaxis3, fig.layout.yaxis1))  # too long: no labels
    z = np.asarray(heatmaps(fig)[0].z, dtype=float)
    assert np.isnan(z[np.triu_indices(n, k=1)]).all() and not np.isnan(np.tril(z)).any()
    short = model_grid_figure(random_attention(2, 2, 4, 4), labels[:4], labels[:4])
    assert fig.layout.height > short.layout.height


def test_the_grid_of_a_long_sentence_sends_its_weights_as_float32():
    """A served page serialises the grid on every run that shows it: float64 weights made the 36-panel grid of the
    longest input 7.4 MB of JSON, float32 (what the model computes in) 3.4 MB."""
    import plotly.io as pio

    n = 128
    labels = [f"▁t{i}" for i in range(n)]
    attn = random_attention(6, 6, n, n).double()  # even float64 weights are sent as f4
    for causal in (False, True):
        spec = pio.to_json(model_grid_figure(attn, labels, labels, causal=causal), validate=False)
        dtypes = (spec.count('"dtype":"f8"'), spec.count('"dtype":"f4"'), len(spec))  # no 7 MB string in a failure
        assert dtypes[:2] == (0, 36) and dtypes[2] < 4.5e6, dtypes  # 36 × 128 × 128 × 4 bytes in base64 is 3.1 MB


def test_model_grid_outlines_the_open_head_and_rejects_bad_input():
    attn = random_attention(2, 3, 4, 4)
    labels = list("abcd")
    fig = model_grid_figure(attn, labels, labels, highlight=(1, 2))
    assert [s.xref for s in fig.layout.shapes] == ["x6 domain"]
    summary = model_grid_figure(attn[:, :2], labels, labels, col_names=["mean over heads", "max over heads"])
    assert len(heatmaps(summary)) == 4 and summary.layout.annotations[1].text == "layer 1 · max over heads"
    with pytest.raises(ValueError):
        model_grid_figure(attn, labels[:3], labels)
    with pytest.raises(ValueError):
        model_grid_figure(attn[0], labels, labels)


def test_altair_grid_selects_a_head_by_click():
    attn = random_attention(2, 3, 4, 5)
    chart = model_grid_altair(attn, list("abcd"), list("vwxyz"), selected=(1, 0))
    spec = chart.to_dict()
    assert spec["params"][0]["name"] == "head_pick"
    assert spec["params"][0]["select"]["fields"] == ["layer", "head"]
    data = chart.data
    assert len(data) == 2 * 3 * 4 * 5
    assert sorted(data["layer"].unique()) == [1, 2] and sorted(data["head"].unique()) == [1, 2, 3]
    cell = data[(data.layer == 2) & (data["head"] == 3)].sort_values(["y0", "x0"])
    assert np.allclose(cell["weight"].to_numpy().reshape(4, 5), attn[1, 2].numpy(), atol=1e-4)
    causal = model_grid_altair(random_attention(1, 2, 4, 4), list("abcd"), list("abcd"), causal=True).data
    assert len(causal) == 2 * 10  # the lower triangle with the diagonal
    with pytest.raises(ValueError):
        model_grid_altair(random_attention(4, 4, 60, 60), ["x"] * 60, ["x"] * 60)
    assert 4 * 4 * 60 * 60 > ALTAIR_GRID_CELLS


# --- viz: lines, bars, statistics ------------------------------------------------------------------------------
def test_lines_opacity_is_the_weight_and_weak_lines_are_omitted():
    w = torch.tensor([[0.7, 0.25, 0.05], [0.1, 0.1, 0.8]])
    fig = lines_figure(w, ["▁a", "▁b"], ["▁x", "▁y", "z"], threshold=0.08)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(lines) == 5  # 0.05 is below the threshold
    for t in lines:
        i, j = t.meta
        assert t.opacity == pytest.approx(float(w[i, j]))
        assert list(t.x) == [0, 1] and list(t.y) == [i, j]  # left = query i, right = key j
    assert [t.opacity for t in lines] == sorted(t.opacity for t in lines)  # strongest drawn last
    texts = [t for t in fig.data if t.mode == "text+markers"]
    assert list(texts[0].text) == ["▁a", "▁b"] and list(texts[1].text) == ["▁x", "▁y", "z"]
    focused = [
        t for t in lines_figure(w, ["▁a", "▁b"], ["▁x", "▁y", "z"], threshold=0.0, query=1).data if t.mode == "lines"
    ]
    assert {tuple(t.meta) for t in focused} == {(1, 0), (1, 1), (1, 2)}
    capped = [
        t for t in lines_figure(w, ["a", "b"], ["x", "y", "z"], threshold=0.0, max_lines=2).data if t.mode == "lines"
    ]
    assert sorted(t.opacity for t in capped) == pytest.approx([0.7, 0.8])


def test_token_bars_and_log_prob_bars():
    fig = token_bar_figure(torch.tensor([0.2, float("nan"), 0.8]), ["▁a", "▁b", "c"], mark=2)
    bar = fig.data[0]
    assert list(bar.y) == pytest.approx([0.2, 0.0, 0.8]) and list(fig.layout.yaxis.range) == [0, 1.1]
    assert bar.marker.color[2] != bar.marker.color[0]
    lp = log_prob_figure(["▁a", "b"], [-0.1, -2.0], [-0.5, -1.0])
    assert [t.name for t in lp.data] == ["all heads", "heads removed"]
    with pytest.raises(ValueError):
        token_bar_figure([0.5], ["a", "b"])


def test_head_stat_heatmap_is_layers_by_heads():
    values = torch.tensor([[0.1, -0.4, 0.0, 0.2], [0.3, 0.0, -0.1, 0.05], [0.0, 0.0, 0.0, 0.0]])
    fig = head_stat_heatmap(values, "drop", diverging=True)
    hm = fig.data[0]
    assert np.asarray(hm.z).shape == (3, 4)
    assert list(hm.y) == ["layer 1", "layer 2", "layer 3"] and list(hm.x) == [f"head {j}" for j in range(1, 5)]
    assert hm.zmid == 0 and hm.zmin == pytest.approx(-0.4) and hm.zmax == pytest.approx(0.4)
    seq = head_stat_heatmap(values.abs(), "entropy", zmin=0.0, zmax=math.log(6)).data[0]
    assert (seq.zmin, seq.zmax) == (0.0, pytest.approx(math.log(6)))
    with pytest.raises(ValueError):
        head_stat_heatmap(torch.zeros(2, 3, 4), "x")


# --- readable from the back of the room ------------------------------------------------------------------------
def test_model_grid_labels_are_readable_on_a_projector():
    """The grid's tick labels were 9–11 px and its panel titles 12 px (read as ~8 px on a slide)."""
    labels = [f"▁w{i}" for i in range(10)]
    fig = model_grid_figure(random_attention(3, 4, 10, 10), labels, labels, title="grid")
    # every key labelled, a little smaller than 14 px where a panel's columns need it (never every other one)
    assert fig.layout.xaxis9.tickfont.size >= GRID_SMALLEST and fig.layout.yaxis1.tickfont.size >= 14
    assert list(fig.layout.xaxis9.tickvals) == list(range(10))
    assert all(a.font.size >= 14 for a in fig.layout.annotations)
    assert fig.layout.xaxis9.showticklabels and fig.layout.yaxis5.showticklabels
    # 8 heads × 20 keys would squeeze the key labels into ~7 px columns: none then, the query labels stay
    long = [f"▁w{i}" for i in range(20)]
    crowded = model_grid_figure(random_attention(2, 8, 20, 20), long, long)
    assert not crowded.layout.xaxis9.showticklabels and crowded.layout.yaxis1.showticklabels
    assert crowded.layout.height >= 2 * 18 * 20  # 18 px per labelled query row
    chart = model_grid_altair(random_attention(2, 2, 4, 4), list("abcd"), list("abcd")).to_dict()
    assert chart["encoding"]["x"]["axis"]["labelFontSize"] >= 14


def test_token_bar_title_is_two_short_lines_that_fit_a_half_width_column():
    """ "What “X” attends to · Decoder self (masked) · layer 3 · head 2 · words" was cut off in a half column."""
    fig = token_bar_figure(
        [0.5, 0.5],
        ["▁a", "<b>"],
        title="Who attends to “<bos>”",
        subtitle="Decoder self (masked) · layer 3 · mean over heads · words",
    )
    text = fig.layout.title.text
    lines = text.split("<br>")
    assert len(lines) == 2 and "&lt;bos&gt;" in lines[0]
    visible = [__import__("re").sub(r"<[^>]+>", "", line) for line in lines]
    assert max(len(v) for v in visible) <= 60  # ≈ 500 px at 14–16 px: inside a half-width column at 1280 px
    assert fig.layout.margin.t >= 26 + 28 * 2


def test_head_stat_numbers_fit_their_cells_and_head_names_leave_the_title_alone():
    """The sweep's numbers spilled out of narrow cells, and the head names at the top ran into the title."""
    values = torch.tensor([[0.0342, -12.345, 1234.5, float("nan")]])
    fig = head_stat_heatmap(values, "drop (nats)", diverging=True, title="Cross (decoder → encoder)")
    assert list(fig.data[0].text[0]) == ["0.03", "-12.3", "1234", ""]
    assert all(len(t) <= 5 for t in fig.data[0].text[0])
    assert fig.data[0].textfont.size >= 14
    assert fig.layout.xaxis.side == "bottom"


def test_who_attends_chips_do_not_all_read_zero():
    """A column of small weights read "0.00" on every chip while one was outlined as the strongest."""
    from viz.attention import highlight_tokens_html

    small = highlight_tokens_html(["▁a", "▁b", "▁c"], [0.004, 0.012, 0.001])
    assert "0.012" in small and "0.004" in small and "0.00<" not in small
    assert small.count("3px solid") == 1 and "largest weight is only 0.012" in small
    none = highlight_tokens_html(["▁a", "▁b"], [0.0001, 0.0])
    assert "3px solid" not in none and "every weight is below" in none


def test_compare_caption_ends_in_one_full_stop():
    from viz.labels import end_sentence

    assert end_sentence("“The cat sat.” → Die Katze saß.") == "“The cat sat.” → Die Katze saß."
    assert end_sentence("checkpoint b, same sentence and translation") == "checkpoint b, same sentence and translation."
    assert end_sentence("(… translation: Hallo!)") == "(… translation: Hallo!)"


# --- ui helpers ------------------------------------------------------------------------------------------------
def test_head_labels_and_masks():
    counts = {"encoder": 2, "decoder": 2, "cross": 2}
    options = views.head_options(counts, 3)
    assert len(options) == 3 * 2 * 3 and options[0] == "encoder L1 H1" and options[-1] == "cross L2 H3"
    assert views.parse_head_label("cross L2 H3") == ("cross", 1, 2)
    assert views.parse_head_label("cross L2") is None
    masks = views.head_masks(["cross L2 H3", "encoder L1 H1", "cross L9 H1", "nonsense", "self L1 H1"], counts, 3)
    assert set(masks) == {"cross", "encoder"}
    assert masks["cross"].shape == (2, 3) and masks["cross"].sum() == 5 and masks["cross"][1, 2] == 0
    assert masks["encoder"][0, 0] == 0


def test_word_labels_and_word_level_attention():
    pieces = ["<bos>", "▁Bob", "by", "▁likes", "▁black", "berries", ".", "<eos>"]
    assert views.word_labels(pieces) == ["<bos>", "▁Bobby", "▁likes", "▁blackberries.", "<eos>"]
    attn = random_attention(3, 4, len(pieces), len(pieces))
    merged, q_words, k_words = views.word_level(attn, pieces, pieces)
    n_words = max(word_ids(pieces)) + 1
    assert merged.shape == (3, 4, n_words, n_words) and len(q_words) == len(k_words) == n_words
    assert torch.allclose(merged.sum(-1), torch.ones(3, 4, n_words), atol=1e-5)
    # Cross shapes: target words × source words.
    src = ["▁Bob", "by", "▁sleeps", "<eos>"]
    cross, _, k2 = views.word_level(random_attention(2, len(pieces), len(src)), pieces, src)
    assert cross.shape == (2, n_words, 3) and k2 == ["▁Bobby", "▁sleeps", "<eos>"]


def test_grid_pick_reads_the_altair_selection():
    assert views.grid_pick({"head_pick": [{"layer": 2, "head": 3}]}) == (1, 2)
    for garbage in ({}, {"head_pick": []}, {"head_pick": [{"layer": "x"}]}, None, "abc"):
        assert views.grid_pick(garbage) is None


def test_stats_frame_has_a_row_per_head():
    w = random_attention(3, 4, 5, 5)
    frame = views.stats_frame(head_statistics(w, eos_index=4))
    assert list(frame.columns) == ["layer", "head", "entropy", "same", "previous", "first", "eos", "max"]
    assert len(frame) == 12 and frame.iloc[5][["layer", "head"]].tolist() == [2, 2]
    no_eos = views.stats_frame(head_statistics(w))
    assert "eos" not in no_eos.columns


def test_npz_export_round_trip(make_model, tokenizer, encode_src, encode_tgt):
    model = make_model()
    src, tgt = encode_src("The cat sleeps."), encode_tgt("Die Katze schläft.")[:-1]
    trace = trace_pair(model, tokenizer, src, tgt)
    data = np.load(io.BytesIO(views.attention_npz(trace)))  # no allow_pickle needed
    assert set(data.files) == {"encoder", "decoder", "cross", "src_tokens", "tgt_tokens", "src_ids", "tgt_ids"}
    for kind, w in trace.attention.items():
        assert data[kind].shape == tuple(w.shape) and data[kind].dtype == np.float32
        assert np.allclose(data[kind], w.numpy())
    assert data["src_tokens"].tolist() == list(trace.src_tokens)
    assert data["tgt_tokens"].tolist() == list(trace.tgt_tokens)
    assert data["src_ids"].tolist() == src and data["tgt_ids"].tolist() == tgt
    lm = make_model(arch="decoder-only")
    lm_data = np.load(io.BytesIO(views.attention_npz(trace_pair(lm, tokenizer, None, tgt))))
    assert "self" in lm_data.files and lm_data["src_tokens"].shape == (0,)


def test_the_export_keeps_no_trace_alive_and_traces_a_dropped_one_again(ende):
    """The download button's data (kept by Streamlit while the session lives) holds the trace weakly: the gate's
    byte budget decides what stays, and a dropped trace is traced again when the visitor asks for the file."""
    import functools
    import gc

    from app_pages.attention import qk
    from decoding.stepping import input_limit, prepare_source
    from serving import heavy
    from ui import state

    cfg = ende.config
    src = prepare_source(ende.tokenizer, "Bobby likes blackberries.", input_limit(cfg), cfg.eos_id, cfg.unk_id)
    tgt = [cfg.bos_id, *ende.tokenizer.encode("Bobby mag").ids]
    raw, _ = state.traced(ende, src, tgt)  # through the gate, outside a script run: nothing drawn while it waits
    data = views.made_from_trace_when_asked(ende, src, tgt, raw, views.attention_npz)
    first = np.load(io.BytesIO(data()))
    assert np.allclose(first["cross"], raw.attention["cross"].numpy())
    record = functools.partial(
        qk.record_npz_of, kind="cross", layer=0, head=1, query=2, query_label="▁mag", key_labels=list(raw.src_tokens)
    )
    qk_data = views.made_from_trace_when_asked(ende, src, tgt, raw, record)  # the Query · key tab's download
    qk_first = np.load(io.BytesIO(qk_data()))
    assert np.allclose(qk_first["weights"], raw.attention["cross"][0, 1, 2].numpy())

    heavy.GATE._results.clear()  # as when the budget drops it
    del raw, _
    gc.collect()
    assert not any(type(o).__name__ == "Trace" and o.src_ids == tuple(src.ids) for o in gc.get_objects())
    again = np.load(io.BytesIO(data()))  # traced again, the same numbers
    assert again.files == first.files and np.allclose(again["cross"], first["cross"])
    qk_again = np.load(io.BytesIO(qk_data()))
    assert qk_again.files == qk_first.files and np.allclose(qk_again["weights"], qk_first["weights"])


# --- model: greedy decoding with head masks ---------------------------------------------------------------------
def test_greedy_with_all_ones_masks_equals_the_stepper(make_model, encode_src):
    model = make_model()
    cfg = model.cfg
    for text in ("The cat sleeps.", "Good morning."):
        src = encode_src(text)
        stepper = Stepper(model, src, max_new_tokens=12)
        stepper.run_to_end()
        ones = {
            "encoder": torch.ones(cfg.n_encoder_layers, cfg.n_heads),
            "decoder": torch.ones(cfg.n_decoder_layers, cfg.n_heads),
            "cross": torch.ones(cfg.n_decoder_layers, cfg.n_heads),
        }
        assert greedy_with_head_masks(model, src, ones, max_new_tokens=12) == stepper.tokens
        assert greedy_with_head_masks(model, src, None, max_new_tokens=12) == stepper.tokens
    full = Stepper(model, src)
    full.run_to_end()
    assert greedy_with_head_masks(model, src) == full.tokens and len(full.tokens) <= cfg.max_len


def test_greedy_with_masks_follows_the_ablated_model(make_model, encode_src):
    """Each greedy token is the argmax of the ablated model's teacher-forced distribution over its own output."""
    model = make_model(seed=3)
    cfg = model.cfg
    src = encode_src("The dog is small.")
    mask = torch.ones(cfg.n_decoder_layers, cfg.n_heads)
    mask[:, :2] = 0.0
    masks = {"cross": mask}
    tokens = greedy_with_head_masks(model, src, masks, max_new_tokens=8)
    assert tokens[0] == cfg.bos_id and 2 <= len(tokens) <= 9
    lp = sequence_log_probs(model, src, tokens, masks)
    with torch.inference_mode():
        out = model.decode(
            torch.tensor([tokens[:-1]]),
            model.encode(torch.tensor([src]))[0],
            model.src_mask(torch.tensor([src])),
            cross_head_mask=mask,
        )
        best = torch.log_softmax(model.logits(out.hidden[0]).float(), -1).max(-1).values
    assert torch.allclose(lp, best, atol=1e-5)
    lm = make_model(arch="decoder-only")
    prompt = [cfg.bos_id, 5, 6]
    step = Stepper(lm, None, prefix_ids=prompt, max_new_tokens=5)
    step.run_to_end()
    assert (
        greedy_with_head_masks(
            lm, None, {"self": torch.ones(cfg.n_decoder_layers, cfg.n_heads)}, max_new_tokens=5, prefix_ids=prompt
        )
        == step.tokens
    )
