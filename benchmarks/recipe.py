"""A/B runs of the translator's recipe: ``python -m benchmarks.recipe [--warm CKPT | --real] [--launch] [--only a,b]
RUN …``.

Each variant is the same short training run (same seed, data, schedule and step/minute budget) with one knob
changed against ``base``. ``--launch`` trains the variants one after another under ``runs/ab-<name>`` (skipping
those whose folder exists); without it, the table is printed from the run folders given (default
``runs/ab-*``). With ``--warm CKPT`` every variant is instead a warm start from that checkpoint (the way the
shipped model is carried on: the leg recipe of :data:`WARM_BASE`), in ``runs/warm-<name>``: it measures what a knob
does to an already trained model, which is what the next leg has to choose. With ``--real`` every variant trains from
scratch on the real-pairs mixture (:data:`REAL_BASE`), in ``runs/real-<name>``. The table has the knob, steps, tokens
seen, minutes, valid loss and the best valid chrF/BLEU (over the evaluation sentences the runs were given), and the
command that reproduces the row.

A row says how a knob changed a *short* run: a knob that regularises (dropout, word dropout) may lose early and
win late, so read the table as a curve's first stretch, not its end.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from benchmarks.table import print_table
from training.runs import read_card, read_metrics, read_train_args

#: The shipped recipe at half the width (d_model 128: about a third of the time per token), so that a short run
#: sees more of its curve; the knobs' directions are what the table is for.
BASE = [
    "--d-model",
    "128",
    "--n-heads",
    "4",
    "--layers",
    "3",
    "--d-ff",
    "512",
    "--dropout",
    "0.2",
    "--attention-dropout",
    "0.2",
    "--norm-first",
    "--peak-lr",
    "2e-3",
    "--warmup",
    "500",
    "--batch-tokens",
    "1500",
    "--eval-every",
    "500",
    "--eval-sentences",
    "300",
    "--seed",
    "1",
    "--no-snapshots",
    "--no-progress",
    "--sentence-repeat",
    "2",
    "--phrases-per-epoch",
    "20000",
    "--words-per-epoch",
    "10000",
]

#: name → the options added to (or overriding) :data:`BASE`; one knob each.
VARIANTS: dict[str, list[str]] = {
    "base": [],
    "vocab-4k-sentences": ["--vocab-size", "4000", "--vocab-from", "sentences"],
    "vocab-2k-sentences": ["--vocab-size", "2000", "--vocab-from", "sentences"],
    "dict-share-0.25": ["--dict-share", "0.25"],
    "label-smoothing-0.3": ["--label-smoothing", "0.3"],
    "label-smoothing-0.5": ["--label-smoothing", "0.5"],
    "dropout-0.3": ["--dropout", "0.3", "--attention-dropout", "0.3"],
    "word-dropout-0.1": ["--src-word-dropout", "0.1", "--tgt-word-dropout", "0.1"],
    "bpe-dropout-0.1": ["--bpe-dropout", "0.1"],
    "depth-5+5": ["--layers", "5"],
    # not a knob but a diagnostic: the first half of the sentence pairs (the dictionary stays whole); how much a
    # doubling of the sentences is worth, read off against base at the same steps
    "half-sentences": ["--limit-train", "7255"],
}


#: The warm-start leg recipe of the Ding-only translator lineage (docs/training.md, "Carrying a run across
#: sessions"): the architecture, dropout and tokenizer are the checkpoint's; every valid sentence is translated at
#: each evaluation.
WARM_BASE = [
    "--peak-lr",
    "2e-3",
    "--warmup",
    "500",
    "--dict-share",
    "0.25",
    "--batch-tokens",
    "1500",
    "--eval-every",
    "500",
    "--eval-sentences",
    "0",
    "--keep-last",
    "8",
    "--seed",
    "1",
    "--no-progress",
    "--fp16-weights",
]

#: name → the options added to :data:`WARM_BASE`; one knob each (the knobs that a warm start may change).
WARM_VARIANTS: dict[str, list[str]] = {
    "base": [],
    "bpe-dropout-0.1": ["--bpe-dropout", "0.1"],
    "word-dropout-0.1": ["--src-word-dropout", "0.1", "--tgt-word-dropout", "0.1"],
    "dict-share-0.5": ["--dict-share", "0.5"],
    "label-smoothing-0.3": ["--label-smoothing", "0.3"],
    "dropout-0.3": ["--dropout", "0.3", "--attention-dropout", "0.3"],
}


#: The real-pairs recipe of the shipped translator (the prepared mixture, ``python -m corpora prepare all``) with a
#: short warmup, so that a run of a few hundred steps is past its peak learning rate; ``--real`` A/B runs go to
#: ``runs/real-<name>``. Its table answers what a bigger model buys on this data at an equal token budget, and
#: what it costs in time per token.
REAL_BASE = [
    "--mix",
    "tatoeba=1,multi30k=2,bcontrast=1,ding=1",
    "--vocab-size",
    "8000",
    "--vocab-from",
    "sentences",
    "--d-model",
    "256",
    "--n-heads",
    "4",
    "--layers",
    "3",
    "--d-ff",
    "1024",
    "--dropout",
    "0.1",
    "--norm-first",
    "--peak-lr",
    "1e-3",
    "--warmup",
    "150",
    "--batch-tokens",
    "4000",
    "--eval-every",
    "400",
    "--eval-sentences",
    "300",
    "--seed",
    "1",
    "--no-snapshots",
    "--no-progress",
]

#: name → the options added to :data:`REAL_BASE`; one knob each (the model's width moves d_ff with it, 4 × d_model
#: as in the paper, and d_model 512 has the paper's 8 heads).
REAL_VARIANTS: dict[str, list[str]] = {
    "base": [],
    "width-384": ["--d-model", "384", "--d-ff", "1536", "--n-heads", "6"],
    "depth-6+6": ["--layers", "6"],
    "width-512": ["--d-model", "512", "--d-ff", "2048", "--n-heads", "8"],
    "vocab-16k": ["--vocab-size", "16000"],
    "dropout-0.2": ["--dropout", "0.2"],
    # not a knob but the reference: the same recipe in torch.nn.Transformer (model/baseline.py)
    "torch-nn-transformer": ["--impl", "torch"],
}


def overridden(base: list[str], knob: list[str]) -> list[str]:
    """``base`` with ``knob`` in place of the options it sets (each ``--flag`` with its values), so that a printed
    command names every option once (``--layers 5``, not ``--layers 3 … --layers 5``)."""

    def groups(opts: list[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for token in opts:
            if token.startswith("--") or not out:
                out.append([token])
            else:
                out[-1].append(token)
        return out

    knob_groups = groups(knob)
    flags = {g[0] for g in knob_groups}
    return [t for g in groups(base) if g[0] not in flags for t in g] + [t for g in knob_groups for t in g]


def command(
    name: str, out: Path, minutes: float, steps: int, threads: int, warm: str | None = None, real: bool = False
) -> list[str]:
    """The training command of variant ``name`` writing to ``out``: from scratch (:data:`VARIANTS`), with ``warm`` a
    warm start from that checkpoint folder (:data:`WARM_VARIANTS`), or with ``real`` from scratch on the real-pairs
    mixture (:data:`REAL_VARIANTS`)."""
    if warm:
        recipe = ["--init-from", warm, *overridden(WARM_BASE, WARM_VARIANTS[name])]
    elif real:
        recipe = overridden(REAL_BASE, REAL_VARIANTS[name])
    else:
        recipe = overridden(BASE, VARIANTS[name])
    return [
        sys.executable,
        "-m",
        "trainer.train",
        "--out",
        str(out),
        *recipe,
        "--max-minutes",
        str(minutes),
        "--max-steps",
        str(steps),
        "--threads",
        str(threads),
    ]


def summarize(run: Path, at_step: int = 0) -> dict | None:
    """The row of one run folder (``None`` when it has no ``train_args.json`` or no metrics): knob, steps, tokens,
    minutes, last valid loss, best valid chrF and BLEU, and the command. ``at_step`` > 0 reads only the records up
    to that step, so that runs stopped by a time limit at different steps compare at the same step budget."""
    records = read_metrics(run)
    if at_step:
        records = [r for r in records if r.get("step", 0) <= at_step]
    if not read_train_args(run) or not records:
        return None
    evals = [r for r in records if "valid_loss" in r]
    steps = [r for r in records if "tokens_seen" in r]
    best = max(evals, key=lambda r: r.get("valid_chrf", 0.0), default={})
    return {
        "run": run.name.removeprefix("ab-").removeprefix("warm-").removeprefix("real-"),
        "steps": steps[-1]["step"] if steps else 0,
        "tokens": steps[-1]["tokens_seen"] if steps else 0,
        "minutes": round(max((r.get("time_s", 0) for r in records), default=0) / 60, 1),
        "tokens_per_s": steps[-1].get("tokens_per_s") if steps else None,
        "parameters": read_card(run / "best").get("parameters"),
        "valid_loss": evals[-1]["valid_loss"] if evals else None,
        "chrf": best.get("valid_chrf"),
        "bleu": best.get("valid_bleu"),
        "best_step": best.get("step"),
    }


def table(runs: list[Path], at_step: int = 0) -> list[tuple[str, ...]]:
    """Rows for :func:`print_table`, with each chrF's difference to the ``base`` run (when it is among them)."""
    rows = [r for r in (summarize(p, at_step) for p in runs) if r]
    base = next((r["chrf"] for r in rows if r["run"] == "base"), None)
    out: list[tuple[str, ...]] = []
    for r in rows:
        delta = "" if base is None or r["chrf"] is None or r["run"] == "base" else f" ({r['chrf'] - base:+.2f})"
        out.append(
            (
                r["run"],
                "–" if not r["parameters"] else f"{r['parameters'] / 1e6:.1f}M",
                str(r["steps"]),
                f"{r['tokens'] / 1e6:.2f}M",
                str(r["minutes"]),
                "–" if not r["tokens_per_s"] else f"{r['tokens_per_s']:,.0f}",
                "–" if r["valid_loss"] is None else f"{r['valid_loss']:.3f}",
                "–" if r["chrf"] is None else f"{r['chrf']:.2f}{delta}",
                "–" if r["bleu"] is None else f"{r['bleu']:.2f}",
                str(r["best_step"]),
            )
        )
    return out


