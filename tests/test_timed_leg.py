"""A run in a wall-clock budget (stable leg, then a cooldown sized from the measured speed), its export as float16
shards and run.tar.gz, and the join that rebuilds it; plus the trainer's --tokenizer."""

from __future__ import annotations

import json
import tarfile

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import TINY, run_main

from model.checkpoint import load_checkpoint
from tools import timed_leg
from trainer import train
from training.runs import has_resume_state

# One worker runs every test here, so the module's timed leg is made once, not once per worker
pytestmark = pytest.mark.xdist_group("timed-leg")


@pytest.fixture(scope="module")
def leg(tmp_path_factory):
    """One timed run of a tiny model on the Ding pairs, probed first (two variants, a fraction of a second each:
    the probe's choice and report are what is checked, not its numbers), then 6 s of budget, at least half of it
    left to train and half of that cooling down, exported. Every test here reads this one run: each leg is a
    trainer process that starts up again, which costs more than the seconds it trains."""
    root = tmp_path_factory.mktemp("timed")
    i = TINY.index("--threads")
    # a window logged every step: the first leg's speed needs two windows, and on a loaded machine its 1.8 s gave
    # four steps, one window at TINY's every third
    args = [
        *TINY[:i],
        *TINY[i + 2 :],
        *("--eval-every", "40", "--log-every", "1", "--threads", "1", "--device", "cpu", "--no-snapshots"),
    ]
    rc = timed_leg.main(
        [
            "--run",
            str(root / "run"),
            "--budget-s",
            "6",
            "--cooldown-share",
            "0.5",
            "--probe",
            "--probe-variants",
            "base,fused+pad8",
            "--probe-seconds",
            "0.1",
            "--export",
            str(root / "export"),
            "--",
            *args,
        ]
    )
    assert rc == 0, (root / "run" / "train.log").read_text()
    return root


def test_the_second_leg_cools_the_learning_rate_down_to_its_last_step(leg):
    rows = [json.loads(line) for line in (leg / "run" / "metrics.jsonl").read_text().splitlines()]
    args = json.loads((leg / "run" / "train_args.json").read_text())
    state = json.loads((leg / "run" / "last" / "trainer_state.json").read_text())
    stops = [r for r in rows if r.get("event") == "stopped"]
    assert [r["reason"] for r in stops][0] == "max_minutes" and len(stops) == 2
    # the cooldown was sized to end the run: the second leg's steps are the cooldown's, to the last
    assert args["cooldown_steps"] > 0 and args["max_steps"] == stops[0]["step"] + args["cooldown_steps"]
    assert stops[0]["step"] < state["step"] <= args["max_steps"]
    lrs = [r["lr"] for r in rows if "lr" in r and r["step"] > stops[0]["step"]]
    assert lrs == sorted(lrs, reverse=True)


def test_the_export_is_float16_shards_under_the_limit_and_a_tarball_without_weights(leg, tmp_path, monkeypatch):
    monkeypatch.setattr(timed_leg, "SHARD_BYTES", 40_000)  # force several shards of the tiny model
    written = timed_leg.export(leg / "run", tmp_path / "export")
    shards = [p for p in written if p.suffix == ".safetensors"]
    assert len(shards) > 1
    original = load_file(str(leg / "run" / "last" / "model.safetensors"))
    joined = {}
    for shard in shards:
        tensors = load_file(str(shard))
        assert sum(t.numel() * t.element_size() for t in tensors.values()) <= 40_000 or len(tensors) == 1
        joined.update(tensors)
    assert joined.keys() == original.keys()
    assert all(joined[k].dtype == torch.float16 and torch.equal(joined[k], original[k].half()) for k in original)
    with tarfile.open(tmp_path / "export" / "run.tar.gz") as tar:
        names = tar.getnames()
    assert "run/metrics.jsonl" in names and "run/last/trainer_state.json" in names
    assert not [n for n in names if n.endswith(".safetensors")]


