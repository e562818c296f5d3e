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

"A clear typed error" is :class:`~model.decoding.InputError` (a ``ValueError``) with a non-empty message; anything
else escaping is a failure. Every example is generated from a fixed seed (``derandomize=True``) and no example
database is written (``database=None``), so CI sees the same examples on every run. 1,150 examples in all (about
40 s of CPU with the imports); decoding is kept to a few steps on the shipped models and to the tiny fixture model
for whole translations.
"""

from __future__ import annotations

import io
import json
import string
import tempfile
import unicodedata
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from model.analysis import attention_rollout, head_statistics, sequence_log_probs
from model.batched import translate_texts
from model.checkpoint import Checkpoint, load_checkpoint
from model.decoding import MAX_INPUT_CHARS, InputError, Stepper, clean_user_text, input_limit, prepare_source
from model.tokenizer import MOSTLY_UNKNOWN, TextTokenizer, replace_surrogates, unknown_share
from model.translate import translate_json
from reading.trace import trace_pair
from teaching.bpe_replay import merge_table, pre_tokenize, replay, segmentations
from ui import attention_views as uav
from ui import decoding_lab as lab
from ui import url
from viz.attention import attention_heatmap, display_token, highlight_tokens_html, plotly_escape, tokens_html
from viz.attention_views import lines_figure
from viz.decoding import top_tokens_html
from viz.teaching import cell_html, pieces_html, token_spans_html

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis keeps caches (constants found in the code, Unicode tables) under .hypothesis/ even without an example
# database; keep them out of the repository.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "attention-explorer-hypothesis")

settings.register_profile(
    "attention-explorer",
    database=None,  # no .hypothesis example database in the repository
    deadline=None,  # one shared CPU core: timings vary, correctness does not
    derandomize=True,  # the same examples on every run (CI is deterministic)
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("attention-explorer")


def examples(n: int) -> settings:
    """The project profile with ``n`` examples."""
    return settings(PROFILE, max_examples=n)


# --- strategies ----------------------------------------------------------------------------------------------
def string_of(parts: st.SearchStrategy[str], min_size: int = 0, max_size: int = 20) -> st.SearchStrategy[str]:
    """Strings of ``parts`` (single characters, or sequences such as a ZWJ emoji, which ``st.text`` refuses)."""
    return st.lists(parts, min_size=min_size, max_size=max_size).map("".join)


def chars(*ranges: tuple[int, int]) -> st.SearchStrategy[str]:
    return st.one_of([st.integers(a, b).map(chr) for a, b in ranges])


WHITESPACE = (" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2003\u2007\u200a\u2028\u2029\u202f\u205f"
              "\u3000")
#: Our special tokens as a user might type them (and near misses).
SPECIAL_SPELLINGS = ["<pad>", "<bos>", "<eos>", "<unk>", "<PAD>", "< eos >", "<<eos>>", "<eos", "eos>", "</s>", "<s>",
                     "<mask>", "▁", "▁<eos>"]
LATIN = string_of(st.sampled_from(string.ascii_letters + "äöüßÄÖÜéè'"), min_size=1, max_size=12)
WORDS = st.lists(LATIN, min_size=1, max_size=8).map(" ".join)
#: Words both shipped vocabularies read without <unk> (brown-lm has no umlauts).
ASCII_WORDS = st.lists(string_of(st.sampled_from(string.ascii_letters), min_size=1, max_size=12), min_size=1,
                       max_size=8).map(" ".join)
#: Every character of a piece of the shipped translator's vocabulary: its 16k BPE, learned with web text, holds a
#: few Cyrillic, Arabic and CJK letters and emoji, which the "unreadable" strategies below leave out.
KNOWN_CHARS = frozenset("".join(json.loads((ROOT / "checkpoints" / "en-de" / "tokenizer.json").read_text(
    encoding="utf-8"))["model"]["vocab"]))


def unknown_only(parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``parts`` without those that hold a character of :data:`KNOWN_CHARS`."""
    return parts.filter(lambda part: KNOWN_CHARS.isdisjoint(part))


#: Emoji: code points, and sequences (ZWJ families, flags, skin tones, variation selectors) that are one picture.
EMOJI_ALL_UNK = unknown_only(st.one_of(chars((0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF),
                                             (0x1F900, 0x1F9FF), (0x2600, 0x26FF)),
                                       st.sampled_from(["👩‍👩‍👧", "🇩🇪", "👍🏽", "❤️", "🏳️‍🌈"])))
