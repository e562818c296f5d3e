"""The mixture of the prepared corpora: each corpus's training pairs repeated by its share, checked once more
against every evaluation set known now, and the corpora's first valid pairs interleaved. The trainer mixes them in
memory (``--mix``); ``python -m corpora prepare mixture`` writes ``mixture.train.tsv.gz`` and
``mixture.valid.tsv.gz``, which the trainer reads with ``--train-tsv`` / ``--valid-tsv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpora import parallel
from corpora.extra import EXTRA_CORPORA
from corpora.files import ASSETS_DATA, DataError, Pair, dataset_path, read_tsv, write_tsv_gz
from corpora.parallel import (
    BACKTRANSLATED,
    PARALLEL,
    PREPARED,
    SHARED_DATA,
    evaluation_keys,
    evaluation_sets,
    interleave,
    prepared_path,
    remove_leaks,
)

#: Every corpus a mixture can name: the real pairs of :data:`~corpora.parallel.PARALLEL`, the general-domain files
#: by their stem, the back-translated pairs, and the shipped Ding.
MIXABLE = (*PARALLEL, *EXTRA_CORPORA, BACKTRANSLATED, "ding")
#: The mixture's default shares: how many times each corpus's training pairs are repeated. Multi30K is the target
#: domain of the headline test set and one seventh of Tatoeba's size, so it is seen twice per epoch.
DEFAULT_REPEATS = {"tatoeba": 1, "multi30k": 2, "bcontrast": 1, "ding": 1}
#: Validation pairs taken from each corpus's valid split into the mixture's valid file.
VALID_PER_CORPUS = 400


def parse_repeats(text: str, base: dict[str, int] | None = None) -> dict[str, int]:
    """``"tatoeba=1,multi30k=2"`` → ``{"tatoeba": 1, "multi30k": 2, …}`` over ``base`` (default
    :data:`DEFAULT_REPEATS`; pass ``{}`` for only the corpora named). 0 leaves a corpus out.

    Raises:
        DataError: an item that is not ``corpus=N`` with a whole N ≥ 0, or a corpus that is not in :data:`MIXABLE`.
    """
    repeats = dict(DEFAULT_REPEATS if base is None else base)
    for item in filter(None, (t.strip() for t in str(text).split(","))):
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise DataError(f"the mixture wants corpus=N items, e.g. multi30k=2 (got {item!r})")
        repeats[name.strip()] = int(value)
    unknown = set(repeats) - set(MIXABLE)
    if unknown:
        raise DataError(f"unknown corpus in the mixture: {', '.join(sorted(unknown))} (known: {', '.join(MIXABLE)})")
    return repeats


def prepared_corpora(out: Path | None = None) -> list[str]:
    """The corpora a mixture can take now: each of :data:`MIXABLE` whose training split is prepared in ``out``
    (default :data:`corpora.parallel.PREPARED`, read at the call), and ``"ding"`` (shipped)."""
    out = parallel.PREPARED if out is None else out
    return [c for c in MIXABLE[:-1] if prepared_path(c, "train", out).is_file()] + ["ding"]


@dataclass(frozen=True)
class Mixture:
    """A mixture in memory: the training pairs (each corpus ``repeats[corpus]`` times), the valid pairs (the first
    ``valid_per_corpus`` of each chosen corpus's valid split, interleaved), ``counts`` = training pairs per corpus
    (repeats included) and the training pairs ``removed`` as leaks."""

    train: list[Pair]
    valid: list[Pair]
    counts: dict[str, int]
    removed: int


def mixture_pairs(
    repeats: dict[str, int] | None = None,
    out: Path = PREPARED,
    shared: Path = SHARED_DATA,
    valid_per_corpus: int = VALID_PER_CORPUS,
) -> Mixture:
    """Mix the prepared corpora in memory (what ``--mix`` trains on and :func:`prepare_mixture` writes), re-checking
    every training pair against every evaluation set known now (a corpus prepared later adds held-out sets).

    Raises:
        DataError: a ``repeats`` key that is not a corpus, a corpus with a share that is not prepared in ``out`` (the
            message names the command that prepares it), or no pairs at all.
    """
    repeats = parse_repeats("", repeats)
    missing = [c for c in MIXABLE[:-1] if repeats.get(c, 0) and not prepared_path(c, "train", out).is_file()]
    if BACKTRANSLATED in missing:
        raise DataError(
            f"{BACKTRANSLATED} not made in {out}: run python -m tools.backtranslate --checkpoint "
            "<a German → English run> first (docs/training.md, Back-translation), or give it the share 0"
        )
    if missing:
        one = "extra" if missing[0] in EXTRA_CORPORA else missing[0]
        raise DataError(
            f"{', '.join(missing)} not prepared in {out}: run 'python -m corpora prepare all' (or "
            f"prepare {one}) first, or give it the share 0"
        )
    sources = {c: prepared_path(c, "train", out) for c in MIXABLE[:-1] if repeats.get(c, 0)}
    if repeats.get("ding", 0):
        sources["ding"] = dataset_path("train", ASSETS_DATA)
    if not sources:
        raise DataError("the mixture is empty: give at least one corpus a share above 0")
    keys = evaluation_keys(evaluation_sets(out, shared))
    counts: dict[str, int] = {}
    train: list[Pair] = []
    removed = 0
    for corpus, path in sources.items():
        pairs = read_tsv(path, allow_empty=True)
        kept = remove_leaks(pairs, keys)
        removed += len(pairs) - len(kept)
        counts[corpus] = len(kept) * repeats[corpus]
        train.extend(kept * repeats[corpus])
    valid_groups = []
    for corpus in sources:
        path = dataset_path("valid", ASSETS_DATA) if corpus == "ding" else prepared_path(corpus, "valid", out)
        if path.is_file():
            valid_groups.append(read_tsv(path, allow_empty=True)[:valid_per_corpus])
    return Mixture(train, interleave(valid_groups), counts, removed)


def prepare_mixture(
    repeats: dict[str, int] | None = None,
    out: Path = PREPARED,
    shared: Path = SHARED_DATA,
    valid_per_corpus: int = VALID_PER_CORPUS,
    to: Path | None = None,
) -> dict[str, int]:
    """Write :func:`mixture_pairs` of the corpora prepared in ``out`` as ``mixture.train.tsv.gz`` and
    ``mixture.valid.tsv.gz`` in ``to`` (default ``out``: another folder leaves ``out``'s mixture, the one the
    shipped model was selected on, as it is, and holds only what a run needs, to carry to another machine). Returns
    ``{"train": n, "valid": n, "removed": n, <corpus>: n}``.

    Raises:
        DataError: as :func:`mixture_pairs`; also when no corpus is prepared yet in ``out``.
    """
    if prepared_corpora(out) == ["ding"]:
        raise DataError(f"nothing prepared in {out}: run 'python -m corpora prepare all' (or one corpus) first")
    repeats = parse_repeats("", repeats)
    # The command-line default names every corpus; one that is not prepared yet is left out here rather than refused
    for corpus in PARALLEL:
        if not prepared_path(corpus, "train", out).is_file():
            repeats[corpus] = 0
    mix = mixture_pairs(repeats, out, shared, valid_per_corpus)
    to = Path(to or out)
    to.mkdir(parents=True, exist_ok=True)
    write_tsv_gz(prepared_path("mixture", "train", to), mix.train)
    write_tsv_gz(prepared_path("mixture", "valid", to), mix.valid)
    return {"train": len(mix.train), "valid": len(mix.valid), "removed": mix.removed, **mix.counts}