def test_join_rebuilds_a_loadable_run_that_does_not_pretend_to_be_resumable(leg, tmp_path):
    timed_leg.join(leg / "export", tmp_path / "back")
    ckpt = load_checkpoint(tmp_path / "back" / "last")
    assert next(ckpt.model.parameters()).dtype == torch.float32  # loaded for use, from float16 on disk
    assert (tmp_path / "back" / "metrics.jsonl").is_file()
    assert not has_resume_state(tmp_path / "back")  # no optimizer moments came back
    with pytest.raises(SystemExit, match="exists already"):
        timed_leg.join(leg / "export", tmp_path / "back")


def test_speed_is_read_from_the_last_logged_windows(tmp_path):
    rows = [{"step": s, "loss": 1.0, "time_s": s / 4} for s in range(10, 110, 10)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert timed_leg.steps_per_second(tmp_path) == pytest.approx(4.0)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(SystemExit, match="too few steps"):
        timed_leg.steps_per_second(tmp_path)


def test_a_new_run_can_reuse_a_tokenizer_and_says_so_when_it_cannot(leg, tmp_path):
    given = leg / "run" / "last" / "tokenizer.json"
    rc, _, err = run_main(
        train.main,
        ["--out", tmp_path / "a", "--max-steps", "1", "--tokenizer", given.parent, *TINY, "--vocab-size", "300"],
    )
    assert rc == 0, err
    assert (tmp_path / "a" / "last" / "tokenizer.json").read_text() == given.read_text()  # not a new 300-piece BPE
    assert json.loads((tmp_path / "a" / "config.json").read_text())["vocab_size"] == 500
    rc, _, err = run_main(train.main, ["--out", tmp_path / "b", "--max-steps", "1", "--tokenizer", tmp_path, *TINY])
    assert rc == 2 and "no tokenizer.json" in err
    (tmp_path / "bad.json").write_text("{not json")
    rc, _, err = run_main(
        train.main, ["--out", tmp_path / "c", "--max-steps", "1", "--tokenizer", tmp_path / "bad.json", *TINY]
    )
    assert rc == 2 and "not a valid tokenizer" in err
    rc, _, err = run_main(
        train.main,
        ["--out", tmp_path / "d", "--max-steps", "1", "--tokenizer", given, "--init-from", leg / "run" / "last", *TINY],
    )
    assert rc == 2 and "--init-from keeps" in err


def test_the_start_up_the_second_leg_pays_again_is_read_from_the_first_window(tmp_path):
    rows = [{"step": s, "loss": 1.0, "time_s": 5 + s / 4} for s in range(10, 110, 10)]  # 5 s lost, then 4 steps/s
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert timed_leg.start_up_seconds(tmp_path, 4.0) == pytest.approx(5.0)
    (tmp_path / "metrics.jsonl").write_text("")
    assert timed_leg.start_up_seconds(tmp_path, 4.0) == 0.0


def test_join_makes_the_folder_it_writes_into(leg, tmp_path):
    """A fresh clone has no runs/: the join creates the parents of --into rather than failing."""
    timed_leg.join(leg / "export", tmp_path / "runs" / "deeper" / "back")
    assert (tmp_path / "runs" / "deeper" / "back" / "last" / "model.safetensors").is_file()


def test_join_refuses_a_folder_that_is_no_export(tmp_path):
    with pytest.raises(SystemExit, match="no run.tar.gz"):
        timed_leg.join(tmp_path, tmp_path / "runs" / "back")


def test_a_probed_leg_trains_with_the_fastest_variant_and_brings_the_report_back(leg):
    report = json.loads((leg / "export" / "probe.json").read_text())
    assert [r["variant"] for r in report["rows"]] == ["base", "fused+pad8"]
    assert all(r["seconds"] < 3 for r in report["rows"])  # --probe-seconds, not the default 3 s a variant
    assert "by self CPU time" in (leg / "export" / "profile.txt").read_text()
    trained = json.loads((leg / "run" / "train_args.json").read_text())
    fused = report["fastest"] == "fused+pad8"
    assert (trained["fused_optimizer"], trained["pad_multiple"]) == ((True, 8) if fused else (False, 1))
    assert "probe: training with " + report["fastest"] in (leg / "run" / "train.log").read_text()
