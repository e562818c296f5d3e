"""BPE merge replay (``teaching.bpe_replay``) against ``tokenizers``: the replay ends where the tokenizer ends on
the training words, starts from the metaspace characters, and reads string merges and trained tokenizers alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.tokenizer import TextTokenizer
from teaching.bpe_replay import encode_by_replay, merge_table, piece_lengths, pre_tokenize, replay, segmentations

ROOT = Path(__file__).resolve().parent.parent
CKPT = ROOT / "checkpoints" / "en-de"
HAS_CKPT = (CKPT / "model.safetensors").is_file() and (CKPT / "tokenizer.json").is_file()


# --- BPE replay ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ckpt_tokenizer():
    if not HAS_CKPT:
        pytest.skip("checkpoints/en-de is missing")
    return TextTokenizer.from_file(CKPT / "tokenizer.json")


def _sentences(limit=200):
    from corpora.files import dataset_path, read_tsv

    try:
        pairs = read_tsv(dataset_path("train"), limit=limit)
    except Exception as exc:  # pragma: no cover - no data in this clone
        pytest.skip(f"training data unavailable: {exc}")
    return [s for p in pairs for s in (p.src, p.tgt)]


def test_replay_equals_tokenizers_on_training_words(ckpt_tokenizer):
    table = merge_table(ckpt_tokenizer.to_str())
    sentences = _sentences(200) + ["Bobby likes blackberries.", "  two  spaces ", "Öl 🙂 ünd ß", "x"]
    words = 0
    for s in sentences:
        assert (
            encode_by_replay(ckpt_tokenizer.backend, s, table)
            == ckpt_tokenizer.backend.encode(s, add_special_tokens=False).tokens
        ), s
        for w in pre_tokenize(ckpt_tokenizer.backend, s):
            words += 1
            steps = replay(w, table)
            assert "".join(steps[0].pieces) == w or "<unk>" in steps[0].pieces
            # every step merges
            assert all(len(b.pieces) < len(a.pieces) for a, b in zip(steps, steps[1:], strict=False))
            assert [s_.rank for s_ in steps[1:]] == sorted(s_.rank for s_ in steps[1:])  # ranks only increase
    assert words > 1000


def test_replay_starts_from_metaspace_characters(ckpt_tokenizer):
    table = merge_table(ckpt_tokenizer.to_str())
    assert pre_tokenize(ckpt_tokenizer.backend, "Bobby likes") == ["▁Bobby", "▁likes"]
    assert replay("▁Bobby", table)[0].pieces == ["▁", "B", "o", "b", "b", "y"]
    assert replay("▁a🙂", table)[0].pieces[-1] == "<unk>"


def test_merge_table_accepts_string_merges_and_trained_tokenizers():
    texts = ["the cat sat on the mat", "the hat is flat", "a bat and a rat"] * 3
    tok = TextTokenizer.train(texts, vocab_size=60, min_frequency=1)
    data = json.loads(tok.to_str())
    as_strings = dict(data)
    as_strings["model"] = dict(
        data["model"], merges=[" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    )
    t1, t2 = merge_table(tok.to_str()), merge_table(json.dumps(as_strings))
    assert t1.merges == t2.merges and len(t1.merges) > 5
    for s in texts + ["that mat", "cats"]:
        assert encode_by_replay(tok.backend, s, t1) == tok.backend.encode(s, add_special_tokens=False).tokens
    assert max(piece_lengths(t1.vocab)) >= 2
    seg = segmentations("the cat", ["▁the", "▁c", "at"])
    assert [len(seg[k]) for k in ("characters", "words", "pieces")] == [6, 2, 3]
