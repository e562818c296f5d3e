"""The Tokenization page's logic for the tokenizers of Hugging Face folders, without Streamlit: the unigram view
(``teaching.unigram``) for MarianMT and the merge replay on GPT-2's byte-level BPE (``teaching.bpe_replay``)."""

from __future__ import annotations

import math

import pytest
from hf_fixtures import TOKENIZER_LINES, write_tiny_gpt2_tokenizer, write_tiny_marian_tokenizer

from model.hf.byte_level import readable_piece
from model.hf.tokenizers import load_hf_tokenizer
from teaching import unigram
from teaching.bpe_replay import encode_by_replay, merge_table, own_pieces, piece_lengths, pre_tokenize, replay


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt-tiny")
    write_tiny_marian_tokenizer(folder)
    return load_hf_tokenizer(folder, "marian")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-tiny")
    write_tiny_gpt2_tokenizer(folder)
    return load_hf_tokenizer(folder, "gpt2")


# --- unigram (MarianMT) ------------------------------------------------------------------------------------------
def test_the_best_split_of_each_word_is_the_tokenizers_own(marian):
    for text in TOKENIZER_LINES + ["Herr Müller isst 🙂 Äpfel", ">>de<< Die Katze"]:
        pieces = [p for w in unigram.words(marian, text) for p in unigram.best_splits(marian, w)[0].pieces]
        rest = marian.split_language_code(text)[1]
        assert pieces == marian.source_model.encode(rest, out_type=str)


def test_splits_are_ranked_and_scored_like_sentencepiece(marian):
    pb = pytest.importorskip("google.protobuf")  # noqa: F841 (SentencePiece's scored n-best needs protobuf)
    for word in ("Müller", "Bäckerei", "Kirschen", "x🙂y", "the"):
        splits = unigram.best_splits(marian, word, n=5)
        assert 1 <= len(splits) <= 5
        assert [s.log_prob for s in splits] == sorted((s.log_prob for s in splits), reverse=True)
        assert len({tuple(s.pieces) for s in splits}) == len(splits)
        reference = marian.source_model.nbest_encode(word, nbest_size=5, out_type="proto").nbests
        assert [s.pieces for s in splits] == [[p.piece for p in n.pieces] for n in reference]
        assert [s.log_prob for s in splits] == pytest.approx([n.score for n in reference], abs=1e-3)


def test_piece_rows_give_ids_and_probabilities(marian):
    best = unigram.best_splits(marian, "Bäckerei")[0]
    rows = unigram.piece_rows(marian, best)
    assert [r["id"] for r in rows] == marian.encode("Bäckerei").ids
    for row in rows:
        assert row["log p"] < 0 and row["p"] == pytest.approx(math.exp(row["log p"]), rel=1e-2)
    assert sum(r["log p"] for r in rows) == pytest.approx(best.log_prob, abs=1e-2)
    unknown = unigram.piece_rows(marian, unigram.best_splits(marian, "🙂")[0])
    assert any(r["id"] == marian.unk_id and r["log p"] is None and "<unk>" in r["piece"] for r in unknown)


def test_split_rows_compare_with_the_best(marian):
    rows = unigram.split_rows(unigram.best_splits(marian, "Kirschen", n=4))
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0]["P / P(best)"] == 1.0 and all(0 < r["P / P(best)"] <= 1.0 for r in rows)
    assert unigram.split_rows([]) == [] and unigram.best_splits(marian, "\x07") == []


def test_words_skip_the_language_code(marian):
    assert unigram.words(marian, ">>de<< Die  Katze\tschläft") == ["Die", "Katze", "schläft"]
    assert unigram.words(marian, "   ") == []


def test_vocabulary_extremes_and_pieces(marian):
    most, least = unigram.vocab_extremes(marian, 5)
    assert len(most) == len(least) == 5
    assert [r["log p"] for r in most] == sorted((r["log p"] for r in most), reverse=True)
    assert most[-1]["log p"] >= least[0]["log p"]
    pieces = unigram.unigram_pieces(marian)
    assert "</s>" not in pieces and "<unk>" not in pieces and all(marian.token_to_id(p) is not None for p in pieces)
    assert min(piece_lengths(dict.fromkeys(pieces))) >= 0


# --- byte-level BPE (GPT-2) --------------------------------------------------------------------------------------
def test_merge_replay_reproduces_byte_level_bpe(gpt2):
    table = merge_table(gpt2.to_str())
    assert table.unk is None and len(table.merges) > 0
    for text in TOKENIZER_LINES + ["Herr Müller isst 🙂 Äpfel", "  two  spaces\n", "<|endoftext|>"]:
        assert encode_by_replay(gpt2.backend, text, table) == gpt2.encode(text).tokens
        for word in pre_tokenize(gpt2.backend, text):
            assert own_pieces(gpt2.backend, word, byte_level=True) == replay(word, table)[-1].pieces


def test_byte_level_words_and_lengths_read_as_text(gpt2):
    words = pre_tokenize(gpt2.backend, "Herr Müller")
    assert [readable_piece(w) for w in words] == ["Herr", "␣Müller"]
    steps = replay(words[1], merge_table(gpt2.to_str()))
    assert [readable_piece(p) for p in steps[0].pieces][:3] == ["␣", "M", "<0xC3>"]  # the bytes of ü, unmerged
    table = merge_table(gpt2.to_str())
    lengths = piece_lengths(table.vocab, specials=("<|endoftext|>",), show=readable_piece)
    assert len(lengths) == len(set(table.vocab) - {"<|endoftext|>"}) and max(lengths) < 20
    assert piece_lengths({"Ġthe": 0}, show=readable_piece) == [3]
