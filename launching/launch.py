"""Start, watch and control training runs from the app: processes and the one-run lock (no Streamlit here).

A run is the ordinary training CLI, ``python -m trainer.train --out runs/<name> …`` (the command of
:func:`launching.form.build_command`), started as a detached process (its own session, so that a Stop reaches the
whole process group and a Streamlit rerun does not kill it), with stdout/stderr in ``runs/<name>/train.log``.
``runs/.active`` (JSON ``{run, pid}``) says which run the app started last; it blocks a second launch while that
run lives and is stale once its process is gone. The files of a run folder are read and written by
:mod:`training.runs` only; whether a trainer lives is :mod:`training.liveness`'s (the trainer asks it too, and imports
nothing of this launcher).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from launching.form import build_command, form_defaults, validate_form
from training.liveness import LIVE_STATES, effective_state, pid_alive, track_child  # noqa: F401  (LIVE_STATES: the page's)
from training.runs import (
    LOG,
    folder_problem,
    has_resume_state,
    model_summary,
    read_card,
    read_config,
    read_json,
    read_metrics,
    read_status,
    read_train_args,
    recently_written,
    runs_root,
    safe_folders,
)

REPO = Path(__file__).resolve().parent.parent
DEMO_ENV = "ATTENTION_EXPLORER_DEMO"
LOCK_NAME = ".active"


def demo_mode() -> bool:
    """Hosted demo (``ATTENTION_EXPLORER_DEMO`` set): runs are read-only, launching is refused."""
    return os.environ.get(DEMO_ENV, "") not in ("", "0", "false")


class LaunchError(RuntimeError):
    """A launch / resume / stop / delete that cannot be done (the message says why)."""


# --- the lock ----------------------------------------------------------------------------------------------
def _before_lock(status: dict | None, lock_pid) -> bool:
    """Whether ``status.json`` is older than the trainer the lock names: missing, or written by another process.
    A resumed trainer rewrites it only once it has loaded its data and model, so for those seconds the file still
    holds the previous leg's last word (``finished`` at step 1794), which says nothing about the new process."""
    return status is None or status.get("pid") != lock_pid


def run_state(run_dir: str | Path) -> str:
    """:func:`effective_state` of a run folder, and ``starting`` for the run the lock names (just launched or
    resumed from the page) while its trainer lives but has not yet written its own ``status.json``."""
    run_dir = Path(run_dir)
    status = read_status(run_dir)
    state = effective_state(status)
    if state != "running":
        lock = read_json(run_dir.parent / LOCK_NAME)
        if (
            isinstance(lock, dict)
            and lock.get("run") == run_dir.name
            and pid_alive(lock.get("pid"))
            and _before_lock(status, lock.get("pid"))
        ):
            return "starting"
    return state


def active_run(root: str | Path | None = None) -> Path | None:
    """The run the lock names while its process lives and has not ended; a stale lock is removed.

    A resumed run's old ``status.json`` (``finished``, ``stopped``) does not make the lock stale: it was written by
    the leg before (another pid). Taking it for the new trainer's word freed the lock while that trainer was still
    loading, and the page then showed the resumed run as finished and stopped following it."""
    root = Path(root) if root is not None else runs_root()
    lock = root / LOCK_NAME
    data = read_json(lock)
    if data is None:
        if lock.exists():
            lock.unlink(missing_ok=True)
        return None
    run_dir = root / str(data.get("run", "")) if isinstance(data, dict) else None
    if isinstance(data, dict) and pid_alive(data.get("pid")):
        status = read_status(run_dir) if run_dir else None
        if _before_lock(status, data.get("pid")) or effective_state(status) == "running":
            return run_dir
    lock.unlink(missing_ok=True)
    return None


def _start(cmd: list[str], run_dir: Path, root: Path) -> int:
    if demo_mode():
        raise LaunchError("launching runs is disabled in the hosted demo")
    busy = active_run(root)
    if busy is not None:
        raise LaunchError(f"run {busy.name!r} is still training; stop it first (one run at a time)")
    root.mkdir(parents=True, exist_ok=True)
    lock = root / LOCK_NAME
    try:  # O_EXCL: two clicks racing cannot both take the lock
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError as exc:
        raise LaunchError("another run is being launched") from exc
    try:
        log = open(run_dir / LOG, "ab")
        try:
            proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            log.close()
        track_child(proc)
        os.write(fd, json.dumps({"run": run_dir.name, "pid": proc.pid}).encode())
    except BaseException:
        os.close(fd)
        lock.unlink(missing_ok=True)
        raise
    os.close(fd)
    return proc.pid


