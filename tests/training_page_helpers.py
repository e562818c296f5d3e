"""What the Training page's test modules share: the tiny run's settings, waiting, the page under AppTest and
reading its compare view."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

from streamlit.testing.v1 import AppTest

from launching import launch as L
from training import runs as R

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "app_pages" / "training" / "training.py"

TINY = {
    "d_model": 32,
    "n_heads": 2,
    "layers": 1,
    "d_ff": 64,
    "max_steps": 20,
    "max_minutes": 0.0,
    "limit_train": 200,
    "eval_every": 10,
    "eval_sentences": 5,
    "vocab_size": 500,
    "warmup": 5,
    "log_every": 5,
    "threads": 1,
    "device": "cpu",
    "batch_tokens": 600,
}
#: A run's start time and its epoch seconds, for status files written by hand.
START = "2026-01-01T00:00:00+00:00"
T0 = datetime.fromisoformat(START).timestamp()
LONG = {**TINY, "max_steps": 100_000, "max_minutes": 2.0, "eval_every": 100_000}


def wait_for(pred, timeout=180.0, every=0.25):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(every)
    return False


# --- the page --------------------------------------------------------------------------------------------
def page(monkeypatch, root: Path, demo: bool = False) -> AppTest:
    monkeypatch.setenv(R.RUNS_ENV, str(root))
    if demo:
        monkeypatch.setenv(L.DEMO_ENV, "1")
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


# --- compare runs (fake run folders: no training) ---------------------------------------------------------
def run_picker(at: AppTest):
    return next(s for s in at.selectbox if s.label == "Watch run")


def snap_slider(at: AppTest):
    return next(s for s in at.select_slider if s.label == "snapshot step")


def fake_run(
    root: Path,
    name: str,
    *,
    age: float,
    state: str = "finished",
    steps=(50, 100, 150, 200),
    evals=(100, 200),
    tail: str = "",
    pid: int = 0,
) -> Path:
    """A run folder as the trainer leaves it: metrics.jsonl (log and evaluation lines), status.json,
    config.json; ``age`` seconds old (the runs list is newest first); ``tail`` is appended raw."""
    run = root / name
    run.mkdir(parents=True)
    lines = [
        {
            "step": s,
            "epoch": 0,
            "loss": round(9 - s / 50, 3),
            "lr": 1e-4 * s / 50,
            "grad_norm": 1.0,
            "tokens_per_s": 3000.0,
            "tokens_seen": 1300 * s,
            "time_s": 0.5 * s,
        }
        for s in steps
    ]
    lines += [
        {
            "step": s,
            "valid_loss": round(8 - s / 50, 3),
            "valid_bleu": s / 100,
            "valid_chrf": s / 10,
            "time_s": 0.5 * s + 2,
        }
        for s in evals
    ]
    lines.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)
    (run / "status.json").write_text(
        json.dumps({"state": state, "pid": pid, "step": max(steps, default=0), "max_steps": 200})
    )
    (run / "config.json").write_text(
        json.dumps({"d_model": 32, "n_heads": 2, "n_encoder_layers": 1, "pos_encoding": "sinusoidal"})
    )
    then = time.time() - age
    os.utime(run, (then, then))
    return run


def compare_charts(at: AppTest) -> dict[str, dict]:
    """The compare section's charts: metric → Plotly spec."""
    out = {}
    for chart in at.get("plotly_chart"):
        key = chart.proto.id.rsplit("-", 1)[-1]
        if key.startswith("tn_chart_cmp_"):
            out[key[len("tn_chart_cmp_") :]] = json.loads(chart.proto.spec)
    return out
