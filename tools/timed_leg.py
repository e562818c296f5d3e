"""One training run in a fixed wall-clock budget, ended by a cooldown, its weights exported in small pieces:
``python -m tools.timed_leg``.

Written for a lent GPU machine, which gives a session minutes rather than hours and hands back files of at most
16 MiB each (it runs the same on a CPU). It spends ``--budget-s`` seconds of training on one fresh run of
``python -m trainer.train``, in two legs of that run:

1. a stable leg of ``1 - cooldown share`` of the budget (``--max-minutes``);
2. ``--resume`` with a linear cooldown of the learning rate to 0 (``--cooldown-steps``) over as many steps as the
   first leg's measured steps/s fit into the rest of the budget, so the run ends cooled down whatever the machine's
   speed turned out to be;

With ``--probe``, :mod:`trainer.probe` runs first (``--probe-budget-s``, its own seconds taken out of the budget,
which keeps at least half; ``--probe-seconds`` timed a variant, 3 by default) and the first leg trains with the
fastest variant that worked (base when none did; one that changes ``--batch-tokens`` only with
``--probe-any-batch``); the second leg inherits it. The probe's table and profile land in ``RUN/probe/`` and,
with ``--export``, beside the weights.

Then, with ``--export``, it writes ``last/``'s weights as float16 safetensors shards of at most :data:`SHARD_BYTES`
(``weights-NN.safetensors``) and the run folder without its weights (``run.tar.gz``: metrics, logs, cards,
arguments). ``--join EXPORT --into RUN`` puts them back together on the other machine: a run folder whose ``last/``
is a checkpoint (float16), not a resume state (the optimizer's moments stay behind).

    python -m tools.timed_leg --run runs/gpu --budget-s 460 --export "$OUT" -- --train-tsv … --d-model 384 …
    python -m tools.timed_leg --join /path/to/export --into runs/gpu

Every option after ``--`` goes to the trainer's first leg unchanged. Exit code: the trainer's (0 done, 2 bad
options or data).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from model.checkpoint import save_tensors
from trainer.options import parse_config
from trainer.probe import DEFAULT_VARIANTS, variant_flags
from training.runs import read_metrics
from training.state import read_state

#: The largest shard written: under the 16 MiB a file may have to come back from a lent machine.
SHARD_BYTES = 15 * 2**20
REPO = Path(__file__).resolve().parent.parent


def train(args: list[str], log: Path, module: str = "trainer.train") -> int:
    """Run the trainer (or another ``module``) with ``args``, its output appended to ``log`` and echoed; returns its
    exit code."""
    cmd = [sys.executable, "-u", "-m", module, *args]
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None, "stdout=PIPE gives the process a stdout to read"
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        return proc.wait()


def logged_windows(run: Path) -> list[dict]:
    """The run's training log lines (``metrics.jsonl`` rows with a loss and ``time_s``), in order."""
    return [r for r in read_metrics(run) if "time_s" in r and "loss" in r]


def steps_per_second(run: Path) -> float:
    """Optimizer steps per second of the run's last logged windows (``metrics.jsonl``: step and ``time_s``)."""
    rows = logged_windows(run)
    if len(rows) < 2:
        raise SystemExit("the first leg logged too few steps to measure its speed")
    a, b = rows[max(0, len(rows) - 6)], rows[-1]  # the last windows: past warm-up and the first evaluations
    return (b["step"] - a["step"]) / max(b["time_s"] - a["time_s"], 1e-9)


def say(message: str, log: Path) -> None:
    """Print ``message`` and append it to ``log`` (the run's record of what this command decided)."""
    print(message, flush=True)
    with open(log, "a") as f:
        f.write(message + "\n")


def probe_first(args, trainer_args: list[str], log: Path) -> list[str]:
    """Run the throughput probe on ``trainer_args`` (report in ``RUN/probe/``); the flags of the fastest variant
    that worked, ``[]`` (base) when the probe failed or none did."""
    folder = args.run / "probe"
    rc = train(
        [
            "--variants",
            args.probe_variants,
            "--budget-s",
            str(args.probe_budget_s),
            "--seconds",
            str(args.probe_seconds),
            "--profile",
            "--report",
            str(folder),
            "--",
            *trainer_args,
            "--out",
            str(folder),
            "--max-steps",
            "1000000",
        ],
        log,
        module="trainer.probe",
    )
    report = folder / "probe.json"
    if rc or not report.is_file():
        say(f"the probe failed (exit code {rc}): training with the base options", log)
        return []
    result = json.loads(report.read_text())
    name = result["fastest_any_batch" if args.probe_any_batch else "fastest"]
    batch_tokens = parse_config(["--out", str(folder), *trainer_args])[0].batch_tokens
    flags = variant_flags(name, batch_tokens)
    say(f"probe: training with {name} {' '.join(flags)}".rstrip(), log)
    return flags


def start_up_seconds(run: Path, rate: float) -> float:
    """Seconds the first leg lost before it stepped at ``rate`` (steps/s): its first logged window's time beyond
    what its steps took at that rate (CUDA start-up, a ``--compile``). The second leg, a new process, pays them
    again; 0 when nothing was logged."""
    rows = logged_windows(run)
    return max(0.0, rows[0]["time_s"] - rows[0]["step"] / rate) if rows else 0.0