HEADER = (
    "variant",
    "parameters",
    "steps",
    "tokens",
    "minutes",
    "tokens/s (last log)",
    "valid loss (last)",
    "valid chrF (best, Δ base)",
    "valid BLEU",
    "at step",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recipe", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="run folders to tabulate (default: runs/ab-*)")
    p.add_argument("--launch", action="store_true", help="train the variants first (one after another)")
    p.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    p.add_argument("--minutes", type=float, default=90.0, help="wall-time limit of each run (a safety net)")
    p.add_argument("--steps", type=int, default=1500, help="step budget of each run: the same for every variant")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--root", default="runs", help="where the ab-<variant> (warm-<variant>) folders go")
    p.add_argument(
        "--warm",
        metavar="CKPT",
        default=None,
        help="A/B as warm starts from this checkpoint folder (e.g. checkpoints/en-de), in warm-<variant>",
    )
    p.add_argument(
        "--real",
        action="store_true",
        help="A/B from scratch on the real-pairs mixture (needs python -m corpora prepare all), in real-<variant>",
    )
    p.add_argument(
        "--at-step",
        type=int,
        default=0,
        help="tabulate each run up to this step only (runs stopped by --minutes at different steps)",
    )
    p.add_argument("--print-commands", action="store_true", help="print each variant's command and stop")
    args = p.parse_args(argv)
    variants, prefix = (
        (WARM_VARIANTS, "warm-") if args.warm else (REAL_VARIANTS, "real-") if args.real else (VARIANTS, "ab-")
    )
    names = [n for n in args.only.split(",") if n] or list(variants)
    unknown = [n for n in names if n not in variants]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)}; known: {', '.join(variants)}", file=sys.stderr)
        return 2
    root = Path(args.root)
    if args.print_commands:
        for n in names:
            argv = command(n, root / f"{prefix}{n}", args.minutes, args.steps, args.threads, args.warm, args.real)
            print(shlex.join(argv[1:]))
        return 0
    if args.launch:
        for n in names:
            out = root / f"{prefix}{n}"
            if out.exists():
                print(f"{out} exists: kept as it is", file=sys.stderr)
                continue
            print(f"training {n} …", file=sys.stderr)
            subprocess.run(command(n, out, args.minutes, args.steps, args.threads, args.warm, args.real), check=False)
    runs = [Path(r) for r in args.runs] or sorted(root.glob(f"{prefix}*"))
    if args.launch or args.only:
        runs = [r for r in runs if r.name.removeprefix(prefix) in names]
    rows = table(runs, args.at_step)
    if not rows:
        print("no A/B runs found (train them with --launch)", file=sys.stderr)
        return 1
    print_table(rows, HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