EMOJI = st.one_of(EMOJI_ALL_UNK, st.just("1️⃣"))  # a keycap: the digit is readable, the rest is not
ARABIC = unknown_only(chars((0x0621, 0x064A), (0x0660, 0x0669)))
HEBREW = chars((0x05D0, 0x05EA))
BIDI = st.sampled_from("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c")
#: Scripts absent from both shipped vocabularies: every character is ``<unk>``.
UNREADABLE = st.one_of(EMOJI_ALL_UNK, ARABIC, HEBREW, unknown_only(chars((0x4E00, 0x9FFF), (0x0410, 0x044F),
                                                                (0x0905, 0x0939), (0x3041, 0x3096), (0xAC00, 0xD7A3))))
COMBINING = st.characters(categories=["Mn", "Mc", "Me"])
CONTROL = st.characters(categories=["Cc", "Cf"])  # NUL, ESC, DEL, …; zero-width joiners, BOM, bidi overrides
PUNCTUATION = st.characters(categories=["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk"])
SURROGATE = st.characters(categories=["Cs"])


def joined(parts: st.SearchStrategy[str], max_size: int = 8) -> st.SearchStrategy[str]:
    """Fragments joined by a space, nothing or another whitespace character."""
    return st.builds(lambda items, sep: sep.join(items), st.lists(parts, min_size=1, max_size=max_size),
                     st.sampled_from([" ", "", "  ", "\t", "\n", "\u3000"]))


FRAGMENT = st.one_of(
    WORDS,
    string_of(EMOJI, min_size=1, max_size=6),
    string_of(st.one_of(ARABIC, HEBREW, BIDI), min_size=1, max_size=10),
    st.builds(lambda base, marks: base + marks, LATIN, string_of(COMBINING, min_size=1, max_size=6)),
    string_of(st.one_of(CONTROL, st.sampled_from("ab .")), min_size=1, max_size=10),
    string_of(PUNCTUATION, min_size=1, max_size=10),
    st.sampled_from(SPECIAL_SPELLINGS),
    st.text(max_size=20),
)


