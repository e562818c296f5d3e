"""Decoding speed of a checkpoint on this machine: ``python -m benchmarks.decode [--checkpoint DIR]``.

Prints a table: one cached decode step (ms) for a ~20-token source, and the time to generate N tokens with
the KV cache vs. recomputing the whole prefix every step, measured side by side in one run (the ratio is
what to compare across machines). Greedy translation throughput of the test split is reported in tokens/s.
The decoding length is forced (``<eos>`` is ignored) so that both paths do the same work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch

from benchmarks.table import print_table
from corpora.files import dataset_path, read_tsv
from decoding.batched import greedy_batch, translate_texts
from decoding.loops import LOOP_TIMES
from decoding.stepping import Stepper, prepare_source
from decoding.translate import DEFAULT_CHECKPOINT
from model.checkpoint import load_checkpoint

SOURCE = "The animal didn't cross the street because it was too tired, said the old man quietly."


def never_eos(eos_id: int):
    """A greedy choice that never picks ``eos_id``, so that a decode runs to its forced length."""

    def choose(log_probs: torch.Tensor) -> int:
        lp = log_probs.clone()
        lp[eos_id] = float("-inf")
        return int(lp.argmax())

    return choose


def time_generation(model, src_ids, n_tokens: int, use_cache: bool, repeats: int) -> list[float]:
    """Seconds to generate ``n_tokens`` tokens, ``repeats`` times."""
    choose = never_eos(model.cfg.eos_id)
    times = []
    for _ in range(repeats):
        stepper = Stepper(model, src_ids, max_new_tokens=n_tokens, use_cache=use_cache)
        start = time.perf_counter()
        stepper.run_to_end(choose)
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decode", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--test-sentences", type=int, default=200)
    p.add_argument(
        "--sweep",
        default="16,32,64,127",
        help="output lengths at which to repeat cache vs recompute (comma-separated; '' = none)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    ckpt = load_checkpoint(args.checkpoint)
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SOURCE, cfg.max_len, cfg.eos_id, cfg.unk_id)
    n = min(args.tokens, cfg.max_len - 1)
    time_generation(ckpt.model, src.ids, 4, True, 1)  # warm-up
    cached = time_generation(ckpt.model, src.ids, n, True, args.repeats)
    full = time_generation(ckpt.model, src.ids, n, False, args.repeats)
    c_med, f_med = statistics.median(cached), statistics.median(full)
    pairs = read_tsv(dataset_path("test"))[: args.test_sentences]
    start = time.perf_counter()
    outs = translate_texts(ckpt.model, ckpt.tokenizer, [p.src for p in pairs])
    secs = time.perf_counter() - start
    out_tokens = sum(len(ckpt.tokenizer.encode(o).ids) + 1 for o in outs)
    start = time.perf_counter()  # the same sentences with the loop guard: its cost is Python per row and step
    guarded = translate_texts(
        ckpt.model, ckpt.tokenizer, [p.src for p in pairs], decode_batch=partial(greedy_batch, loop_times=LOOP_TIMES)
    )
    guard_secs = time.perf_counter() - start
    guard_tokens = sum(len(ckpt.tokenizer.encode(o).ids) + 1 for o in guarded)

    rows = [
        ("source length", f"{len(src.ids)} tokens"),
        ("cached step (traced), median", f"{1000 * c_med / n:.2f} ms"),
        (f"{n} tokens with KV cache", f"{1000 * c_med:.1f} ms"),
        (f"{n} tokens, full recompute", f"{1000 * f_med:.1f} ms"),
        ("speed-up of the cache", f"{f_med / c_med:.1f}×"),
        (f"batched greedy, {len(pairs)} test sentences", f"{out_tokens / secs:.0f} tokens/s ({secs:.1f} s)"),
        (
            f"the same with the loop guard ({LOOP_TIMES})",
            f"{guard_tokens / guard_secs:.0f} tokens/s ({guard_secs:.1f} s: {guard_secs / secs:.2f}× the time)",
        ),
        ("threads", str(torch.get_num_threads())),
    ]
    weight_bytes = sum(p.numel() * p.element_size() for p in ckpt.model.parameters())
    rows.append(("weights read per cached step (fp32)", f"{weight_bytes / 2**20:.1f} MiB"))
    print(f"checkpoint: {args.checkpoint} ({ckpt.model.num_parameters() / 1e6:.1f}M parameters)")
    print_table(rows)
    lengths = [min(int(x), cfg.max_len - 1) for x in args.sweep.split(",") if x.strip()]
    if lengths:
        sweep = []
        for length in lengths:
            c = statistics.median(time_generation(ckpt.model, src.ids, length, True, args.repeats))
            f = statistics.median(time_generation(ckpt.model, src.ids, length, False, args.repeats))
            sweep.append((f"{length} tokens", f"{1000 * c:.0f} ms", f"{1000 * f:.0f} ms", f"{f / c:.1f}×"))
        print("\nWhere the cache pays off: the longer the output, the more prefix a recompute repeats")
        print_table(sweep, header=("generated", "with KV cache", "recompute", "speed-up"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
