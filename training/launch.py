"""Launch, watch and control training runs from the app (no Streamlit here).

A run is the ordinary training CLI, ``python -m training.train --out runs/<name> …``, started as a detached process
(its own session, so that a Stop reaches the whole process group and a Streamlit rerun does not kill it), with
stdout/stderr in ``runs/<name>/train.log``. ``runs/.active`` (JSON ``{run, pid}``) says which run the app started
last; it blocks a second launch while that run lives and is stale once its process is gone.

Everything that reads run folders tolerates missing or garbage files and folders that vanish mid-read: a run
being written by another process is the normal case.
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

from model.config import ARCHITECTURES, POS_ENCODINGS, ConfigError, ModelConfig
from .runs import read_jsonl, read_status

REPO = Path(__file__).resolve().parent.parent
RUNS_ROOT = REPO / "runs"
#: Overrides :data:`RUNS_ROOT` (read at every call), e.g. for tests.
RUNS_ENV = "ATTENTION_EXPLORER_RUNS"
DEMO_ENV = "ATTENTION_EXPLORER_DEMO"
LOCK_NAME = ".active"
#: Training data. A decoder-only (language model) run trains on each side of these pairs as its own text; the
#: Brown corpus (English sentences, ``--corpus brown``) is for a decoder-only model only.
BROWN = "Brown corpus (English)"
DATA_CHOICES = ("sentences", "sentences + phrases", "sentences + phrases + words", "uploaded TSV", BROWN)
DEVICES = ("auto", "cpu", "cuda")
PHRASES_PER_EPOCH = 2000
WORDS_PER_EPOCH = 2000

#: Every knob of the launch form with its default (the base-like model).
DEFAULTS: dict = {
    "arch": "encoder-decoder",
    "d_model": 256, "n_heads": 4, "layers": 3, "d_ff": 1024, "dropout": 0.1, "pos_encoding": "sinusoidal",
    "norm_first": False, "label_smoothing": 0.1, "warmup": 4000, "peak_lr": 1e-3, "batch_tokens": 2000,
    "max_steps": 10_000, "max_minutes": 0.0, "seed": 1, "device": "auto", "data": "sentences",
    "train_tsv": None, "limit_train": 0, "vocab_size": 8000, "eval_every": 1000, "eval_sentences": 300,
    "log_every": 50, "threads": 0,
    # The low-resource recipe (issue 13): 0 / "auto" / "all" / None leave the trainer's own defaults.
    "attention_dropout": 0.0, "activation_dropout": None, "src_word_dropout": 0.0, "tgt_word_dropout": 0.0,
    "decoder_layerdrop": 0.0, "weight_decay": 0.0, "bpe_dropout": 0.0, "vocab_from": "all", "decoder_layers": 0,
    "dict_share": 0.0, "select": "auto", "keep_last": 0, "patience": 0, "precision": "auto", "init_from": None,
}
#: Form knobs passed to the trainer as ``--flag value`` when set (not 0 / None / the trainer's default).
RECIPE_FLAGS = {"attention_dropout": "--attention-dropout", "activation_dropout": "--activation-dropout",
                "src_word_dropout": "--src-word-dropout", "tgt_word_dropout": "--tgt-word-dropout",
                "decoder_layerdrop": "--decoder-layerdrop", "weight_decay": "--weight-decay",
                "bpe_dropout": "--bpe-dropout", "vocab_from": "--vocab-from", "decoder_layers": "--decoder-layers",
                "dict_share": "--dict-share", "select": "--select", "keep_last": "--keep-last",
                "patience": "--patience", "precision": "--precision", "init_from": "--init-from"}
#: The recipe's rates, each a probability in [0, 1).
RECIPE_RATES = ("attention_dropout", "activation_dropout", "src_word_dropout", "tgt_word_dropout",
                "decoder_layerdrop", "bpe_dropout", "dict_share")

PRESETS: dict[str, dict] = {
    "2-minute CPU demo": {
        "d_model": 64, "n_heads": 2, "layers": 2, "d_ff": 256, "max_minutes": 2.0, "max_steps": 100_000,
        "limit_train": 3000, "vocab_size": 2000, "eval_every": 100, "eval_sentences": 50, "warmup": 200,
        "log_every": 10, "batch_tokens": 1500,
    },
    "small": {
        "d_model": 128, "n_heads": 4, "layers": 2, "d_ff": 512, "max_minutes": 20.0, "max_steps": 5000,
        "vocab_size": 4000, "eval_every": 500, "eval_sentences": 100, "warmup": 1000, "log_every": 25,
    },
    "base-like": {"d_model": 256, "n_heads": 4, "layers": 3, "d_ff": 1024},
    # Carry the shipped translator on (how checkpoints/en-de is trained across sessions; the README's command).
    "continue the shipped translator (hours)": {
        "init_from": "checkpoints/en-de", "peak_lr": 2e-3, "warmup": 500, "batch_tokens": 1500, "dict_share": 0.25,
        "data": "sentences + phrases + words", "eval_every": 1000, "eval_sentences": 0, "keep_last": 5,
        "max_steps": 1_000_000, "max_minutes": 120.0, "norm_first": True, "dropout": 0.2, "attention_dropout": 0.2,
    },
    # A GPT-style language model of about the demo translator's size: its 2 + 2 layers become 4 decoder layers.
    "2-minute CPU demo, language model": {
        "arch": "decoder-only", "data": BROWN, "d_model": 64, "n_heads": 2, "layers": 4, "d_ff": 256,
        "max_minutes": 2.0, "max_steps": 100_000, "limit_train": 3000, "vocab_size": 2000, "eval_every": 100,
        "warmup": 200, "log_every": 10, "batch_tokens": 1500,
    },
}


def preset_form(name: str) -> dict:
    """The full form of a preset (defaults overlaid with the preset's values)."""
    return {**DEFAULTS, **PRESETS[name]}


def warm_start_choices() -> list[str]:
    """Checkpoint folders a run can start from (``--init-from``), relative to the repository where possible: the
    shipped ones under ``checkpoints/`` and every run's ``best/``."""
    from model.checkpoint import list_checkpoints  # here: the launcher itself needs no torch

    found = list_checkpoints(REPO / "checkpoints")
    root = runs_root()
    if root.is_dir():
        found += sorted(p / "best" for p in root.iterdir() if (p / "best" / "model.safetensors").is_file())
    return [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in found]


def runs_root() -> Path:
    """``$ATTENTION_EXPLORER_RUNS`` if set, else :data:`RUNS_ROOT`."""
    env = os.environ.get(RUNS_ENV, "").strip()
    return Path(env).expanduser() if env else RUNS_ROOT


def demo_mode() -> bool:
    """Hosted demo (``ATTENTION_EXPLORER_DEMO`` set): runs are read-only, launching is refused."""
    return os.environ.get(DEMO_ENV, "") not in ("", "0", "false")


class LaunchError(RuntimeError):
    """A launch / resume / stop / delete that cannot be done (the message says why)."""


# --- the form -------------------------------------------------------------------------------------------
def validate_form(form: dict) -> list[str]:
    """Human-readable errors of a launch form (empty list = fine)."""
    f = {**DEFAULTS, **form}
    errors: list[str] = []

    def number(name, kind=int):
        value = f.get(name)
        try:
            if isinstance(value, bool) or value is None:
                raise TypeError
            out = kind(value)
            if kind is int and out != value:
                raise ValueError
            return out
        except (TypeError, ValueError):
            errors.append(f"{name} must be a number, got {value!r}")
            return None

    ints = {k: number(k) for k in ("d_model", "n_heads", "layers", "d_ff", "warmup", "batch_tokens", "max_steps",
                                    "seed", "limit_train", "vocab_size", "eval_every", "eval_sentences",
                                    "log_every", "threads")}
    floats = {k: number(k, float) for k in ("dropout", "label_smoothing", "peak_lr", "max_minutes", "weight_decay")}
    for k in RECIPE_RATES:
        if f.get(k) is not None and (number(k, float) is not None) and not 0.0 <= float(f[k]) < 1.0:
            errors.append(f"{k} must lie in [0, 1), got {f[k]}")
    for k in ("decoder_layers", "keep_last", "patience"):
        if number(k) is not None and f[k] < 0:
            errors.append(f"{k} must not be negative, got {f[k]}")
    if floats["weight_decay"] is not None and floats["weight_decay"] < 0:
        errors.append(f"weight_decay must not be negative, got {floats['weight_decay']}")
    if f.get("init_from") and not (REPO / str(f["init_from"])).is_dir() and not Path(str(f["init_from"])).is_dir():
        errors.append(f"no checkpoint folder {f['init_from']!r} to start from")
    for k in ("d_model", "n_heads", "layers", "d_ff", "batch_tokens", "max_steps", "eval_every", "log_every"):
        if ints[k] is not None and ints[k] <= 0:
            errors.append(f"{k} must be positive, got {ints[k]}")
    for k in ("warmup", "limit_train", "eval_sentences", "threads", "seed"):
        if ints[k] is not None and ints[k] < 0:
            errors.append(f"{k} must not be negative, got {ints[k]}")
    if ints["vocab_size"] is not None and ints["vocab_size"] < 100:
        errors.append(f"vocab_size must be at least 100, got {ints['vocab_size']}")
    if floats["max_minutes"] is not None and floats["max_minutes"] < 0:
        errors.append(f"max_minutes must be positive (or 0 = no limit), got {floats['max_minutes']}")
    if floats["peak_lr"] is not None and not floats["peak_lr"] > 0:
        errors.append(f"peak_lr must be positive, got {floats['peak_lr']}")
    if floats["dropout"] is not None and not 0.0 <= floats["dropout"] < 1.0:
        errors.append(f"dropout must lie in [0, 1), got {floats['dropout']}")
    if floats["label_smoothing"] is not None and not 0.0 <= floats["label_smoothing"] < 1.0:
        errors.append(f"label_smoothing must lie in [0, 1), got {floats['label_smoothing']}")
    if f["arch"] not in ARCHITECTURES:
        errors.append(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {f['arch']!r}")
    if f["pos_encoding"] not in POS_ENCODINGS:
        errors.append(f"unknown positional encoding {f['pos_encoding']!r} (one of {', '.join(POS_ENCODINGS)})")
    if f["device"] not in DEVICES:
        errors.append(f"device must be one of {', '.join(DEVICES)}, got {f['device']!r}")
    if f["data"] not in DATA_CHOICES:
        errors.append(f"data must be one of {DATA_CHOICES}, got {f['data']!r}")
    elif f["data"] == "uploaded TSV" and not f.get("train_tsv"):
        errors.append("upload a source<TAB>target .tsv file to train on your own data")
    elif f["data"] == BROWN and f["arch"] != "decoder-only":
        errors.append("the Brown corpus is English only: it trains a language model (architecture decoder-only), "
                      "not a translator")
    shape = [ints[k] for k in ("d_model", "n_heads", "layers", "d_ff")]
    if not errors and all(v is not None for v in shape):
        try:  # the model's own checks (d_model % n_heads, RoPE's even d_k, sinusoidal's even d_model, …)
            ModelConfig(arch=f["arch"], d_model=ints["d_model"], n_heads=ints["n_heads"],
                        n_encoder_layers=ints["layers"], n_decoder_layers=ints["layers"], d_ff=ints["d_ff"],
                        dropout=floats["dropout"] or 0.0, pos_encoding=f["pos_encoding"],
                        norm_first=bool(f["norm_first"]))
        except ConfigError as exc:
            errors.append(str(exc))
    return errors


def build_command(form: dict, run_dir: str | Path) -> list[str]:
    """The CLI a user would type for this form: ``[python, -m, training.train, --out, run_dir, …]``."""
    f = {**DEFAULTS, **form}
    cmd = [sys.executable, "-m", "training.train", "--out", str(run_dir), "--arch", f["arch"],
           "--d-model", str(f["d_model"]), "--n-heads", str(f["n_heads"]), "--layers", str(f["layers"]),
           "--d-ff", str(f["d_ff"]), "--dropout", str(f["dropout"]), "--pos-encoding", f["pos_encoding"]]
    if f["norm_first"]:
        cmd.append("--norm-first")
    cmd += ["--label-smoothing", str(f["label_smoothing"]), "--warmup", str(f["warmup"]),
            "--peak-lr", str(f["peak_lr"]), "--batch-tokens", str(f["batch_tokens"]),
            "--max-steps", str(f["max_steps"])]
    if f["max_minutes"]:
        cmd += ["--max-minutes", str(f["max_minutes"])]
    cmd += ["--seed", str(f["seed"]), "--device", f["device"], "--vocab-size", str(f["vocab_size"]),
            "--eval-every", str(f["eval_every"]), "--eval-sentences", str(f["eval_sentences"]),
            "--log-every", str(f["log_every"])]
    if f["limit_train"]:
        cmd += ["--limit-train", str(f["limit_train"])]
    if f["threads"]:
        cmd += ["--threads", str(f["threads"])]
    if f["data"] == "uploaded TSV":
        cmd += ["--train-tsv", str(f["train_tsv"])]
    elif f["data"] == BROWN:
        cmd += ["--corpus", "brown"]
    else:
        if "phrases" in f["data"]:
            cmd += ["--phrases-per-epoch", str(PHRASES_PER_EPOCH)]
        if "words" in f["data"]:
            cmd += ["--words-per-epoch", str(WORDS_PER_EPOCH)]
    for key, flag in RECIPE_FLAGS.items():
        value = f.get(key)
        if value not in (None, "", DEFAULTS[key]):
            cmd += [flag, str(value)]
    cmd.append("--no-progress")
    return cmd


# --- processes and the lock -----------------------------------------------------------------------------
_children: dict[int, subprocess.Popen] = {}


def pid_alive(pid) -> bool:
    """Whether process ``pid`` exists (a finished child of this process is reaped first, so no zombie counts)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            _children.pop(pid, None)
            return False
    except ChildProcessError:
        pass  # not our child (or already reaped)
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # a zombie that is not ours to reap is dead all the same
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        pass
    return True


def effective_state(status: dict | None, pid=None) -> str:
    """The run's state as the page should show it.

    ``status.json`` says ``running`` until the trainer writes its last word; if the process is gone (killed,
    out of memory, machine rebooted) that is a ``failed`` run. No status yet: ``starting`` while ``pid`` lives.
    """
    if not isinstance(status, dict):
        return "starting" if pid is not None and pid_alive(pid) else "unknown"
    state = status.get("state")
    if state == "running":
        return "running" if pid_alive(status.get("pid")) else "failed"
    return state if state in ("finished", "stopped", "failed") else "unknown"


#: States in which a run's trainer process is alive: the page keeps polling them.
LIVE_STATES = ("starting", "running")


def run_state(run_dir: str | Path) -> str:
    """:func:`effective_state` of a run folder, and ``starting`` for the run the lock names (just launched or
    resumed from the page) while its trainer lives but has not yet written ``status.json`` as running."""
    run_dir = Path(run_dir)
    status = read_status(run_dir)
    state = effective_state(status)
    if state != "running":
        lock = _read_json(run_dir.parent / LOCK_NAME)
        if isinstance(lock, dict) and lock.get("run") == run_dir.name and pid_alive(lock.get("pid")):
            return "starting"
    return state


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def active_run(root: str | Path | None = None) -> Path | None:
    """The run the lock names while its process lives; a stale lock is removed."""
    root = Path(root) if root is not None else runs_root()
    lock = root / LOCK_NAME
    data = _read_json(lock)
    if data is None:
        if lock.exists():
            lock.unlink(missing_ok=True)
        return None
    run_dir = root / str(data.get("run", "")) if isinstance(data, dict) else None
    if isinstance(data, dict) and pid_alive(data.get("pid")):
        status = read_status(run_dir) if run_dir else None
        if status is None or effective_state(status) == "running":
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
        log = open(run_dir / "train.log", "ab")
        try:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            log.close()
        _children[proc.pid] = proc
        os.write(fd, json.dumps({"run": run_dir.name, "pid": proc.pid}).encode())
    except BaseException:
        os.close(fd)
        lock.unlink(missing_ok=True)
        raise
    os.close(fd)
    return proc.pid


def new_run_name(form: dict, root: Path) -> str:
    f = {**DEFAULTS, **form}
    base = time.strftime("%Y%m%d-%H%M%S") + f"-d{f['d_model']}h{f['n_heads']}l{f['layers']}"
    if f["arch"] == "decoder-only":
        base += "-lm"
    name, i = base, 2
    while (root / name).exists():
        name, i = f"{base}-{i}", i + 1
    return name


def safe_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,80}", name or ""))


def launch(form: dict, root: str | Path | None = None, name: str | None = None,
           train_tsv_bytes: bytes | None = None) -> Path:
    """Validate, create ``root/<name>/`` and start the trainer in it; returns the run folder.

    ``train_tsv_bytes`` (an uploaded file) is saved as ``<run>/train.tsv`` and passed with ``--train-tsv``.
    """
    if demo_mode():
        raise LaunchError("launching runs is disabled in the hosted demo")
    root = Path(root) if root is not None else runs_root()
    form = {**DEFAULTS, **form}
    if train_tsv_bytes is not None:
        form["data"], form["train_tsv"] = "uploaded TSV", "(uploaded)"
    errors = validate_form(form)
    if errors:
        raise LaunchError("; ".join(errors))
    if name and not safe_name(name):
        raise LaunchError("a run name may hold letters, digits, '.', '_' and '-' only")
    if active_run(root) is not None:
        raise LaunchError(f"run {active_run(root).name!r} is still training; stop it first (one run at a time)")
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
        if not (run_dir / "status.json").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def resume(run_dir: str | Path, root: str | Path | None = None) -> Path:
    """Continue a stopped / failed run where ``last/`` left it, with its own step and time limits."""
    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir.parent
    if not can_resume(run_dir):
        raise LaunchError(f"{run_dir.name}: nothing to resume (no last/ saved, or still running)")
    saved = read_train_args(run_dir)
    cmd = [sys.executable, "-m", "training.train", "--out", str(run_dir.resolve()), "--resume", "--no-progress",
           "--max-steps", str(saved.get("max_steps", DEFAULTS["max_steps"])),
           "--device", str(saved.get("device", "auto"))]
    if saved.get("max_minutes"):
        cmd += ["--max-minutes", str(saved["max_minutes"])]
    if saved.get("threads"):
        cmd += ["--threads", str(saved["threads"])]
    _start(cmd, run_dir, root)
    return run_dir


def can_resume(run_dir: str | Path) -> bool:
    run_dir = Path(run_dir)
    state = effective_state(read_status(run_dir))
    return state in ("stopped", "failed", "finished") and (run_dir / "last" / "trainer_state.json").is_file() \
        and not _finished_all_steps(run_dir)


def _finished_all_steps(run_dir: Path) -> bool:
    status = read_status(run_dir) or {}
    try:
        return int(status.get("step", -1)) >= int(status.get("max_steps", 1 << 60))
    except (TypeError, ValueError):
        return False


def stop(run_dir: str | Path) -> bool:
    """Ask a running trainer to stop (SIGTERM to its process group: it saves ``last/`` and exits)."""
    status = read_status(Path(run_dir))
    if effective_state(status) != "running":
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
    lock = _read_json(run_dir.parent / LOCK_NAME)
    lock_pid = lock.get("pid") if isinstance(lock, dict) and lock.get("run") == run_dir.name else None
    busy = effective_state(status) == "running" or (lock_pid is not None and pid_alive(lock_pid))
    if busy or (status is None and recently_written(run_dir)):  # no status.json: an older trainer may be writing
        raise LaunchError(f"{run_dir.name} is still training; stop it before deleting it")
    if not run_dir.is_dir():
        return
    shutil.rmtree(run_dir, ignore_errors=True)


def recently_written(run_dir: str | Path, seconds: float = 300.0) -> bool:
    """Whether ``metrics.jsonl`` or ``status.json`` changed in the last ``seconds`` (a run without a usable
    status that may still be training)."""
    for name in ("metrics.jsonl", "status.json"):
        try:
            if time.time() - (Path(run_dir) / name).stat().st_mtime < seconds:
                return True
        except OSError:
            pass
    return False


def export_best(run_dir: str | Path, checkpoints_root: str | Path, name: str | None = None) -> Path:
    """Copy ``<run>/best/`` to ``checkpoints_root/<run-name>`` so the sidebar picker lists it (replaces a copy)."""
    run_dir = Path(run_dir)
    src = run_dir / "best"
    if not (src / "config.json").is_file():
        raise LaunchError(f"{run_dir.name} has no best/ checkpoint yet (it appears at the first evaluation)")
    if "impl" in (_read_json(src / "card.json") or {}):
        raise LaunchError(f"{run_dir.name} trained the torch.nn.Transformer baseline (--impl torch): the explorer "
                          "needs this project's model, whose attention it can trace")
    dest = Path(checkpoints_root) / (name or run_dir.name)
    tmp = dest.with_name(dest.name + ".copying")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


# --- reading runs ---------------------------------------------------------------------------------------
def read_train_args(run_dir: str | Path) -> dict:
    """The run's ``train_args.json`` (the trainer's arguments), or ``{}`` when it is missing or unreadable."""
    saved = _read_json(Path(run_dir) / "train_args.json")
    return saved if isinstance(saved, dict) else {}


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of ``metrics.jsonl`` (a half-written last line and garbage lines are skipped)."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def read_probes(run_dir: str | Path) -> list[dict]:
    """The records of ``probes.jsonl`` (``{step, probes: [...]}``), sorted by step; bad lines skipped."""
    out = {}
    for rec in read_jsonl(Path(run_dir) / "probes.jsonl"):
        if isinstance(rec.get("step"), int) and isinstance(rec.get("probes"), list):
            out[rec["step"]] = rec  # a resumed run may redo a snapshot: the latest wins
    return [out[k] for k in sorted(out)]


def log_tail(run_dir: str | Path, lines: int = 40) -> str:
    try:
        with open(Path(run_dir) / "train.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 20_000))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])


def run_arch(run_dir: str | Path) -> str:
    """The run's architecture from ``config.json`` (else ``train_args.json``; ``"encoder-decoder"`` if neither says)."""
    for name in ("config.json", "train_args.json"):
        data = _read_json(Path(run_dir) / name)
        if isinstance(data, dict) and data.get("arch") in ARCHITECTURES:
            return data["arch"]
    return "encoder-decoder"


def model_summary(cfg: dict) -> str:
    """``"d256 · 4h · 3L · sinusoidal"`` from a run's ``config.json`` (layers per stack; a language model says
    ``"· decoder-only"``); ``""`` without a config."""
    if not cfg:
        return ""
    lm = cfg.get("arch") == "decoder-only"
    layers = cfg.get("n_decoder_layers") if lm else cfg.get("n_encoder_layers")
    return (f"d{cfg.get('d_model')} · {cfg.get('n_heads')}h · {layers}L · {cfg.get('pos_encoding')}"
            + (" · decoder-only" if lm else ""))


def summarize(run_dir: Path) -> dict:
    """One row of the runs table (never raises on bad files)."""
    status = read_status(run_dir)
    status = status if isinstance(status, dict) else None
    metrics = read_metrics(run_dir)
    cfg = _read_json(run_dir / "config.json")
    cfg = cfg if isinstance(cfg, dict) else {}
    train = [m for m in metrics if "loss" in m]
    evals = [m for m in metrics if "valid_loss" in m]
    row = {
        "name": run_dir.name,
        "state": run_state(run_dir),
        "step": (status or {}).get("step", max((m["step"] for m in metrics if isinstance(m.get("step"), int)),
                                               default=None)),
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


def list_runs(root: str | Path | None = None) -> list[dict]:
    """Summaries of every run folder under ``root``, newest first (tolerant of garbage and vanishing folders)."""
    root = Path(root) if root is not None else runs_root()
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
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
