"""What the training tests share: the tiny run's command-line options and calling a CLI's ``main`` in-process."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

TINY = [
    "--limit-train",
    "200",
    "--eval-every",
    "6",
    "--eval-sentences",
    "10",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--layers",
    "1",
    "--d-ff",
    "64",
    "--vocab-size",
    "500",
    "--warmup",
    "5",
    "--log-every",
    "3",
    "--no-progress",
    "--threads",
    "1",
]


def run_main(fn, argv) -> tuple[int, str, str]:
    """``fn(argv)`` with stdout/stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = fn([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def read_records(folder: Path) -> list[dict]:
    """Every line of a run folder's ``metrics.jsonl``."""
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
