"""Replay of byte-pair-encoding merges (Sennrich et al. 2016) for one pre-tokenized word, step by step.

The tokenizer's ``tokenizer.json`` lists its merges in the order they were learned (rank 0 first). Encoding a
word starts from its characters (a character missing from the vocabulary becomes ``<unk>``) and repeatedly
applies the **lowest-rank** merge among adjacent pairs, left to right on every occurrence, until no listed
pair is left. With the Metaspace pre-tokenizer (``prepend_scheme="always"``, ``split=True``) a word is the
text up to the next space with ``▁`` standing for the space before it, e.g. ``"▁Bobby"``; the first word gets
a ``▁`` too. GPT-2's byte-level BPE (Radford et al. 2019) replays the same way on the characters that stand for
its bytes (``"ĠMÃ¼ller"`` is " Müller"; :func:`~model.hf.byte_level.readable_piece` shows them as text).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from model.hf.byte_level import byte_level_text
from model.tokenizer import replace_surrogates

UNK = "<unk>"


@dataclass(frozen=True)
class MergeTable:
    """``merges``: ``[(left, right)]`` in rank order; ``ranks``: pair → rank; ``vocab``: piece → id."""

    merges: Sequence[tuple[str, str]]
    ranks: Mapping[tuple[str, str], int] = field(repr=False)
    vocab: Mapping[str, int] = field(repr=False)
    unk: str | None = UNK


@dataclass(frozen=True)
class Step:
    """One replay step: the pieces after it, and the merge applied (``None`` for the starting characters)."""

    pieces: list[str]
    merge: tuple[str, str] | None = None
    rank: int | None = None


def merge_table(tokenizer_json: str) -> MergeTable:
    """Parse a ``tokenizers`` BPE JSON (``Tokenizer.to_str()``). Merges may be ``"a b"`` strings or ``["a", "b"]``.

    Raises ``ValueError`` when the model is not BPE.
    """
    model = json.loads(tokenizer_json)["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"not a BPE tokenizer: {model.get('type')!r}")
    merges: list[tuple[str, str]] = []
    for m in model["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        merges.append((left, right))
    ranks: dict[tuple[str, str], int] = {}
    for r, pair in enumerate(merges):
        ranks.setdefault(pair, r)
    return MergeTable(merges, ranks, dict(model["vocab"]), model.get("unk_token"))


def initial_symbols(word: str, table: MergeTable) -> list[str]:
    """The word's characters; one not in the vocabulary becomes ``<unk>`` (no ``fuse_unk``)."""
    return [c if c in table.vocab or table.unk is None else table.unk for c in word]


def replay(word: str, table: MergeTable) -> list[Step]:
    """All steps of BPE on one pre-tokenized ``word`` (e.g. ``"▁blackberries."``): first the characters, then one
    step per merge rule applied (to every non-overlapping occurrence, left to right). The last step's pieces
    are what ``tokenizers`` produces for this word."""
    pieces = initial_symbols(word, table)
    steps = [Step(list(pieces))]
    while len(pieces) > 1:
        best, best_rank = None, None
        for pair in pairwise(pieces):
            r = table.ranks.get(pair)
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = pair, r
        if best is None:
            break
        merged, i = [], 0
        while i < len(pieces):
            if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                merged.append(pieces[i] + pieces[i + 1])
                i += 2
            else:
                merged.append(pieces[i])
                i += 1
        pieces = merged
        steps.append(Step(list(pieces), best, best_rank))
    return steps


def pre_tokenize(backend, text: str) -> list[str]:
    """The words BPE sees: ``backend`` (a ``tokenizers.Tokenizer``) normalises and pre-tokenizes ``text`` (a lone
    surrogate read as U+FFFD, as :meth:`~model.tokenizer.TextTokenizer.encode` reads it)."""
    text = replace_surrogates(text)
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return [text] if text else []
    return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text)]


def encode_by_replay(backend, text: str, table: MergeTable) -> list[str]:
    """All pieces of ``text`` by replaying each word; equals ``backend.encode(text).tokens`` (tested)."""
    return [p for w in pre_tokenize(backend, text) for p in replay(w, table)[-1].pieces]


def piece_lengths(vocab: Iterable[str], specials=("<pad>", "<bos>", "<eos>", "<unk>"), show=None) -> list[int]:
    """Length in characters of every vocabulary piece (the ``▁`` marker not counted; specials skipped).

    ``show`` maps a piece to the text counted (e.g. :func:`~model.hf.byte_level.readable_piece` for byte-level
    pieces, whose leading ``␣`` is then not counted either)."""
    if show is not None:
        return [len(show(p).lstrip("␣")) for p in vocab if p not in specials]
    return [len(p.replace("▁", "")) for p in vocab if p not in specials]


def own_pieces(backend, word: str, byte_level: bool = False) -> list[str] | None:
    """The tokenizer's own pieces for the pre-tokenized ``word`` encoded alone, to check a replay against; ``None``
    when the word's text alone does not pre-tokenize back to ``word``. The text is ``word`` without its ``▁``
    (Metaspace puts it back in front of a lone word) or, for byte-level BPE, the text its bytes spell."""
    alone = byte_level_text(word) if byte_level else (word[1:] if word.startswith("▁") else word)
    if not alone or pre_tokenize(backend, alone) != [word]:
        return None
    return backend.encode(alone, add_special_tokens=False).tokens


def segmentations(text: str, pieces: list[str]) -> dict[str, list[str]]:
    """The same text as ``characters`` (spaces excluded), whitespace ``words`` and BPE ``pieces``."""
    return {"characters": [c for c in text if not c.isspace()], "words": text.split(), "pieces": list(pieces)}
