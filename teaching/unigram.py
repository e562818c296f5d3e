"""How a unigram language-model tokenizer (Kudo 2018) cuts a word: the best split, its runners-up and their scores.

A unigram tokenizer (SentencePiece, as in MarianMT) keeps a vocabulary of pieces, each with a probability learned
by EM. A segmentation's probability is the product of its pieces' probabilities (a sum of log-probabilities), and
the tokenizer picks the most probable one with the Viterbi algorithm. BPE (Sennrich et al. 2016) instead replays
its learned merges in order and never compares alternatives. Pieces never cross a word start (``▁``), so a word's
split in a sentence is the split of the word alone.

The functions take a unigram :class:`~model.tokenizing.Tokenizer` (``kind == "unigram"``: its ``source_model`` is
the SentencePiece processor, as in :class:`~model.hf.tokenizers.MarianTextTokenizer`) and return plain numbers and
rows for the Tokenization page.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from model.hf.tokenizers import split_language_code

#: SentencePiece scores a character it does not know as the lowest piece score minus this, per character.
UNKNOWN_PENALTY = 10.0


@dataclass(frozen=True)
class Split:
    """One segmentation of a word: its pieces (SentencePiece's own, ``▁`` marking the word start) and the sum of
    their log-probabilities (natural log)."""

    pieces: list[str]
    log_prob: float


def _normal_ids(sp) -> list[int]:
    return [i for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]


@functools.lru_cache(maxsize=4)
def _lowest_score(sp) -> float:
    return min(sp.get_score(i) for i in _normal_ids(sp))


def piece_score(tok, piece: str) -> float | None:
    """The unigram log-probability (natural log) of ``piece`` in the tokenizer's source model; ``None`` when the
    model does not have it (an unknown character)."""
    sp = tok.source_model
    pid = sp.piece_to_id(piece)
    return None if sp.is_unknown(pid) else float(sp.get_score(pid))


def piece_log_prob(tok, piece: str) -> float:
    """The log-probability SentencePiece gives ``piece``: its score, or for an unknown piece (characters not in the
    vocabulary) ``(lowest score − UNKNOWN_PENALTY) × characters``."""
    score = piece_score(tok, piece)
    if score is not None:
        return score
    return (_lowest_score(tok.source_model) - UNKNOWN_PENALTY) * len(piece)


def words(tok, text: str) -> list[str]:
    """The words the unigram model cuts one by one: the text after a language code (``>>de<<``), split at
    whitespace."""
    return split_language_code(text)[1].split()


def best_splits(tok, word: str, n: int = 4) -> list[Split]:
    """The ``n`` most probable segmentations of ``word`` (fewer when there are fewer), most probable first: the
    first is the tokenizer's own (Viterbi) split. Empty for a word that normalises to nothing."""
    splits = [
        Split(list(p), sum(piece_log_prob(tok, x) for x in p))
        for p in tok.source_model.nbest_encode_as_pieces(word, n)
        if p
    ]
    return sorted(splits, key=lambda s: -s.log_prob)


def piece_rows(tok, split: Split) -> list[dict]:
    """One row per piece of ``split``: the piece, its id in ``vocab.json``, its log-probability and probability
    (``None`` for an unknown piece, which is ``<unk>`` to the model)."""
    rows = []
    for piece in split.pieces:
        score = piece_score(tok, piece)
        pid = tok.token_to_id(piece)
        rows.append(
            {
                "piece": piece if pid is not None else f"{piece} → <unk>",
                "id": pid if pid is not None else tok.unk_id,
                "log p": None if score is None else round(score, 3),
                "p": None if score is None else float(f"{math.exp(score):.3g}"),
            }
        )
    return rows


def split_rows(splits: list[Split]) -> list[dict]:
    """One row per segmentation: rank, pieces, total log-probability, and its probability relative to the best
    (``exp(log P − log P_best)``: 0.05 means twenty times less likely)."""
    if not splits:
        return []
    best = splits[0].log_prob
    return [
        {
            "rank": r + 1,
            "pieces": " | ".join(s.pieces),
            "log P": round(s.log_prob, 3),
            "P / P(best)": float(f"{math.exp(s.log_prob - best):.3g}"),
        }
        for r, s in enumerate(splits)
    ]


def vocab_extremes(tok, k: int = 20) -> tuple[list[dict], list[dict]]:
    """The ``k`` most and ``k`` least probable pieces of the source model, as rows ``{piece, log p}``."""
    sp = tok.source_model
    ranked = sorted(_normal_ids(sp), key=lambda i: -sp.get_score(i))
    row = lambda i: {"piece": sp.id_to_piece(i), "log p": round(sp.get_score(i), 3)}  # noqa: E731
    return [row(i) for i in ranked[:k]], [row(i) for i in ranked[-k:]]


def unigram_pieces(tok) -> list[str]:
    """Every ordinary piece of the source model (no control or unknown symbol), for the length histogram."""
    sp = tok.source_model
    return [sp.id_to_piece(i) for i in _normal_ids(sp)]
