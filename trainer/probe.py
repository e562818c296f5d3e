"""How fast the trainer's steps run, variant by variant, and what bounds them: ``python -m trainer.probe``.

    python -m trainer.probe [--variants base,fused,…] [--seconds 3] [--profile] [--report DIR] -- <trainer options>

The trainer options (those of ``python -m trainer.train``) build the data, tokenizer, model and batch plan with
the trainer's own code (:func:`trainer.loop.make_trainer`); each variant then changes only the options that decide
how fast a step runs (:meth:`trainer.loop.Trainer.retune`), takes ``--warmup`` untimed steps (a compile happens
there) and is timed for ``--seconds`` (at least ``--min-steps`` steps; on CUDA between two synchronisations). A
variant is ``base`` or modifiers joined by ``+``:

* ``fused``: ``--fused-optimizer``; ``compile``: ``--compile``; ``padN``: ``--pad-multiple N``;
* ``batchN``: ``--batch-tokens`` × N (more tokens per step: a recipe change, not only a speed-up).

A variant that fails (out of memory, a compiler error) is reported with why, and the rest go on; once
``--budget-s`` seconds have passed since the set-up, the variants left are skipped (a compile's warm-up is not
cut short). The
table (variant, steps/s, tokens/s, its ratio to ``--baseline-tokens-s``, MFU where the peak is known, peak device
memory in bytes, host syncs per step on CUDA, distinct batch shapes per epoch) is printed and written to
``DIR/probe.json``. With ``--profile``, ``DIR/profile.txt`` holds the top operations of ~10 base steps by self
device time (CUDA) and by self CPU time, and the share of the wall time the device was busy.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from trainer.options import parse_config
from training.batches import padded_shape
from training.config import flag_of
from training.distributed import Dist, setup_device
from training.flops import training_flops

#: The last lease's speed on an H100 (batch 48,000 padded tokens), the yardstick of the ratio column.
BASELINE_TOKENS_S = 290_000.0
# No pad64: the mixture's sentences are short, and padded to 64 (several times the tokens) a step ran 12x slower
# than base on the CPU, pad8 1.5x slower (eager). Compiled with symbolic sizes, the number of shapes costs no
# recompiles, so compile is timed both without padding and with pad8 (which only the GPU can weigh).
DEFAULT_VARIANTS = "base,fused,compile+fused,compile+fused+pad8,fused+batch2"
LR = 1e-4  # a small constant rate: the probe measures time, and must not blow the weights up meanwhile


def variant_changes(name: str, batch_tokens: int) -> dict:
    """The :class:`~training.config.TrainConfig` changes of variant ``name`` (see the module docstring) for a run
    of ``batch_tokens``. Raises ``ValueError`` for an unknown modifier."""
    changes = {"fused_optimizer": False, "compile": False, "pad_multiple": 1, "batch_tokens": batch_tokens}
    for part in [] if name == "base" else name.split("+"):
        if part == "fused":
            changes["fused_optimizer"] = True
        elif part == "compile":
            changes["compile"] = True
        elif part.startswith("pad") and part[3:].isdigit() and int(part[3:]) > 0:
            changes["pad_multiple"] = int(part[3:])
        elif part.startswith("batch") and part[5:].isdigit() and int(part[5:]) > 0:
            changes["batch_tokens"] = batch_tokens * int(part[5:])
        else:
            raise ValueError(f"unknown variant part {part!r} in {name!r}: use fused, compile, padN or batchN")
    return changes


def variant_flags(name: str, batch_tokens: int) -> list[str]:
    """The trainer flags that train as variant ``name`` does (a run of ``batch_tokens``), to append to its
    options: ``["--fused-optimizer", "--pad-multiple", "64"]`` for ``fused+pad64``."""
    flags = []
    for key, value in variant_changes(name, batch_tokens).items():
        if value is True:
            flags.append(flag_of(key))
        elif (
            value is not False
            and not (key == "pad_multiple" and value == 1)
            and not (key == "batch_tokens" and value == batch_tokens)
        ):
            flags += [flag_of(key), str(value)]
    return flags


def endless_steps(trainer):
    """``(examples, micro-batches)`` of every step of the trainer's plan, epoch after epoch, without end."""
    epoch = 0
    while True:
        examples, steps = trainer.plan.steps(epoch)
        for micro in steps:
            yield examples, micro
        epoch += 1


