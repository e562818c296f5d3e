"""Training throughput on this machine: ``python -m benchmarks.train [--config shipped|tiny|PATH]``.

Prints one table: for every implementation (our :class:`~model.transformer.Transformer` and the
``torch.nn.Transformer`` baseline of :mod:`model.baseline`, both built from the same config), precision (fp32, or
bf16 autocast through :func:`training.device.autocast`) and CPU thread count, the median time of one training step in
ms, the throughput in tokens/s (a batch's non-pad source + target tokens, counted as ``python -m trainer.train`` counts
them, over the median step), and that throughput as a multiple of the table's first row, all measured in the same
run (the ratios are what to compare across machines).

One training step is what ``python -m trainer.train`` does per batch: forward on a :class:`training.batches.Batch`'s
``(src, tgt_in)`` in training mode (dropout on), label-smoothed cross-entropy (:func:`training.batches.loss_fn`,
smoothing 0.1), backward, gradient
clipping at 1.0 and an Adam step. The batches are synthetic: random tokens in the shape of a ``--batch-tokens 1500``
batch of the shipped model (37 rows × 20 source and 20 target tokens, a few rows shorter and padded), the same
batches for every row of the table. Warm-up steps are not timed.

bf16 autocast only pays on a CPU that computes bf16 natively (``avx512_bf16`` / ``amx_bf16``,
:func:`training.device.cpu_has_native_bf16`); elsewhere PyTorch emulates it and it is several times *slower* than fp32.
The line above the table says which case this CPU is.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.table import print_table
from decoding.translate import DEFAULT_CHECKPOINT
from model.baseline import IMPLS, build_model
from model.config import ModelConfig
from training.batches import Batch, Example, collate, loss_fn
from training.device import autocast, cpu_has_native_bf16

IMPL_NAMES = {"ours": "ours", "torch": "torch.nn.Transformer"}
TINY: dict[str, Any] = dict(
    vocab_size=64, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=32
)
LABEL_SMOOTHING = 0.1
CLIP = 1.0
N_BATCHES = 4  # distinct synthetic batches, cycled


def load_config(spec: str) -> ModelConfig:
    """``"shipped"`` (``checkpoints/en-de/config.json``), ``"tiny"`` (a seconds-long smoke config) or a
    ``config.json`` path. Raises :class:`model.config.ConfigError` when the file cannot be read."""
    if spec == "tiny":
        return ModelConfig(**TINY)
    return ModelConfig.from_json(DEFAULT_CHECKPOINT / "config.json" if spec == "shipped" else Path(spec))


def synthetic_batch(cfg: ModelConfig, batch: int, length: int, gen: torch.Generator) -> Batch:
    """A random :class:`training.batches.Batch` of ``batch`` rows like a length-bucketed training batch: source rows
    ``tokens … <eos>`` and target rows ``<bos> tokens … <eos>`` of at most ``length`` tokens, each row 0–3 tokens
    shorter (the first row full length) and padded, token ids drawn from the non-special vocabulary."""
    first = max(cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id) + 1
    examples = []
    for row in range(batch):
        sides = []
        for start in (0, 1):  # source, target
            n = length if row == 0 else int(torch.randint(max(start + 2, length - 3), length + 1, (1,), generator=gen))
            ids = torch.randint(first, cfg.vocab_size, (n,), generator=gen).tolist()
            ids[-1] = cfg.eos_id
            if start:
                ids[0] = cfg.bos_id
            sides.append(ids)
        examples.append(Example(*sides))
    return collate(examples, list(range(batch)), cfg.pad_id, "cpu")


def time_training(
    cfg: ModelConfig, impl: str, precision: str, threads: int, batches, warmup: int, steps: int, budget_s: float
) -> list[float]:
    """Seconds of each timed training step of a freshly built ``impl`` model with ``threads`` CPU threads, cycling
    through ``batches``: ``warmup`` untimed steps, then up to ``steps`` timed ones.

    A row stops early when its steps are slow (emulated bf16 took 25–60 s a step on this 2-core CPU): warm-up ends
    after its first step if that step alone took over ``budget_s`` seconds, and timing ends once at least one step
    is timed and the timed steps add up to over ``budget_s`` seconds."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    model = build_model(cfg, impl).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(i: int) -> float:
        batch = batches[i % len(batches)]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            logits = model(batch.src, batch.tgt_in)
        loss_fn(logits, batch.tgt_out, cfg.pad_id, LABEL_SMOOTHING).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return time.perf_counter() - start

    i = 0
    while i < warmup:
        i += 1
        if step(i - 1) > budget_s:
            break
    times: list[float] = []
    while len(times) < steps and not (times and sum(times) > budget_s):
        times.append(step(i))
        i += 1
    return times


