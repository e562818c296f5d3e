"""THE run-folder format: every file of ``runs/<id>/`` is read and written here, and nowhere else.

A run folder holds:

* ``train_args.json`` — the trainer's options (:class:`training.config.TrainConfig` fields, plus ``init_card`` for
  a warm start); read back normalised (:func:`read_train_args`: options newer than the run get their default);
* ``config.json`` — the model's :class:`model.config.ModelConfig`;
* ``status.json`` — ``state`` (``running`` / ``finished`` / ``stopped`` / ``failed``), ``pid``, ``started`` (the
  run's first start), ``leg_started`` (this process's start: a ``--resume`` begins a new leg, whose
  ``--max-minutes`` counts from here), ``leg`` (1, 2, …), ``earlier_seconds`` (training time of the legs before),
  ``updated`` (ISO times, UTC), ``step``, ``max_steps``, ``max_minutes``, ``reason``, ``exit_code``, ``error``;
  replaced atomically, so a reader (the training page) never sees half a file;
* ``metrics.jsonl`` — one JSON object per log step (``loss``, ``lr``, ``tokens_per_s``, …), evaluation
  (``valid_loss``, ``valid_ppl``, ``valid_bleu``, ``valid_chrf``) or event (``{"event": "stopped"}``);
* ``checkpoints/step-N/`` — checkpoints at the log-spaced steps of :func:`snapshot_steps`;
* ``probes.jsonl`` — one JSON object per snapshot: the probe sentences' greedy translations (a decoder-only
  model: their greedy continuations) and their attention ``{kind: [layers][heads][q][k]}`` (rounded to 4
  decimals), to replay how heads form; read back as :class:`Snapshot` s of :class:`reading.trace.Trace` s;
* ``best/``, ``last/``, ``evals/step-N/`` — checkpoints (:mod:`training.checkpoints`, :mod:`trainer.best`);
  ``last/`` also holds the resume state (:mod:`training.state`); ``train.log`` — the trainer's output when the
  Training page started it.

Every reader tolerates missing or garbage files and folders that vanish mid-read: a run being written by another
process is the normal case.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path

import torch

from model.checkpoint import atomic_write_json, is_checkpoint_dir
from model.config import ARCHITECTURES
from reading.trace import Trace
from training.config import defaults

STATUS, METRICS, PROBES, TRAIN_ARGS, CONFIG, LOG = (
    "status.json",
    "metrics.jsonl",
    "probes.jsonl",
    "train_args.json",
    "config.json",
    "train.log",
)
RUNS_ROOT = Path(__file__).resolve().parent.parent / "runs"
#: Overrides :data:`RUNS_ROOT` (read at every call), e.g. for tests.
RUNS_ENV = "ATTENTION_EXPLORER_RUNS"


def runs_root() -> Path:
    """Where run folders live: ``$ATTENTION_EXPLORER_RUNS`` if set, else :data:`RUNS_ROOT` (``runs/``)."""
    env = os.environ.get(RUNS_ENV, "").strip()
    return Path(env).expanduser() if env else RUNS_ROOT


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def snapshot_steps(max_steps: int) -> list[int]:
    """Log-spaced snapshot steps ``0, 10, 30, 100, 300, 1000, …`` up to ``max_steps``, which is always included."""
    steps, k = {0, max_steps}, 10
    while k <= max_steps:
        steps.add(k)
        if 3 * k <= max_steps:
            steps.add(3 * k)
        k *= 10
    return sorted(s for s in steps if s <= max_steps)


def write_status(folder: Path, **fields) -> dict:
    """Merge ``fields`` into ``status.json`` (with ``updated`` set to now) and replace the file atomically."""
    path = Path(folder) / STATUS
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        status = {}
    status.update(fields, updated=now_iso())
    status.setdefault("pid", os.getpid())
    atomic_write_json(path, status)
    return status


def read_status(folder: Path) -> dict | None:
    """``status.json`` of a run, or ``None`` when it is missing or unreadable."""
    try:
        status = json.loads((Path(folder) / STATUS).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return status if isinstance(status, dict) else None


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a ``.jsonl`` file, one a line; a half-written last line and garbage lines are skipped,
    and a missing file gives ``[]`` (a run folder may vanish while it is read)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


# --- writing (the trainer) ---------------------------------------------------------------------------------------
class MetricsLog:
    """Appends records to ``metrics.jsonl``, one JSON object a line, flushed at once (the page reads it live).
    With ``enabled`` False (a data-parallel rank other than 0) it writes nothing."""

    def __init__(self, folder: Path, enabled: bool = True):
        self.file = open(Path(folder) / METRICS, "a", encoding="utf-8") if enabled else None

    def __call__(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def append_probes(folder: Path, record: dict) -> None:
    """Append a :func:`training.checkpoints.probe_record` to ``probes.jsonl``."""
    with open(Path(folder) / PROBES, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_train_args(folder: Path, args: dict) -> None:
    """Replace ``train_args.json`` with ``args`` (the trainer's options, atomically)."""
    atomic_write_json(Path(folder) / TRAIN_ARGS, args)


def write_config(folder: Path, cfg) -> None:
    """Write the model's :class:`model.config.ModelConfig` as ``config.json``."""
    cfg.to_json(Path(folder) / CONFIG)


# --- reading (the trainer's --resume, the Training page, benchmarks) -----------------------------------------------
def read_json(path: Path):
    """The JSON value in ``path``, or ``None`` when it is missing, unreadable or not JSON (half-written)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def read_train_args(folder: Path) -> dict:
    """The run's options, normalised: ``train_args.json`` with every option it lacks (the run is older than the
    option) set to its :class:`training.config.TrainConfig` default; ``{}`` when the file is missing or unreadable."""
    saved = read_json(Path(folder) / TRAIN_ARGS)
    return {**defaults(), **saved} if isinstance(saved, dict) else {}


def read_config(folder: Path) -> dict:
    """The run's (or a checkpoint's) ``config.json`` as a dict; ``{}`` when missing or unreadable."""
    cfg = read_json(Path(folder) / CONFIG)
    return cfg if isinstance(cfg, dict) else {}


def read_card(folder: Path) -> dict:
    """A checkpoint folder's ``card.json``; ``{}`` when missing or unreadable."""
    card = read_json(Path(folder) / "card.json")
    return card if isinstance(card, dict) else {}


