"""Run-folder records: status.json, log-spaced snapshots and probes.jsonl from a real tiny training run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import TINY

from model.checkpoint import load_checkpoint
from training.checkpoints import PROBE_SENTENCES
from training.runs import read_status, snapshot_steps, write_status

# One worker runs this module and test_training_page.py, so conftest's finished run is made once, not per worker
pytestmark = pytest.mark.xdist_group("finished-run")

ROOT = Path(__file__).resolve().parent.parent


def test_snapshot_steps_are_log_spaced_and_end_at_max():
    assert snapshot_steps(1000) == [0, 10, 30, 100, 300, 1000]
    assert snapshot_steps(12) == [0, 10, 12]
    assert snapshot_steps(5) == [0, 5]
    assert snapshot_steps(100_000)[-3:] == [10_000, 30_000, 100_000]


def test_write_status_merges_and_read_status_tolerates_garbage(tmp_path):
    write_status(tmp_path, state="running", step=1)
    status = write_status(tmp_path, step=5)
    assert status["state"] == "running" and status["step"] == 5 and status["pid"] == os.getpid()
    assert read_status(tmp_path)["step"] == 5
    (tmp_path / "status.json").write_text("{half")
    assert read_status(tmp_path) is None
    assert read_status(tmp_path / "missing") is None


def run_train(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.train", "--out", str(out), *TINY, *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_a_finished_run_has_status_snapshots_and_probes(finished):
    """The Training page's tests' tiny run (conftest's ``finished``: 20 steps, one layer of two heads), which the
    worker has made or makes once for them all: a trainer process of its own here cost seconds more."""
    _, run = finished
    status = read_status(run)
    assert status["state"] == "finished" and status["exit_code"] == 0 and status["step"] == 20
    for step in snapshot_steps(20):
        assert load_checkpoint(run / "checkpoints" / f"step-{step}").card["step"] == step
    records = [json.loads(line) for line in (run / "probes.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == snapshot_steps(20)
    probe = records[-1]["probes"][0]
    assert probe["source"] == PROBE_SENTENCES[0]
    cross = probe["attention"]["cross"]  # [layers][heads][tgt][src]
    assert len(cross) == 1 and len(cross[0]) == 2 and len(cross[0][0][0]) == len(probe["src_tokens"])
    assert all(abs(sum(row) - 1) < 1e-2 for row in cross[0][0])


def test_sigterm_stops_gracefully_with_a_loadable_checkpoint(tmp_path):
    proc = run_train(tmp_path / "run", "--max-steps", "100000", "--no-snapshots")
    deadline = time.time() + 180
    while time.time() < deadline:
        status = read_status(tmp_path / "run")
        if status and status.get("step", 0) >= 3:
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the run did not get going")
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, output
    status = read_status(tmp_path / "run")
    assert status["state"] == "stopped" and status["reason"] == "SIGTERM"
    assert load_checkpoint(tmp_path / "run" / "last").config.d_model == 32


def test_a_bad_configuration_is_recorded_as_failed(tmp_path):
    (tmp_path / "run").mkdir()
    proc = run_train(tmp_path / "run", "--max-steps", "3", "--d-model", "30", "--n-heads", "4")
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "divisible" in output
    status = read_status(tmp_path / "run")
    assert status["state"] == "failed" and "divisible" in status["error"]


def test_a_hard_killed_run_can_be_resumed_from_its_last_evaluation(tmp_path):
    proc = run_train(tmp_path / "run", "--max-steps", "100000", "--no-snapshots")
    deadline = time.time() + 180
    while time.time() < deadline and not (tmp_path / "run" / "last" / "trainer_state.json").is_file():
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    first = read_status(tmp_path / "run")
    state = json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())
    assert state["step"] >= 6
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.train",
            "--out",
            str(tmp_path / "run"),
            "--resume",
            "--max-steps",
            str(state["step"] + 3),
            "--no-progress",
            "--threads",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    status = read_status(tmp_path / "run")
    assert status["step"] == state["step"] + 3
    # One run in two legs: the first start is kept (a resume used to overwrite it, so a resumed 2-minute run read
    # "2.0 of 2 minutes" after four); this leg's start, its number and the earlier legs' training time beside it.
    assert first["leg"] == 1 and first["leg_started"] == first["started"] and first["earlier_seconds"] == 0
    assert status["started"] == first["started"] and status["leg"] == 2
    assert status["leg_started"] > first["leg_started"]
    assert status["earlier_seconds"] == pytest.approx(state["train_seconds"], abs=0.1) and state["train_seconds"] > 0