def _csv(kind):
    return lambda text: [kind(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.train", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="shipped", help="'shipped', 'tiny' or a config.json path")
    p.add_argument("--batch", type=int, default=37, help="rows per batch")
    p.add_argument("--len", type=int, default=20, help="padded source and target length, in tokens")
    p.add_argument("--steps", type=int, default=5, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per row")
    p.add_argument(
        "--row-seconds",
        type=float,
        default=10.0,
        help="a row's time budget in s: slower rows time fewer steps (at least one); see time_training",
    )
    p.add_argument("--threads", type=_csv(int), default=[1, 2], help="comma-separated, e.g. 1,2")
    p.add_argument("--precisions", type=_csv(str), default=["fp32", "bf16"], help="comma-separated: fp32,bf16")
    p.add_argument("--impls", type=_csv(str), default=list(IMPLS), help="comma-separated: ours,torch")
    args = p.parse_args(argv)
    for x in args.precisions:
        if x not in ("fp32", "bf16"):
            p.error(f"unknown precision {x!r} (choose from fp32, bf16)")
    for x in args.impls:
        if x not in IMPLS:
            p.error(f"unknown impl {x!r} (choose from {', '.join(IMPLS)})")
    cfg = load_config(args.config)
    if not 3 <= args.len <= cfg.max_len:
        p.error(f"--len must be from 3 to the config's max_len {cfg.max_len}, got {args.len}")
    gen = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(cfg, args.batch, args.len, gen) for _ in range(N_BATCHES)]
    tokens = [b.n_tokens for b in batches]

    threads_before = torch.get_num_threads()
    results = []
    try:
        for impl in args.impls:
            for precision in args.precisions:
                for threads in args.threads:
                    times = time_training(
                        cfg, impl, precision, threads, batches, args.warmup, args.steps, args.row_seconds
                    )
                    median = statistics.median(times)
                    results.append((impl, precision, threads, len(times), median, statistics.mean(tokens) / median))
    finally:
        torch.set_num_threads(threads_before)

    params = ", ".join(
        f"{IMPL_NAMES[i]} {sum(q.numel() for q in build_model(cfg, i).parameters()):,}" for i in args.impls
    )
    print(
        f"config: {args.config} (d_model {cfg.d_model}, {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, "
        f"vocab {cfg.vocab_size}; parameters: {params})"
    )
    print(
        f"batch: {args.batch} × {args.len} source + {args.len} target tokens, {statistics.mean(tokens):.0f} non-pad "
        f"tokens/step; up to {args.warmup} warm-up + {args.steps} timed steps per row "
        f"(fewer when a row's steps take over {args.row_seconds:g} s)"
    )
    native = cpu_has_native_bf16()
    print(
        "native bf16: "
        + (
            "yes (avx512_bf16/amx_bf16): bf16 autocast runs on bf16 hardware"
            if native
            else "no (no avx512_bf16/amx_bf16 in /proc/cpuinfo): bf16 autocast is emulated on this CPU, "
            "so the bf16 rows are expected to be far slower than fp32"
        )
    )
    ref_impl, ref_prec, ref_threads, _, _, ref_tps = results[0]
    ref = f"{IMPL_NAMES[ref_impl]} {ref_prec} {ref_threads} thread{'s' * (ref_threads != 1)}"
    rows = [
        (
            IMPL_NAMES[impl],
            precision,
            str(threads),
            str(n),
            f"{1000 * ms:,.1f}",
            f"{tps:,.0f}",
            f"{tps / ref_tps:.{2 if tps >= 0.1 * ref_tps else 3}f}×",
        )  # 3 decimals keep a slow row's ratio non-zero
        for impl, precision, threads, n, ms, tps in results
    ]
    print_table(
        rows, header=("impl", "precision", "threads", "timed steps", "ms/step (median)", "tokens/s", f"× vs {ref}")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
