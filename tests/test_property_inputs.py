"""Property-based tests (``hypothesis``): any text a visitor can type gives a result or a clear typed error.

Generated strings drive the tokenizer, ``prepare_source`` / ``input_limit``, the ``Stepper`` (a few steps),
``translate_texts`` and ``translate_json`` (on the tiny fixtures), the trace and the Attention page's helpers, the
Tokenization page's merge replay and live BPE trainer, and the URL / text parsers of ``ui/``. The strings are
empty, whitespace only, 2,000 to 12,000 characters, emoji (ZWJ sequences and flags too), Arabic and Hebrew with
bidi controls, combining marks, NUL and other control or format characters, mixed scripts, very long words,
punctuation only, text the model reads only as ``<unk>``, and our special-token spellings (``<eos>``, ``<pad>``).
Lone surrogates, which a Python ``str`` can hold (``json.loads('"\\ud800"')``, a non-UTF-8 command-line byte) but
UTF-8, the Rust tokenizer and Streamlit cannot, go to the tokenizer, ``prepare_source`` and ``translate_json``
properties (they cannot come through a browser or a URL, so the page helpers do not get them).

"A clear typed error" is :class:`~decoding.stepping.InputError` (a ``ValueError``) with a non-empty message; anything
else escaping is a failure. Every example is generated from a fixed seed (``derandomize=True``) and no example
database is written (``database=None``), so CI sees the same examples on every run. 1,150 examples in all (about
40 s of CPU with the imports); decoding is kept to a few steps on the shipped models and to the tiny fixture model
for whole translations.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import asdict

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from input_strategies import (
    ANY_STR,
    ASCII_WORDS,
    SPECIAL_TEXT,
    UNREADABLE,
    USER_TEXT,
    assert_input_error,
    examples,
    joined,
    mix,
    prepared,
    source_or_none,
    string_of,
    utf8,
)

from charts.next_token import top_tokens_html
from decoding.batched import translate_texts
from decoding.stepping import MAX_INPUT_CHARS, InputError, Stepper, input_limit
from decoding.translate import translate_json
from model.checkpoint import Checkpoint
from model.tokenizer import MOSTLY_UNKNOWN, replace_surrogates, unknown_share
from teaching.bpe_replay import pre_tokenize
from viz.attention import highlight_tokens_html, tokens_html


# --- tokenizer -------------------------------------------------------------------------------------------------
@examples(300)
@given(text=ANY_STR)
def test_tokenizer_encodes_any_string(ende, text):
    tok = ende.tokenizer
    enc = tok.encode(text)
    assert len(enc.ids) == len(enc.tokens) == len(enc.offsets)
    assert all(0 <= i < tok.vocab_size for i in enc.ids)
    # Typed "<pad>" / "<bos>" / "<eos>" are characters, never the special ids (only <unk> can appear).
    assert not {0, 1, 2} & set(enc.ids)
    assert all(0 <= s <= e <= len(text) for s, e in enc.offsets)
    assert [s for s, _ in enc.offsets] == sorted(s for s, _ in enc.offsets)
    assert tok.tokens(enc.ids) == enc.tokens
    assert tok.encode_batch([text, text]) == [enc.ids, enc.ids]
    utf8(tok.decode(enc.ids))
    share = unknown_share(tok, text)
    assert 0.0 <= share <= 1.0
    # a lone surrogate is read as U+FFFD, which the 16k vocabulary (learned from web text) holds as a piece
    assert tok.token_to_id(text) is None or tok.id_to_token(tok.token_to_id(text)) == replace_surrogates(text)


@examples(300)
@given(text=ANY_STR)
def test_prepare_source_gives_a_source_or_an_input_error(ende, brown, text):
    for ckpt in (ende, brown):
        cfg = ckpt.config
        limit = input_limit(cfg)
        try:
            src = prepared(ckpt, text)
        except InputError as exc:
            assert_input_error(exc, text)
            continue
        assert len(text) <= MAX_INPUT_CHARS
        assert src.text and src.text == src.text.strip() and "  " not in src.text
        assert not any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") for ch in src.text)
        assert len(src.ids) == len(src.tokens) == len(src.offsets) <= limit
        assert src.ids[-1] == cfg.eos_id and src.tokens[-1] == "<eos>"
        assert cfg.eos_id not in src.ids[:-1] and cfg.pad_id not in src.ids and cfg.bos_id not in src.ids
        assert all(0 <= s <= e <= len(src.text) for s, e in src.offsets)
        assert src.truncated == any(n.startswith("The text was cut") for n in src.notes)
        assert all(isinstance(n, str) and n for n in src.notes)
        # Everything a page shows or the CLI prints must be valid UTF-8 (Streamlit's protobuf, --json).
        utf8(json.dumps(asdict(src), ensure_ascii=False))
        if cfg.unk_id in src.ids:
            assert any("<unk>" in n for n in src.notes)
        assert 0.0 <= unknown_share(ckpt.tokenizer, src.text) <= 1.0


@examples(80)
@given(text=joined(string_of(UNREADABLE, min_size=1, max_size=8)), latin=ASCII_WORDS)
def test_unknown_share_sees_unreadable_scripts(ende, brown, text, latin):
    for ckpt in (ende, brown):
        tok = ckpt.tokenizer
        assert unknown_share(tok, text) == 1.0 > MOSTLY_UNKNOWN
        assert unknown_share(tok, latin) == 0.0
        mixed = unknown_share(tok, latin + " " + text)
        n_latin, n_other = len(latin.replace(" ", "")), len("".join(text.split()))
        assert mixed == pytest.approx(n_other / (n_latin + n_other))
        src = prepared(ckpt, text)  # readable or not, the text is still tokenized (all <unk>), not refused
        assert set(src.ids[:-1]) <= {ckpt.config.unk_id, tok.token_to_id("▁")}


def test_unknown_share_examples(ende):
    tok = ende.tokenizer
    assert unknown_share(tok, "The cat sat on the mat.") == 0.0
    assert unknown_share(tok, "Straße, Äpfel, café") == 0.0  # umlauts, ß and é are in the vocabulary
    assert unknown_share(tok, "cafe\u0301") == 0.0  # e + combining acute is é after NFC
    assert unknown_share(tok, "") == unknown_share(tok, " \t\n") == unknown_share(tok, None) == 0.0
    assert unknown_share(tok, "日本語") == unknown_share(tok, "مرحبا بالعالم") == unknown_share(tok, "שלום") == 1.0
    assert unknown_share(tok, "🙂🙂 x") == pytest.approx(2 / 3)
    assert unknown_share(tok, "Hello 🌍") == pytest.approx(1 / 6)
    assert unknown_share(tok, "<eos>") == 0.0  # < and > are pieces of the 16k vocabulary (software documentation)
    assert unknown_share(tok, "a\ud800") == 0.0  # a lone surrogate is read as U+FFFD, a piece of the 16k vocabulary
    assert unknown_share(tok, "I love 日本語 food") > 0.0 and unknown_share(tok, "I love 日本語 food") < MOSTLY_UNKNOWN
    src = prepared(ende, "你好，世界！ Hello")
    assert unknown_share(tok, src.text) > MOSTLY_UNKNOWN


def test_lone_surrogates_and_special_spellings(ende):
    """What happens to the inputs a browser cannot send but a Python caller can (and to typed special tokens)."""
    tok = ende.tokenizer
    src = prepared(ende, "caf\udce9 ok")  # "café" from a Latin-1 terminal, decoded by Python's surrogateescape
    assert "\ufffd" in src.text and any("lone surrogates" in n for n in src.notes)
    utf8(json.dumps(asdict(src), ensure_ascii=False))
    assert tok.encode("\ud800").tokens == tok.encode("\ufffd").tokens
    assert tok.token_to_id("\ud800") == tok.token_to_id("\ufffd")  # U+FFFD: a piece of the 16k vocabulary
    assert tok.id_to_token(-1) == tok.id_to_token(10**12) == "<unk>"
    assert pre_tokenize(tok.backend, "a\ud800") == pre_tokenize(tok.backend, "a\ufffd")
    for spelling in ("<eos>", "<pad>", "<bos>", "<unk>"):
        ids = prepared(ende, f"a {spelling} b").ids
        assert ids.count(2) == 1 and 0 not in ids and 1 not in ids


def test_typed_pad_in_a_prompt_is_text_not_padding(brown):
    """A prompt with "<pad>" typed in it was the padding id: masked when the prefix is fed at once (no cache, and
    the cache's first call) but not in later cached steps, so cache on and off gave logits 10 nats apart."""
    src = prepared(brown, "The jury <pad> said that")
    assert brown.config.pad_id not in src.ids
    check_steps(brown, src, 3)


# --- decoding ----------------------------------------------------------------------------------------------------
def check_steps(ckpt: Checkpoint, src, n_steps: int) -> Stepper:
    """A few greedy steps with and without the KV cache: the same distributions, valid attention, Back works."""
    model, cfg = ckpt.model, ckpt.config
    on = Stepper(model, src.ids, max_new_tokens=n_steps)
    off = Stepper(model, src.ids, max_new_tokens=n_steps, use_cache=False)
    on.run_to_end()
    off.run_to_end()
    assert 1 <= len(on.records) <= n_steps and [r.token_id for r in on.records] == [r.token_id for r in off.records]
    for a, b in zip(on.records, off.records, strict=True):
        assert torch.isfinite(a.log_probs).all()
        assert float(a.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-3)
        assert torch.allclose(a.log_probs, b.log_probs, atol=1e-3), "KV cache on/off disagree"
        assert a.self_attention.sum(-1).sub(1).abs().max() < 1e-3
        if cfg.is_encoder_decoder:
            assert a.cross_attention.shape == (cfg.n_decoder_layers, cfg.n_heads, len(src.ids))
            assert a.cross_attention.sum(-1).sub(1).abs().max() < 1e-3
    ids, probs = on.records[-1].top(10)
    top_tokens_html(ckpt.tokenizer.tokens(ids), probs)
    last = on.records[-1].token_id
    on.back()
    on.step()
    assert on.records[-1].token_id == last
    return on


@examples(40)
@given(text=mix(USER_TEXT, SPECIAL_TEXT, 4))
def test_translator_steps_on_any_text(ende, text):
    src = source_or_none(ende, text)
    if src is None:
        return
    stepper = check_steps(ende, src, 3)
    cross = stepper.cross_attention_matrix()
    assert cross.shape[2] == len(stepper.records)
    html_out = highlight_tokens_html(src.tokens, cross[-1, :, -1].mean(0))
    utf8(html_out + tokens_html(ende.tokenizer.tokens(stepper.generated), current=len(stepper.generated) - 1))


@examples(30)
@given(text=mix(USER_TEXT, SPECIAL_TEXT, 3))
def test_language_model_steps_on_any_prompt(brown, text):
    """Decoder-only: the prompt (typed "<pad>" included) gives the same logits with the cache on and off."""
    src = source_or_none(brown, text)
    if src is None:
        return
    stepper = check_steps(brown, src, 2)
    assert stepper.prefix == [brown.config.bos_id] + src.ids[:-1]
    assert len(stepper.prefix) + stepper.max_new_tokens <= brown.config.max_len


@examples(25)
@given(texts=st.lists(USER_TEXT, min_size=1, max_size=4))
def test_translate_texts_keeps_order_and_blanks_bad_lines(tiny, texts):
    out = translate_texts(tiny.model, tiny.tokenizer, texts)
    assert len(out) == len(texts) and all(isinstance(o, str) for o in out)
    for text, o in zip(texts, out, strict=True):
        utf8(o)
        try:
            prepared(tiny, text)
        except InputError:
            assert o == ""


@examples(30)
@given(text=ANY_STR, beam=st.sampled_from([0, 0, 0, 2]))
def test_translate_json_is_printable_json(tiny, text, beam):
    """The CLI's ``--json`` result of any text: valid UTF-8 JSON, or an InputError (printed as an error)."""
    try:
        result = translate_json(tiny, text, beam_size=beam)
    except InputError as exc:
        assert_input_error(exc, text)
        return
    utf8(json.dumps(result, ensure_ascii=False))
    n_src = len(result["src_ids"])
    assert result["attention_shapes"]["encoder"][2:] == [n_src, n_src]
    assert result["attention_shapes"]["cross"][3] == n_src