def repeated(unit: str, n: int) -> str:
    """``unit`` repeated to exactly ``n`` characters (``"x"`` for an empty unit)."""
    unit = unit or "x"
    return (unit * (n // len(unit) + 1))[:n]


#: Classes of text a visitor can type, at most a few hundred characters each (no lone surrogates: they cannot
#: arrive through a browser or a URL).
SHORT_CLASSES = [
    st.just(""),
    string_of(st.sampled_from(WHITESPACE), min_size=1, max_size=40),  # whitespace only
    string_of(EMOJI, min_size=1, max_size=30),  # emoji only
    joined(string_of(st.one_of(ARABIC, HEBREW), min_size=1, max_size=8)),  # right-to-left
    joined(string_of(st.one_of(ARABIC, HEBREW, BIDI, LATIN), min_size=1, max_size=8)),  # bidi mixed with Latin
    string_of(COMBINING, min_size=1, max_size=20),  # combining marks with nothing to combine with
    joined(st.builds(lambda base, marks: base + marks, LATIN, string_of(COMBINING, min_size=1, max_size=8))),
    string_of(st.one_of(CONTROL, st.sampled_from("\x00\x1b\x7f"), LATIN), min_size=1, max_size=40),  # control chars
    joined(FRAGMENT),  # mixed scripts
    st.builds(repeated, LATIN, st.integers(30, 300)),  # a long word
    string_of(PUNCTUATION, min_size=1, max_size=40),  # punctuation only
    joined(string_of(UNREADABLE, min_size=1, max_size=8)),  # only <unk> characters
    joined(st.one_of(st.sampled_from(SPECIAL_SPELLINGS), WORDS)),  # special-token spellings
    joined(st.sampled_from(SPECIAL_SPELLINGS[:4])),  # nothing but special-token spellings
    st.text(max_size=100),  # anything hypothesis likes (all of Unicode but surrogates)
    WORDS,
]
SHORT_TEXT = st.one_of(SHORT_CLASSES)
#: Every class of a visitor's text, the long ones included (very long words; around the 2,000-character limit;
#: 10,000 and 12,000 characters).
USER_TEXT = st.one_of(
    *SHORT_CLASSES,
    st.builds(repeated, LATIN, st.integers(1000, 3000)),  # one very long word
    st.builds(repeated, FRAGMENT, st.sampled_from([MAX_INPUT_CHARS, MAX_INPUT_CHARS + 1, 10_000, 12_000])),
    st.builds(repeated, FRAGMENT, st.integers(1000, 2500)),
)
SPECIAL_TEXT = joined(st.one_of(st.sampled_from(SPECIAL_SPELLINGS[:4]), WORDS))
SURROGATE_TEXT = st.builds(lambda a, s, b: a + s + b, st.one_of(WORDS, st.just("")),
                           string_of(SURROGATE, min_size=1, max_size=3), st.one_of(WORDS, st.just("")))


def mix(common: st.SearchStrategy[str], rare: st.SearchStrategy[str], every: int) -> st.SearchStrategy[str]:
    """``rare`` for one example in ``every``, else ``common`` (``st.one_of`` flattens, so a nested class would be
    drawn as one branch among ~20 and might never come up in a few dozen examples)."""
    return st.integers(0, every - 1).flatmap(lambda i: rare if i == 0 else common)


#: What a Python caller can pass: a visitor's text, or (one in five) one with lone surrogates in it.
ANY_STR = mix(USER_TEXT, SURROGATE_TEXT, 5)


# --- models ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ende() -> Checkpoint:
    return load_checkpoint(ROOT / "checkpoints" / "en-de")


@pytest.fixture(scope="module")
def brown() -> Checkpoint:
    return load_checkpoint(ROOT / "checkpoints" / "brown-lm")


@pytest.fixture(scope="module")
def tiny(tokenizer, make_model) -> Checkpoint:
    """The conftest fixtures as a checkpoint: a random 2+2-layer model (max_len 64) and the 400-piece tokenizer."""
    model = make_model(seed=0)
    return Checkpoint(model, tokenizer, model.cfg)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 (fails on a lone surrogate: what Streamlit and a UTF-8 terminal would do)."""
    return text.encode("utf-8")


def prepared(ckpt: Checkpoint, text: str):
    cfg = ckpt.config
    return prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)


def assert_input_error(exc: InputError, text: str) -> None:
    """An InputError is a ValueError with a message for the page, for one of the two documented reasons."""
    assert isinstance(exc, ValueError) and str(exc).strip()
    utf8(str(exc))
    assert len(text) > MAX_INPUT_CHARS or not clean_user_text(text)[0]


def source_or_none(ckpt: Checkpoint, text: str):
    """The prepared source, or ``None`` after checking that the InputError raised instead is a clear one."""
    try:
        return prepared(ckpt, text)
    except InputError as exc:
        assert_input_error(exc, text)
        return None


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
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e400", "9" * 5000, "١٢", "1_0", "0x10", "3:1234,5:88", "all",
                     "MEAN", "cross L2 H3", "encoder L1 H1", "self L9 H9", "1:2:3", ",,,", "2:-1", "\x00"]),
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
    for _value, note in (url.int_param({"n": raw}, "n", 5, 0, 100), url.float_param({"x": raw}, "x", 0.5, 0.0, 1.0),
                         url.bool_param({"b": raw}, "b", True), url.int_list_param({"d": raw}, "d", [], 0, 63),
                         url.text_param({"t": raw}, "t", "", 100), url.matrix_param({"m": raw}, "m", np.eye(2))):
        assert note is None or isinstance(note, str)
    assert 0 <= url.int_param({"n": raw}, "n", 5, 0, 100)[0] <= 100
    piece = lab.resolve_piece(ende.tokenizer, raw)
    assert piece is None or 0 <= piece < ende.tokenizer.vocab_size
    text, message = url.text_param({"t": raw}, "t", "", 100)
    assert len(text) <= 100 and (message is None) == (len(raw) <= 100)
    utf8(display_token(raw) + plotly_escape(raw) + cell_html(raw) + pieces_html([raw]) + tokens_html([raw], 0))
    assert "<" not in plotly_escape(raw) and "<" not in cell_html(raw)
    assert uav.word_labels([raw, "<eos>"])[-1] == "<eos>"