def new_run_name(form: dict, root: Path) -> str:
    """``YYYYmmdd-HHMMSS-d<d_model>h<heads>l<layers>[-lm]``, made unique under ``root``."""
    f = {**form_defaults(), **form}
    base = time.strftime("%Y%m%d-%H%M%S") + f"-d{f['d_model']}h{f['n_heads']}l{f['layers']}"
    if f["arch"] == "decoder-only":
        base += "-lm"
    name, i = base, 2
    while (root / name).exists():
        name, i = f"{base}-{i}", i + 1
    return name


def safe_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,80}", name or ""))


def launch(
    form: dict, root: str | Path | None = None, name: str | None = None, train_tsv_bytes: bytes | None = None
) -> Path:
    """Validate, create ``root/<name>/`` and start the trainer in it; returns the run folder.

    ``train_tsv_bytes`` (an uploaded file) is saved as ``<run>/train.tsv`` and passed with ``--train-tsv``.
    """
    if demo_mode():
        raise LaunchError("launching runs is disabled in the hosted demo")
    root = Path(root) if root is not None else runs_root()
    form = {**form_defaults(), **form}
    if train_tsv_bytes is not None:
        form["data"], form["train_tsv"] = "tsv", "(uploaded)"
    errors = validate_form(form)
    if errors:
        raise LaunchError("; ".join(errors))
    if name and not safe_name(name):
        raise LaunchError("a run name may hold letters, digits, '.', '_' and '-' only")
    if (running := active_run(root)) is not None:
        raise LaunchError(f"run {running.name!r} is still training; stop it first (one run at a time)")
    name = name or new_run_name(form, root)
    run_dir = root / name
    if run_dir.exists():
        raise LaunchError(f"a run named {name!r} already exists")
    run_dir.mkdir(parents=True)
    if train_tsv_bytes is not None:
        (run_dir / "train.tsv").write_bytes(train_tsv_bytes)
        form["train_tsv"] = str(run_dir.resolve() / "train.tsv")
    try:
        _start(build_command(form, run_dir.resolve()), run_dir, root)
    except BaseException:
        if read_status(run_dir) is None:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def resume(run_dir: str | Path, root: str | Path | None = None) -> Path:
    """Continue a stopped / failed run where ``last/`` left it, with its own limits: ``--max-steps`` counts over
    the whole run, ``--max-minutes`` again for this new leg (the trainer's clock is per process)."""
    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir.parent
    if not can_resume(run_dir):
        raise LaunchError(f"{run_dir.name}: nothing to resume (no last/ saved, or still running)")
    saved = read_train_args(run_dir)
    if not saved:
        raise LaunchError(f"{run_dir.name}: its train_args.json is missing or unreadable, so it cannot be resumed")
    cmd = [
        sys.executable,
        "-m",
        "trainer.train",
        "--out",
        str(run_dir.resolve()),
        "--resume",
        "--no-progress",
        "--max-steps",
        str(saved["max_steps"]),
        "--device",
        str(saved["device"]),
    ]
    if saved.get("max_minutes"):
        cmd += ["--max-minutes", str(saved["max_minutes"])]
    if saved.get("threads"):
        cmd += ["--threads", str(saved["threads"])]
    _start(cmd, run_dir, root)
    return run_dir


def can_resume(run_dir: str | Path) -> bool:
    run_dir = Path(run_dir)
    state = effective_state(read_status(run_dir))
    return state in ("stopped", "failed", "finished") and has_resume_state(run_dir) and not _finished_all_steps(run_dir)


def _finished_all_steps(run_dir: Path) -> bool:
    status = read_status(run_dir) or {}
    try:
        return int(status.get("step", -1)) >= int(status.get("max_steps", 1 << 60))
    except (TypeError, ValueError):
        return False


