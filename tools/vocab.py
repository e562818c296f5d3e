"""Which vocabulary a run should learn: candidate BPE vocabularies learned on a mixture's sentence pairs, each
measured on the evaluation sets beside the size its weights would have on disk.

A larger vocabulary cuts fewer news and technical words into pieces (a word in pieces is harder to translate:
the Translate page warns when many are), but every piece adds a row of ``d_model`` numbers to the (tied) embedding,
and the shipped weights must stay small. This prints both sides of that trade in one table::

    python -m tools.vocab --mix "tatoeba=1,multi30k=2,…" --sizes 8000,16000,32000 --compare checkpoints/en-de

Each candidate is learned as a run learns its own (:meth:`model.tokenizer.TextTokenizer.train` on both sides of
every training pair of ``--mix``, evaluation sets already removed by :func:`corpora.mixture.mixture_pairs`), with
``--compare``'s architecture for the sizes. Nothing is saved unless ``--save DIR`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from corpora import mixture, parallel
from corpora.files import DataError
from evaluation.suite import PIECE_SETS, EvalSet, available_sets, piece_stats
from model.config import ModelConfig
from model.errors import CheckpointError
from model.tokenizer import TextTokenizer
from model.tokenizing import Tokenizer
from model.transformer import Transformer
from training.batches import pair_sides

#: Bytes per weight on disk: the shipped file is fp16; int8 would need the loss measured first.
BYTES = {"fp16": 2, "int8": 1}


@dataclass(frozen=True)
class Candidate:
    """One vocabulary in the table: its ``name``, the tokenizer, the seconds it took to learn (0 for one read from
    a checkpoint) and the size asked for (``None`` for one read; a small text may give fewer pieces)."""

    name: str
    tokenizer: Tokenizer
    seconds: float = 0.0
    asked: int | None = None


def parameters(cfg: ModelConfig, vocab_size: int) -> int:
    """Number of weights of ``cfg``'s architecture with a vocabulary of ``vocab_size`` pieces: the embedding is
    ``vocab_size × d_model`` and, when ``cfg.tie_embeddings``, shared by the source, the target and the output
    projection (:meth:`model.transformer.Transformer.count_parameters`)."""
    return Transformer.count_parameters(ModelConfig.from_dict({**cfg.to_dict(), "vocab_size": vocab_size}))


def learn(texts: list[str], sizes: list[int]) -> list[Candidate]:
    """A BPE vocabulary of each of ``sizes`` pieces learned on ``texts`` (one string per side of each pair)."""
    out = []
    for size in sizes:
        start = time.perf_counter()
        tok = TextTokenizer.train(texts, vocab_size=size)
        out.append(Candidate(f"learned {size:,}", tok, time.perf_counter() - start, size))
    return out


def table(candidates: list[Candidate], sets: list[EvalSet], cfg: ModelConfig | None) -> str:
    """A Markdown table, one row per candidate: its real size (pieces), given ``cfg`` the weights (millions) and
    their size in MB (10^6 bytes) at fp16 and int8, then the share of words cut into pieces and of
    unknown pieces on the English and German sides of each of ``sets`` (:func:`evaluation.suite.piece_stats`)."""
    head = ["vocabulary", "pieces"] + (["weights (M)", "fp16 MB", "int8 MB"] if cfg is not None else [])
    for s in sets:
        head += [f"{s.name} EN split", f"{s.name} DE split"]
    head += ["unknown (all sets)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in candidates:
        row = [c.name, f"{c.tokenizer.vocab_size:,}"]
        if cfg is not None:
            n = parameters(cfg, c.tokenizer.vocab_size)
            row += [f"{n / 1e6:.1f}"] + [f"{n * b / 1e6:.1f}" for b in BYTES.values()]
        unknown = pieces = 0.0
        for s in sets:
            for texts in (s.sources, [refs[0] for refs in s.references]):
                st = piece_stats(c.tokenizer, texts)
                row.append(f"{100 * st['split_word_rate']:.1f} %")
                unknown += st["unknown_rate"] * st["pieces"]
                pieces += st["pieces"]
        row.append(f"{100 * unknown / max(pieces, 1):.2f} %")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; returns 0, or 2 with a message (no traceback) for a corpus that is not prepared, a checkpoint
    that cannot be read or a size that is not a whole number ≥ 100."""
    p = argparse.ArgumentParser(prog="python -m tools.vocab", description=__doc__.split("\n\n")[0])
    p.add_argument("--mix", required=True, help="the corpora and shares to learn on, as trainer.train --mix")
    p.add_argument("--sizes", default="8000,16000,24000,32000", help="comma-separated vocabulary sizes")
    p.add_argument(
        "--compare",
        metavar="CHECKPOINT",
        help="a checkpoint whose tokenizer is the first row and whose architecture gives the sizes on disk",
    )
    p.add_argument("--sets", default=",".join(PIECE_SETS), help="evaluation sets, as evaluation.evaluate names them")
    p.add_argument("--prepared", default=str(parallel.PREPARED))
    p.add_argument("--shared", default=str(parallel.SHARED_DATA))
    p.add_argument("--save", metavar="DIR", help="write each learned vocabulary to DIR/bpe-SIZE.json")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        if not sizes or min(sizes) < 100:
            raise ValueError
    except ValueError:
        print(f"error: --sizes {args.sizes!r}: give whole numbers of at least 100, comma-separated")
        return 2
    # the tokenizers library takes every core by default; this usually runs beside a training run
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    try:
        sets, _ = available_sets(Path(args.prepared), Path(args.shared))
        wanted = [n.strip() for n in args.sets.split(",") if n.strip()]
        sets = [s for s in sets if s.name in wanted]
        if not sets:
            print(
                f"error: none of the sets {wanted} is on this machine (python -m corpora prepare all, and "
                f"../shared/data)"
            )
            return 2
        mix = mixture.mixture_pairs(mixture.parse_repeats(args.mix, {}), Path(args.prepared), Path(args.shared))
        cfg, first = None, []
        if args.compare:
            from model.checkpoint import load_checkpoint

            ckpt = load_checkpoint(args.compare, "cpu")
            cfg, first = ckpt.config, [Candidate(f"{args.compare} (as shipped)", ckpt.tokenizer)]
    except (CheckpointError, DataError, OSError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    texts = pair_sides(mix.train)
    print(
        f"learning {len(sizes)} vocabularies on {len(mix.train):,} pairs ({len(texts):,} texts) of {args.mix}",
        file=sys.stderr,
    )
    learned = learn(texts, sizes)
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        for c in learned:
            if isinstance(c.tokenizer, TextTokenizer):  # a learned one always is; the protocol has no save
                c.tokenizer.save(Path(args.save) / f"bpe-{c.asked}.json")
    print(table(first + learned, sets, cfg))
    print(
        "\nsplit: share of words (runs of letters and digits) cut into more than one piece; unknown: share of "
        "pieces that are <unk>; MB = 10^6 bytes of weights, the file adds a few kB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