def read_metrics(folder: Path) -> list[dict]:
    """The records of ``metrics.jsonl`` (a half-written last line and garbage lines are skipped)."""
    return read_jsonl(Path(folder) / METRICS)


@dataclass
class Probe:
    """One probe sentence at one snapshot: ``output`` is its translation (``continues`` False) or the text that
    a decoder-only model continued it with (``continues`` True); ``trace`` holds its tokens and attention
    (``trace.attention[kind]``: ``[layers, heads, q_len, k_len]``; no ids or logits)."""

    source: str
    output: str
    continues: bool
    trace: Trace


@dataclass
class Snapshot:
    """One line of ``probes.jsonl``: the step and its raw probe records, turned into :class:`Probe` s on first use
    (a long run has hundreds of snapshots; the page draws one)."""

    step: int
    records: list

    @cached_property
    def probes(self) -> list[Probe]:
        """The probes that read as attention tensors (a malformed one is left out)."""
        out = []
        for rec in self.records:
            if not isinstance(rec, dict):
                continue
            try:
                attention = {k: torch.tensor(v, dtype=torch.float32) for k, v in (rec.get("attention") or {}).items()}
            except (TypeError, ValueError):
                continue
            if any(a.dim() != 4 for a in attention.values()):
                continue
            trace = Trace(
                src_tokens=tuple(rec.get("src_tokens") or ()),
                tgt_tokens=tuple(rec.get("tgt_tokens") or ()),
                src_ids=(),
                tgt_ids=(),
                attention=attention,
            )
            continues = "continuation" in rec
            out.append(
                Probe(
                    str(rec.get("source", "?")),
                    str(rec.get("continuation" if continues else "translation", "")),
                    continues,
                    trace,
                )
            )
        return out


def read_probes(folder: Path) -> list[Snapshot]:
    """The snapshots of ``probes.jsonl``, sorted by step (a resumed run may redo a snapshot: the latest wins);
    bad lines skipped."""
    out = {}
    for rec in read_jsonl(Path(folder) / PROBES):
        if isinstance(rec.get("step"), int) and isinstance(rec.get("probes"), list):
            out[rec["step"]] = Snapshot(rec["step"], rec["probes"])
    return [out[k] for k in sorted(out)]