def stop(run_dir: str | Path) -> bool:
    """Ask a running trainer to stop (SIGTERM to its process group: it saves ``last/`` and exits)."""
    status = read_status(Path(run_dir))
    if status is None or effective_state(status) != "running":
        return False
    pid = int(status["pid"])
    try:
        os.killpg(os.getpgid(pid), signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return False
    return True


def delete(run_dir: str | Path) -> None:
    """Remove a run folder; refused while it trains."""
    run_dir = Path(run_dir)
    status = read_status(run_dir)
    lock = read_json(run_dir.parent / LOCK_NAME)
    lock_pid = lock.get("pid") if isinstance(lock, dict) and lock.get("run") == run_dir.name else None
    busy = effective_state(status) == "running" or (lock_pid is not None and pid_alive(lock_pid))
    if busy or (status is None and recently_written(run_dir)):  # no status.json: an older trainer may be writing
        raise LaunchError(f"{run_dir.name} is still training; stop it before deleting it")
    if not run_dir.is_dir():
        return
    shutil.rmtree(run_dir, ignore_errors=True)


def export_best(run_dir: str | Path, checkpoints_root: str | Path, name: str | None = None) -> Path:
    """Copy ``<run>/best/`` to ``checkpoints_root/<run-name>`` so the sidebar picker lists it (replaces a copy)."""
    run_dir = Path(run_dir)
    src = run_dir / "best"
    if not (src / "config.json").is_file():
        raise LaunchError(f"{run_dir.name} has no best/ checkpoint yet (it appears at the first evaluation)")
    if "impl" in read_card(src):
        raise LaunchError(
            f"{run_dir.name} trained the torch.nn.Transformer baseline (--impl torch): the explorer "
            "needs this project's model, whose attention it can trace"
        )
    dest = Path(checkpoints_root) / (name or run_dir.name)
    tmp = dest.with_name(dest.name + ".copying")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


# --- the runs table ---------------------------------------------------------------------------------------
def summarize(run_dir: Path) -> dict:
    """One row of the runs table (never raises on bad files)."""
    status = read_status(run_dir)
    metrics = read_metrics(run_dir)
    cfg = read_config(run_dir)
    train = [m for m in metrics if "loss" in m]
    evals = [m for m in metrics if "valid_loss" in m]
    row = {
        "name": run_dir.name,
        "state": run_state(run_dir),
        # as the live view reads it: the trainer's last word, else its last metrics line (an older trainer)
        "step": (status or {}).get("step")
        or max((m["step"] for m in metrics if isinstance(m.get("step"), int)), default=(status or {}).get("step")),
        "max_steps": (status or {}).get("max_steps"),
        "loss": train[-1].get("loss") if train else None,
        "valid_loss": evals[-1].get("valid_loss") if evals else None,
        "bleu": evals[-1].get("valid_bleu") if evals else None,
        "chrf": evals[-1].get("valid_chrf") if evals else None,
        "model": model_summary(cfg),
        "started": (status or {}).get("started"),
        "updated": (status or {}).get("updated"),
        "error": (status or {}).get("error"),
    }
    return row


def refused_runs(root: str | Path | None = None) -> list[str]:
    """Why each folder under ``root`` that :func:`list_runs` leaves out is left out (a sentence each)."""
    root = Path(root) if root is not None else runs_root()
    try:
        return [why for p in sorted(root.iterdir()) if p.is_dir() and (why := folder_problem(root, p.name))]
    except OSError:
        return []


def list_runs(root: str | Path | None = None) -> list[dict]:
    """Summaries of every run folder under ``root``, newest first (tolerant of garbage and vanishing folders)."""
    root = Path(root) if root is not None else runs_root()
    try:
        # a name with a control character or a link out of the runs folder is not a run the page may show or delete
        folders = safe_folders(root, [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")])
    except OSError:
        return []
    rows = []
    for folder in folders:
        try:
            mtime = folder.stat().st_mtime
            row = summarize(folder)
        except OSError:  # vanished while we looked
            continue
        row["path"] = str(folder)
        row["_mtime"] = mtime
        rows.append(row)
    rows.sort(key=lambda r: r.pop("_mtime"), reverse=True)
    return rows