def shapes_per_epoch(trainer) -> dict:
    """What the trainer's first epoch holds: ``{"shapes", "lengths", "steps"}``, the distinct padded batch shapes
    ``(rows, src_len, tgt_len)`` (those a graph-captured step would meet), the distinct ``(src_len, tgt_len)``
    among them (what ``--pad-multiple`` reduces; the rows vary with the lengths under a token budget) and the
    number of steps."""
    examples, steps = trainer.plan.steps(0)
    shapes = {
        padded_shape([examples[i] for i in idx], trainer.config.pad_multiple, trainer.cfg.max_len)
        for micro in steps
        for idx in micro
    }
    return {"shapes": len(shapes), "lengths": len({s[1:] for s in shapes}), "steps": len(steps)}


def take_step(trainer, examples, micro, lr: float = LR) -> tuple[int, float, torch.Tensor]:
    """One optimizer step as the trainer takes it, at learning rate ``lr``; ``(tokens, FLOPs, loss)``."""
    batches = trainer.collate(examples, micro)
    loss, _ = trainer.optimizer_step(batches, lr)
    flops = training_flops(trainer.cfg, sum(b.n_src for b in batches), sum(b.n_pred for b in batches))
    return sum(b.n_tokens for b in batches), flops, loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_syncs(trainer, steps) -> int | None:
    """Host-device synchronisations one step makes (CUDA's sync debug mode counts them; ``None`` on a CPU)."""
    if trainer.device.type != "cuda":
        return None
    synchronize(trainer.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            take_step(trainer, *next(steps))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def measure(trainer, name: str, args, batch_tokens: int) -> dict:
    """Warm-up and timed steps of variant ``name`` of a run of ``batch_tokens``; its row of the table."""
    trainer.retune(**variant_changes(name, batch_tokens))
    device, row = trainer.device, {"variant": name, "batch_tokens": trainer.config.batch_tokens}
    row.update({f"{k}_per_epoch": v for k, v in shapes_per_epoch(trainer).items()})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    steps = endless_steps(trainer)
    started = time.perf_counter()
    for _ in range(args.warmup):
        take_step(trainer, *next(steps))
    row["syncs_per_step"] = count_syncs(trainer, steps)
    synchronize(device)
    row["warmup_s"] = round(time.perf_counter() - started, 2)
    n = tokens = 0
    flops = 0.0
    start = time.perf_counter()
    while n < args.min_steps or time.perf_counter() - start < args.seconds:
        t, f, loss = take_step(trainer, *next(steps))
        n, tokens, flops = n + 1, tokens + t, flops + f
    synchronize(device)
    elapsed = time.perf_counter() - start
    row.update(
        steps=n,
        seconds=round(elapsed, 3),
        steps_per_s=round(n / elapsed, 3),
        tokens_per_s=round(tokens / elapsed, 1),
        vs_baseline=round(tokens / elapsed / args.baseline_tokens_s, 3),
        mfu=round(flops / elapsed / (trainer.peak_total * 1e12), 5) if trainer.peak_total else None,
        loss=round(float(loss), 4),
    )
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        row.update(peak_bytes=torch.cuda.max_memory_allocated(device), alloc_retries=stats.get("num_alloc_retries"))
    else:
        row["peak_bytes"] = None
    return row


def profile(trainer, path: Path, batch_tokens: int, steps: int = 10) -> None:
    """A torch.profiler trace of ``steps`` base steps (after 3 untimed ones) as text tables in ``path``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    trainer.retune(**variant_changes("base", batch_tokens))
    cuda = trainer.device.type == "cuda"
    it = endless_steps(trainer)
    for _ in range(3):
        take_step(trainer, *next(it))
    synchronize(trainer.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    start = time.perf_counter()
    with torch_profile(activities=activities) as prof:
        for _ in range(steps):
            take_step(trainer, *next(it))
        synchronize(trainer.device)
    wall = time.perf_counter() - start
    averages = prof.key_averages()
    lines = [f"{steps} base steps, {wall:.3f} s wall ({wall / steps * 1000:.1f} ms a step) on {trainer.device}"]
    if cuda:
        busy = sum(e.self_device_time_total for e in averages) / 1e6
        lines.append(
            f"device busy {busy:.3f} s = {busy / wall:.0%} of the wall time (far under 100 %: the host, "
            "not the GPU, sets the pace)"
        )
        lines += ["", "by self device time:", averages.table(sort_by="self_device_time_total", row_limit=30)]
    lines += ["", "by self CPU time:", averages.table(sort_by="self_cpu_time_total", row_limit=30)]
    path.write_text("\n".join(lines) + "\n")


def table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table."""

    def cell(row, key, fmt):
        value = row.get(key)
        return format(value, fmt) if value is not None else "—".rjust(int(fmt.split(".")[0].rstrip(",d")))

    head = (
        f"{'variant':<30} {'steps/s':>8} {'tokens/s':>11} {'×base':>6} {'MFU':>7} {'peak bytes':>14} "
        f"{'syncs':>5} {'shapes':>6} {'lengths':>7} {'warm s':>7}"
    )
    out = [head]
    for r in rows:
        if "error" in r:
            says = r["error"] if r["error"].startswith("skipped") else f"failed: {r['error']}"
            out.append(f"{r['variant']:<30} {says}")
            continue
        out.append(
            f"{r['variant']:<30} {cell(r, 'steps_per_s', '8.2f')} {cell(r, 'tokens_per_s', '11,.0f')} "
            f"{cell(r, 'vs_baseline', '6.2f')} {cell(r, 'mfu', '7.2%')} {cell(r, 'peak_bytes', '14,d')} "
            f"{cell(r, 'syncs_per_step', '5d')} {cell(r, 'shapes_per_epoch', '6d')} "
            f"{cell(r, 'lengths_per_epoch', '7d')} "
            f"{cell(r, 'warmup_s', '7.1f')}"
        )
    return "\n".join(out)


def fastest(rows: list[dict], same_batch: bool = True) -> str:
    """The name of the variant with the most tokens/s among those that worked (with ``same_batch``, among those
    that keep the base batch size), ``"base"`` when none did."""
    ok = [r for r in rows if "tokens_per_s" in r and (not same_batch or r["batch_tokens"] == rows[0]["batch_tokens"])]
    return max(ok, key=lambda r: r["tokens_per_s"])["variant"] if ok else "base"


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(own options, trainer options)``: the trainer's come after ``--``."""
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated, e.g. base,fused,compile+pad8")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per variant")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant first")
    p.add_argument("--min-steps", type=int, default=3, help="timed steps per variant at least")
    p.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="start no variant after this many seconds (counted from the end of the set-up)",
    )
    p.add_argument("--baseline-tokens-s", type=float, default=BASELINE_TOKENS_S)
    p.add_argument("--profile", action="store_true", help="also write profile.txt (~10 base steps)")
    p.add_argument("--report", type=Path, help="folder for probe.json and profile.txt (default: the trainer's --out)")
    own, trainer_args = split_argv(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(own)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "--out" not in trainer_args:
        trainer_args = ["--out", tempfile.mkdtemp(prefix="probe-"), *trainer_args]
    config, given = parse_config(trainer_args)
    for name in names:  # a typo fails now, not after minutes of set-up
        try:
            variant_changes(name, config.batch_tokens)
        except ValueError as exc:
            p.error(str(exc))
    from trainer.loop import make_trainer  # (the trainer's module, only once the options are known to parse)

    set_up = time.time()
    device = setup_device(config.device, ctx := Dist())
    trainer = make_trainer(config, ctx, device, given)
    report = args.report or Path(config.out)
    report.mkdir(parents=True, exist_ok=True)
    started = time.time()  # the budget is the variants': the data and model are loaded as the trainer loads them
    print(
        f"probe on {torch.cuda.get_device_name(device) if device.type == 'cuda' else device}, torch "
        f"{torch.__version__}; set-up {started - set_up:.1f} s",
        flush=True,
    )
    rows = []
    for name in names:
        if time.time() - started > args.budget_s:
            rows.append({"variant": name, "error": f"skipped: the {args.budget_s:.0f}-s budget was spent"})
        else:
            try:
                rows.append(measure(trainer, name, args, config.batch_tokens))
            except Exception as exc:  # any failure of a variant is a result: say why, go on
                rows.append({"variant": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    if args.profile:  # after the table, which matters more if the time runs out
        profile(trainer, report / "profile.txt", config.batch_tokens)
        print(f"wrote {report / 'profile.txt'}", flush=True)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "torch": torch.__version__,
        "baseline_tokens_s": args.baseline_tokens_s,
        "trainer_args": trainer_args,
        "set_up_seconds": round(started - set_up, 1),
        "seconds": round(time.time() - started, 1),
        "rows": rows,
        "fastest": fastest(rows),
        "fastest_any_batch": fastest(rows, same_batch=False),
    }
    (report / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\n{table(rows)}\n×base: tokens/s over {args.baseline_tokens_s:,.0f} (the last lease, H100: compare on "
        f"the same GPU only); fastest: {result['fastest']} (any batch: {result['fastest_any_batch']}); "
        f"{result['seconds']} s; wrote {report / 'probe.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
