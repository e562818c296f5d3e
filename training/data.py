"""The run's corpus as sentence pairs: the shipped Ding EN–DE pairs (sentences, phrases, words), the user's TSV
files, or the Brown corpus's English sentences (a decoder-only model's; :mod:`corpora.brown`), a monolingual text
being a one-sided ``Pair(text, "")``."""

from __future__ import annotations

from pathlib import Path

from corpora import mixture, parallel
from corpora.brown import brown_path, read_lines
from corpora.files import Pair, dataset_path, read_tsv
from training.config import TrainConfig


def monolingual(texts: list[str]) -> list[Pair]:
    """Texts as one-sided pairs ``Pair(text, "")``: the form a decoder-only model's monolingual corpus takes."""
    return [Pair(t, "") for t in texts]


def load_test(config: TrainConfig) -> list[Pair]:
    """The test split of ``config.corpus`` under ``config.data_dir`` (Ding test pairs, or Brown test sentences as
    one-sided pairs). Raises ``DataError`` when the file is missing."""
    if config.corpus == "brown":
        return monolingual(read_lines(brown_path("test", Path(config.data_dir) / "brown")))
    return read_tsv(dataset_path("test", Path(config.data_dir)))


def load_data(config: TrainConfig) -> tuple[list[Pair], list[Pair], list[Pair], list[Pair]]:
    """``(sentences, phrases, words, valid)`` pairs from the shipped corpus, the user's TSV files or the mixture of
    the prepared real corpora (``--mix``, :func:`corpora.mixture.mixture_pairs`) (Brown:
    one-sided pairs, no phrases or words). Phrases and words are read only when a run samples them
    (``--phrases-per-epoch``, ``--words-per-epoch`` or ``--dict-share``) and trains on the shipped sentences. With
    ``--reverse`` every pair comes German first (:func:`reversed_pairs`).
    Raises ``DataError`` when a file is missing or malformed."""
    data_dir = Path(config.data_dir)
    if config.corpus == "brown":
        sentences = monolingual(read_lines(brown_path("train", data_dir / "brown")))
        valid = monolingual(read_lines(brown_path("valid", data_dir / "brown")))
        return sentences[: config.limit_train or None], [], [], valid
    if config.mix:
        mix = mixture.mixture_pairs(mixture.parse_repeats(config.mix, {}), parallel.PREPARED, parallel.SHARED_DATA)
        sentences = mix.train
        valid = read_tsv(config.valid_tsv) if config.valid_tsv else mix.valid
    else:
        sentences = read_tsv(config.train_tsv or dataset_path("train", data_dir))
        valid = read_tsv(config.valid_tsv or dataset_path("valid", data_dir))

    def dictionary(kind: str, per_epoch: int) -> list[Pair]:
        # an explicit --dict-share reads the dictionary for any sentences (a real-pairs TSV too); the per-epoch
        # counts keep their old meaning, the Ding recipe's, and stay off for a TSV
        wanted = config.dict_share or (per_epoch and not config.train_tsv)
        return read_tsv(dataset_path(kind, data_dir)) if wanted else []

    phrases, words = dictionary("phrases", config.phrases_per_epoch), dictionary("words", config.words_per_epoch)
    if config.limit_train:
        sentences = sentences[: config.limit_train]
    if config.reverse:  # German → English: every pair turned round
        sentences, phrases, words, valid = (reversed_pairs(p) for p in (sentences, phrases, words, valid))
    return sentences, phrases, words, valid


def reversed_pairs(pairs: list[Pair]) -> list[Pair]:
    """``pairs`` with source and target swapped (``--reverse``: a German → English model)."""
    return [Pair(p.tgt, p.src) for p in pairs]