def has_resume_state(folder: Path) -> bool:
    """Whether ``last/`` holds a resume state (``trainer_state.json`` and the optimizer's moments: a run put back
    together from exported weights alone has the first, not the second, and is not resumable)."""
    last = Path(folder) / "last"
    return (last / "trainer_state.json").is_file() and (last / "optimizer.safetensors").is_file()


def log_tail(folder: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of ``train.log`` (``""`` without one)."""
    try:
        with open(Path(folder) / LOG, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 20_000))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])


def recently_written(folder: Path, seconds: float = 300.0) -> bool:
    """Whether ``metrics.jsonl`` or ``status.json`` changed in the last ``seconds`` (a run without a usable
    status that may still be training)."""
    for name in (METRICS, STATUS):
        try:
            if time.time() - (Path(folder) / name).stat().st_mtime < seconds:
                return True
        except OSError:
            pass
    return False


def run_arch(folder: Path) -> str:
    """The run's architecture from ``config.json`` (else ``train_args.json``; ``"encoder-decoder"`` if neither says)."""
    for data in (read_config(folder), read_json(Path(folder) / TRAIN_ARGS)):
        if isinstance(data, dict) and data.get("arch") in ARCHITECTURES:
            return data["arch"]
    return "encoder-decoder"


def folder_problem(root: Path, name: str) -> str | None:
    """Why ``name`` is not a folder right under ``root`` that the app may read (a run, a checkpoint), or ``None``:
    empty, ``.`` or ``..``, a path (absolute, or with a separator), a NUL or other control character, or a
    symbolic link that leads out of ``root``. A stray folder or a crafted name never makes the app read elsewhere."""
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in name[:80])
    if not name.strip(" .") or any(not c.isprintable() for c in name):
        return f"“{shown}” is not a folder name: empty, dots only, or holding a control character"
    if "/" in name or "\\" in name or Path(name).is_absolute():
        return f"“{shown}” is a path, not the name of a folder in {root}"
    folder = Path(root) / name
    if folder.is_symlink() and not folder.resolve().is_relative_to(Path(root).resolve()):
        return f"“{shown}” is a link to a folder outside {root}"
    return None


def safe_folders(root: Path, folders) -> list[Path]:
    """``folders`` found right under ``root`` (or ``root`` itself) less those :func:`folder_problem` refuses."""
    return [f for f in folders if Path(f) == Path(root) or folder_problem(root, Path(f).name) is None]


def run_checkpoints(root: Path | None = None) -> dict[str, Path]:
    """Every checkpoint the runs under ``root`` (default :func:`runs_root`) left: ``"<run>/best"``,
    ``"<run>/checkpoints/step-N"`` and ``"<run>/evals/step-N"`` → folder, runs by name and steps in order. A run
    that is still writing may list a folder whose files are incomplete: loading it says so
    (:class:`model.checkpoint.CheckpointError`)."""
    root = Path(root) if root is not None else runs_root()
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    inside = root.resolve()
    for run in safe_folders(root, sorted(p for p in root.iterdir() if p.is_dir())):
        candidates = [run / "best"]
        for sub in ("checkpoints", "evals"):
            candidates += sorted((run / sub).glob("step-*"), key=_step)  # nothing when the folder is missing
        for path in candidates:
            if is_checkpoint_dir(path) and path.resolve().is_relative_to(inside):  # no link out of the runs
                found[str(path.relative_to(root))] = path
    return found


def _step(folder: Path) -> int:
    """N of a ``step-N`` folder (−1 for a name that is not one), for sorting snapshots in step order."""
    n = folder.name.removeprefix("step-")
    return int(n) if n.isdigit() else -1


def model_summary(cfg: dict) -> str:
    """``"d256 · 4h · 3L · sinusoidal"`` from a run's ``config.json`` (layers per stack; a language model says
    ``"· decoder-only"``); ``""`` without a config."""
    if not cfg:
        return ""
    lm = cfg.get("arch") == "decoder-only"
    layers = cfg.get("n_decoder_layers") if lm else cfg.get("n_encoder_layers")
    return f"d{cfg.get('d_model')} · {cfg.get('n_heads')}h · {layers}L · {cfg.get('pos_encoding')}" + (
        " · decoder-only" if lm else ""
    )
