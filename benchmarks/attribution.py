"""Attribution speed and faithfulness: ``python -m benchmarks.attribution [--checkpoint DIR] [--n N]``.

Prints two tables, torch on one thread throughout:

* the time of one step's attributions by every method (:func:`reading.attribution.attribute_step`) for a
  sentence of about 20 tokens (median of ``--repeats``), with the integrated gradients' completeness gap;
* each method's faithfulness over ``--n`` sentences (the everyday set, then the Ding test pairs): ERASER's
  comprehensiveness and sufficiency, AOPC over 10 / 20 / 50 % of the source, beside seeded random rankings, at one
  step of each greedy translation (drawn with ``--seed``), every method's scores of the mean over layers and heads.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.table import print_table
from decoding.stepping import InputError, Stepper, prepare_source
from decoding.translate import DEFAULT_CHECKPOINT
from model.checkpoint import load_checkpoint
from reading.attribution import METHODS, attribute_step
from reading.faithfulness import FRACTIONS, MEASURES, faithfulness
from reading.gradients import BASELINES, DEFAULT_STEPS, TOLERANCE

#: 18 tokens with its <eos> under the shipped en-de tokenizer (16,000 pieces; 20 under the 8,000-piece one before it).
SENTENCE = "My brother, who lives in Berlin with his two children, visits us every summer."
ROOT = Path(__file__).resolve().parent.parent
#: Sources in the order they are read: the everyday set first (161), then the Ding test pairs (1,082).
SOURCES = (ROOT / "assets" / "eval" / "everyday.tsv", ROOT / "assets" / "data" / "test.tsv.gz")


def english_sentences(n: int) -> list[str]:
    """The first ``n`` English sides of :data:`SOURCES` (fewer when they run out)."""
    found: list[str] = []
    for path in SOURCES:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            found += [row[0] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if row and row[0]]
        if len(found) >= n:
            break
    return found[:n]


def greedy_steps(ckpt, text: str) -> tuple[list[int], list[int]]:
    """``(source ids, decoder tokens)``: the tokens are ``<bos>``, the greedy output and its ``<eos>``."""
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, text, cfg.max_len, cfg.eos_id, cfg.unk_id).ids
    stepper = Stepper(ckpt.model, src)
    stepper.run_to_end()
    return src, list(stepper.tokens)


def time_one_step(ckpt, ig: dict, repeats: int) -> list[tuple[str, str]]:
    """Rows of the speed table for :data:`SENTENCE` at the middle step of its greedy translation, the integral
    refined (``ig``: the integrated gradients' ``n_steps``, ``baseline`` and ``tolerance``) beside one uniform
    integral of ``n_steps`` points, timed alternately in one run."""
    src, tokens = greedy_steps(ckpt, SENTENCE)
    t = len(tokens) // 2
    args = (ckpt.model, src, tokens[:t], tokens[t])
    attribute_step(*args, n_steps=2)  # imports Captum and warms the allocator
    arms = {"refined": ig, "uniform": {**ig, "tolerance": None}}
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    results = {}
    for _ in range(repeats):
        for arm, kwargs in arms.items():
            start = time.perf_counter()
            results[arm] = attribute_step(*args, **kwargs)
            times[arm].append(time.perf_counter() - start)
    refined, uniform = results["refined"].gradients, results["uniform"].gradients
    median = {arm: statistics.median(v) for arm, v in times.items()}
    return [
        ("source tokens (with <eos>)", str(len(src))),
        ("target prefix tokens", str(t)),
        ("baseline, completeness tolerance", f"{ig['baseline']}, {ig['tolerance'] or 'off'}"),
        ("one step, every method, refined integral (median s)", f"{median['refined']:.2f}"),
        ("… its points used / gradient evaluations spent", f"{refined.n_steps} / {refined.evaluated}"),
        ("… its completeness gap", f"{refined.completeness_gap:.1%}"),
        (f"one step, every method, {ig['n_steps']} uniform points (median s)", f"{median['uniform']:.2f}"),
        ("… its completeness gap", f"{uniform.completeness_gap:.1%}"),
        ("source share of the prediction (refined)", f"{results['refined'].source_share:.2f}"),
    ]


def faithfulness_table(ckpt, n: int, ig: dict, n_random: int, seed: int) -> tuple[list[tuple[str, ...]], dict]:
    """Rows of the faithfulness table over ``n`` sentences, and a summary (sentences, median gap, seconds)."""
    rng = np.random.default_rng(seed)
    aopc: dict[tuple[str, str], list[float]] = {(measure, m): [] for measure in MEASURES for m in (*METHODS, "random")}
    gaps, shares, points, start = [], [], [], time.perf_counter()
    for text in english_sentences(n):
        try:
            src, tokens = greedy_steps(ckpt, text)
        except InputError:
            continue
        t = int(rng.integers(1, len(tokens)))
        result = attribute_step(ckpt.model, src, tokens[:t], tokens[t], **ig)
        faith = faithfulness(ckpt.model, result.step, result.all_scores(), n_random=n_random, seed=seed)
        for measure, method in aopc:
            aopc[measure, method].append(faith.aopc(measure, method))
        gaps.append(result.gradients.completeness_gap)
        points.append(result.gradients.n_steps)
        shares.append(result.source_share)
    rows: list[tuple[str, ...]] = []
    for method in (*METHODS, "random"):
        comp, suff = np.array(aopc["comprehensiveness", method]), np.array(aopc["sufficiency", method])
        beats = "" if method == "random" else f"{np.mean(comp > np.array(aopc['comprehensiveness', 'random'])):.0%}"
        rows.append((method, f"{comp.mean():.3f} ± {sem(comp):.3f}", f"{suff.mean():.3f} ± {sem(suff):.3f}", beats))
    summary = {
        "sentences": len(gaps),
        "median gap": float(np.median(gaps)) if gaps else float("nan"),
        "gap within 1 %": float(np.mean(np.array(gaps) <= 0.01)) if gaps else float("nan"),
        "median points": float(np.median(points)) if points else float("nan"),
        "mean source share": float(np.mean(shares)) if shares else float("nan"),
        "seconds": time.perf_counter() - start,
    }
    return rows, summary


def sem(values: np.ndarray) -> float:
    """Standard error of the mean (0 for fewer than two values)."""
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--n", type=int, default=300, help="sentences for the faithfulness table (0: none)")
    p.add_argument("--n-steps", type=int, default=DEFAULT_STEPS, help="integrated gradients' points to start with")
    p.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="completeness gap the integral is refined to (0: one uniform integral of --n-steps points)",
    )
    p.add_argument("--n-random", type=int, default=10, help="random rankings averaged per sentence")
    p.add_argument("--baseline", choices=BASELINES, default="unk", help="integrated gradients' baseline")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    ckpt = load_checkpoint(args.checkpoint)
    if not ckpt.config.is_encoder_decoder:
        p.error("the benchmark reads a translator: pass an encoder-decoder checkpoint")
    print(f"One step's attributions, every method ({Path(args.checkpoint).name}, 1 thread)\n")
    ig = {"n_steps": args.n_steps, "baseline": args.baseline, "tolerance": args.tolerance or None}
    print_table(time_one_step(ckpt, ig, args.repeats))
    if args.n > 0:
        rows, summary = faithfulness_table(ckpt, args.n, ig, args.n_random, args.seed)
        fractions = " / ".join(f"{f:.0%}" for f in FRACTIONS)
        print(
            f"\nFaithfulness over {summary['sentences']} sentences, one step each, AOPC over {fractions} of the "
            f"source ({summary['seconds']:.0f} s; median completeness gap {summary['median gap']:.1%}, within 1 % "
            f"at {summary['gap within 1 %']:.0%} of the steps, median points {summary['median points']:.0f}; mean "
            f"source share {summary['mean source share']:.2f})\n"
        )
        print_table(rows, header=("method", "comprehensiveness ↑", "sufficiency ↓", "comp. > random"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