def export(run: Path, dest: Path) -> list[Path]:
    """``run/last``'s weights as float16 shards of < :data:`SHARD_BYTES`, and the run without weights as a tarball."""
    dest.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(run / "last" / "model.safetensors"))
    shards: list[dict[str, torch.Tensor]] = []
    current: dict[str, torch.Tensor] = {}
    size = 0
    for name in sorted(tensors):
        t = tensors[name].to(torch.float16) if tensors[name].is_floating_point() else tensors[name]
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
        current[name], size = t, size + nbytes
    shards.append(current)
    written = []
    for i, shard in enumerate(shards):
        path = dest / f"weights-{i:02d}.safetensors"
        save_tensors(path, shard, {"format": "pt"})
        written.append(path)
    with tarfile.open(dest / "run.tar.gz", "w:gz") as tar:
        tar.add(run, arcname=run.name, filter=lambda m: None if m.name.endswith(".safetensors") else m)
    # the probe's table and profile beside the weights too, to be read without unpacking
    reports = [
        shutil.copy(f, dest / f.name) for f in (run / "probe" / n for n in ("probe.json", "profile.txt")) if f.is_file()
    ]
    return written + [dest / "run.tar.gz", *map(Path, reports)]


def join(export_dir: Path, into: Path) -> None:
    """Rebuild a run folder with ``last/`` weights (float16) from an :func:`export` folder, in ``into``."""
    if into.exists():
        raise SystemExit(f"{into} exists already: name a new folder")
    if not (export_dir / "run.tar.gz").is_file():
        raise SystemExit(f"{export_dir} holds no run.tar.gz: not a folder that --export wrote")
    # a fresh clone has no runs/ yet: the folder the run goes into is made, not required
    into.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=into.parent.resolve()))
    with tarfile.open(export_dir / "run.tar.gz") as tar:
        name = tar.getnames()[0].split("/")[0]
        tar.extractall(tmp, filter="data")
    (tmp / name).rename(into)
    tmp.rmdir()
    tensors = {}
    for shard in sorted(export_dir.glob("weights-*.safetensors")):
        tensors.update(load_file(str(shard)))
    save_tensors(into / "last" / "model.safetensors", tensors, {"format": "pt"})
    print(f"{into}/last: {len(tensors)} tensors, {sum(t.numel() for t in tensors.values()):,} parameters")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.timed_leg", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, help="the run folder (created)")
    p.add_argument("--budget-s", type=float, default=450.0, help="seconds of training, both legs together")
    p.add_argument("--cooldown-share", type=float, default=0.3, help="share of the budget spent cooling down")
    p.add_argument("--export", type=Path, help="folder for the shards and run.tar.gz")
    p.add_argument("--probe", action="store_true", help="probe the speed variants first; train with the fastest")
    p.add_argument("--probe-variants", default=DEFAULT_VARIANTS, help="the variants the probe times")
    p.add_argument("--probe-budget-s", type=float, default=30.0, help="the probe starts no variant after this")
    p.add_argument("--probe-seconds", type=float, default=3.0, help="timed seconds per variant the probe spends")
    p.add_argument("--probe-any-batch", action="store_true", help="let the probe's choice change --batch-tokens")
    p.add_argument("--join", type=Path, help="an export folder to put back together (with --into)")
    p.add_argument("--into", type=Path, help="the run folder --join writes")
    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.join:
        join(args.join, args.into)
        return 0
    run, started = args.run, time.time()
    run.mkdir(parents=True, exist_ok=True)
    log = run / "train.log"
    budget = args.budget_s
    if args.probe:
        trainer_args = [*trainer_args, *probe_first(args, trainer_args, log)]
        budget = max(args.budget_s - (time.time() - started), args.budget_s / 2)
        say(f"probe done in {time.time() - started:.0f} s; {budget:.0f} s left to train", log)
    stable_min = budget * (1 - args.cooldown_share) / 60
    rc = train(["--out", str(run), "--max-steps", "1000000", "--max-minutes", f"{stable_min:.2f}", *trainer_args], log)
    if rc:
        return rc
    rate = steps_per_second(run)
    step = read_state(run / "last").step
    left_s = budget * args.cooldown_share
    # the second leg starts up (and compiles) again: its steps fill what is left of its share after that
    start_up = min(start_up_seconds(run, rate), left_s / 2)
    cool = max(1, int(rate * (left_s - start_up)))
    print(
        f"first leg: {step} steps, {rate:.2f} steps/s, {start_up:.0f} s to start; cooldown of {cool} steps "
        f"(~{left_s:.0f} s with the start); {time.time() - started:.0f} s so far",
        flush=True,
    )
    rc = train(
        [
            "--out",
            str(run),
            "--resume",
            "--max-steps",
            str(step + cool),
            "--cooldown-steps",
            str(cool),
            # a safety net only: the steps were sized to end the leg in time
            "--max-minutes",
            f"{max(left_s * 1.5, left_s + 60) / 60:.2f}",
        ],
        log,
    )
    if rc:
        return rc
    if args.export:
        for path in export(run, args.export):
            print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")
    print(f"done in {time.time() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
