"""The three tokenizers (ours, MarianMT's unigram, GPT-2's byte-level BPE) are each a ``model.tokenizing.Tokenizer``:
``isinstance`` with the runtime-checkable protocol, and every member of the protocol exercised on every class (a
member added to the protocol without a check here fails :func:`test_every_protocol_member_is_exercised`). The pages
and ``ui/`` use only the protocol: no ``getattr`` probing of a tokenizer is left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hf_fixtures import TOKENIZER_LINES, write_tiny_gpt2_tokenizer, write_tiny_marian_tokenizer

from model.hf.tokenizers import GPT2TextTokenizer, MarianTextTokenizer, load_hf_tokenizer
from model.tokenizer import TextTokenizer
from model.tokenizing import KINDS, Encoding, Tokenizer

ROOT = Path(__file__).resolve().parent.parent
#: Lines every tokenizer reads without ``<unk>`` (Marian's target model decodes German).
GERMAN = TOKENIZER_LINES[1]  # "Die Katze saß auf der Matte."
TEXT = "Herr Müller isst grüne Äpfel."


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Tokenizer]:
    root = tmp_path_factory.mktemp("tokenizers")
    write_tiny_marian_tokenizer(root / "marian")
    write_tiny_gpt2_tokenizer(root / "gpt2")
    return {
        "bpe": TextTokenizer.train(TOKENIZER_LINES, vocab_size=200, min_frequency=1),
        "unigram": load_hf_tokenizer(root / "marian", "marian"),
        "byte-bpe": load_hf_tokenizer(root / "gpt2", "gpt2"),
    }


def protocol_members() -> set[str]:
    """The protocol's attributes (annotated) and methods / properties (defined on it)."""
    return {n for n in (*vars(Tokenizer), *Tokenizer.__annotations__) if not n.startswith("_")}


def _special(tok, name: str) -> None:
    value = getattr(tok, name)
    assert value is None or (isinstance(value, int) and 0 <= value < tok.vocab_size), (name, value)


def _eos(tok) -> None:
    assert isinstance(tok.eos_id, int) and tok.decode([tok.eos_id]) == ""  # a special: decoding skips it


def _word_start(tok) -> None:
    shown = [tok.display(p) for p in tok.encode("The cat sat on the mat.").tokens]
    assert len(tok.word_start) == 1 and sum(p.startswith(tok.word_start) for p in shown) >= 4, shown


def _backend(tok) -> None:
    if tok.kind == "unigram":
        assert tok.backend is None
    else:  # the merge replay reads this pipeline: it must cut the text as the tokenizer does
        assert tok.backend.encode(TEXT, add_special_tokens=False).tokens == tok.encode(TEXT).tokens


def _source_model(tok) -> None:
    if tok.kind != "unigram":
        assert tok.source_model is None
    else:  # the unigram view reads this model's scores: it must cut the text as the tokenizer does
        assert tok.source_model.encode(GERMAN, out_type=str) == tok.encode(GERMAN).tokens


def _encode(tok) -> None:
    enc = tok.encode(TEXT)
    assert isinstance(enc, Encoding) and len(enc.ids) == len(enc.tokens) == len(enc.offsets) > 0
    assert all(0 <= s <= e <= len(TEXT) for s, e in enc.offsets)
    assert tok.encode("").ids == []


def _encode_batch(tok) -> None:
    assert tok.encode_batch([TEXT, GERMAN, ""]) == [tok.encode(TEXT).ids, tok.encode(GERMAN).ids, []]


def _decode(tok) -> None:
    assert tok.decode(tok.encode(GERMAN).ids) == GERMAN
    assert tok.decode([tok.eos_id, *tok.encode(GERMAN).ids, tok.eos_id]) == GERMAN


def _tokens(tok) -> None:
    ids = tok.encode(TEXT).ids
    assert tok.tokens(ids) == [tok.id_to_token(i) for i in ids] == tok.encode(TEXT).tokens


def _id_to_token(tok) -> None:
    assert tok.id_to_token(tok.vocab_size + 5) == tok.id_to_token(-1) == "<unk>"
    assert tok.id_to_token(tok.eos_id) != "<unk>"


def _token_to_id(tok) -> None:
    enc = tok.encode(GERMAN)
    assert [tok.token_to_id(p) for p in enc.tokens] == enc.ids
    assert tok.token_to_id("no such piece ☃") is None


def _vocab_size(tok) -> None:
    last = tok.vocab_size - 1
    assert tok.vocab_size > 50 and tok.token_to_id(tok.id_to_token(last)) == last


def _display(tok) -> None:
    text = TOKENIZER_LINES[0]  # ASCII: GPT-2 shows a byte of a longer character as <0xC3>
    shown = [tok.display(p) for p in tok.encode(text).tokens]
    assert "".join(shown).replace(tok.word_start, " ").strip() == text  # every piece shown as the text it covers


def _from_display(tok) -> None:
    for piece in tok.encode(TEXT).tokens:
        assert tok.from_display(tok.display(piece)) == piece


def _to_str(tok) -> None:
    assert isinstance(tok.to_str(), str) and tok.to_str() == tok.to_str()


#: One check per protocol member.
EXERCISE = {
    "kind": lambda tok: tok.kind in KINDS,
    "word_start": _word_start,
    "pad_id": lambda tok: _special(tok, "pad_id"),
    "bos_id": lambda tok: _special(tok, "bos_id"),
    "eos_id": _eos,
    "unk_id": lambda tok: _special(tok, "unk_id"),
    "vocab_size": _vocab_size,
    "backend": _backend,
    "source_model": _source_model,
    "encode": _encode,
    "encode_batch": _encode_batch,
    "decode": _decode,
    "tokens": _tokens,
    "id_to_token": _id_to_token,
    "token_to_id": _token_to_id,
    "display": _display,
    "from_display": _from_display,
    "to_str": _to_str,
}


def test_every_protocol_member_is_exercised():
    assert set(EXERCISE) == protocol_members()


@pytest.mark.parametrize("kind", KINDS)
def test_each_tokenizer_is_a_tokenizer(tokenizers, kind):
    tok = tokenizers[kind]
    assert isinstance(tok, Tokenizer) and tok.kind == kind
    for name, check in EXERCISE.items():
        assert check(tok) is not False, name


def test_the_classes_and_their_kinds():
    assert (TextTokenizer.kind, GPT2TextTokenizer.kind, MarianTextTokenizer.kind) == KINDS


def test_an_object_missing_a_member_is_not_a_tokenizer(tokenizers):
    class NoDisplay:  # what the pages used to accept, probing with getattr
        kind, word_start, pad_id, bos_id, eos_id, unk_id = "bpe", "▁", 0, 1, 2, 3

    assert not isinstance(NoDisplay(), Tokenizer)


def test_pages_and_ui_never_probe_a_tokenizer():
    probe = re.compile(r"getattr\((tok|tokenizer)\b")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("app_pages", "ui", "model", "teaching")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if probe.search(line)
    ]
    assert not found, found
