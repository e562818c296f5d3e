"""Resuming a training run: exact ``--resume``, run folders written by earlier trainers, the one-trainer lock, the
limits and threads a resume keeps, a resumed copy cooling down (tiny runs, in-process)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import TINY, read_records, run_main

from trainer import train
from trainer.best import recipe_extra
from trainer.options import build_parser, given_options
from training.config import TrainConfig
from training.schedule import cooldown_factor, factor_for_peak, noam_lr
from training.state import TrainerState

# One worker runs this module and test_train_cli.py, so conftest's cli_runs is made once, not once per worker
pytestmark = pytest.mark.xdist_group("cli-runs")


def test_resume_is_exact(cli_runs):
    for key in ("first_half", "second_half"):
        rc, _, err = cli_runs[key]
        assert rc == 0, err
    assert cli_runs["half_state"]["step"] == 6
    straight, resumed = cli_runs["root"] / "straight", cli_runs["root"] / "resumed"
    a = load_file(str(straight / "last" / "model.safetensors"))
    b = load_file(str(resumed / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # Optimizer moments and the RNG state match too, and so does the trainer's position in the data.
    oa = load_file(str(straight / "last" / "optimizer.safetensors"))
    ob = load_file(str(resumed / "last" / "optimizer.safetensors"))
    assert oa.keys() == ob.keys() and all(torch.equal(oa[k], ob[k]) for k in oa)
    sa = json.loads((straight / "last" / "trainer_state.json").read_text())
    sb = json.loads((resumed / "last" / "trainer_state.json").read_text())
    for k in ("step", "epoch", "batch", "tokens_seen", "best_valid_loss", "best_step"):
        assert sa[k] == sb[k], k
    # The resumed run continued at step 7: its metrics hold one stop at 6, then the steps up to 12.
    records = read_records(resumed)
    assert [r["step"] for r in records if "loss" in r] == [3, 6, 9, 12]
    assert [r for r in records if r.get("event") == "stopped"] == [
        {"step": 6, "event": "stopped", "reason": "max_steps"},
        {"step": 12, "event": "stopped", "reason": "max_steps"},
    ]
    assert [r["valid_loss"] for r in records if "valid_loss" in r] == [
        r["valid_loss"] for r in read_records(straight) if "valid_loss" in r
    ]


# What the trainer wrote before its options became a TrainConfig and its state a TrainerState (2e4cffe and earlier):
# trainer_state.json without world_size (a single process), and an older one from before --select.
STATE_KEYS_BEFORE = (
    "step",
    "epoch",
    "batch",
    "tokens_seen",
    "train_seconds",
    "best_valid_loss",
    "best_step",
    "best_metrics",
    "best_score",
    "evals_since_best",
    "last_eval_step",
)
STATE_KEYS_BEFORE_SELECT = STATE_KEYS_BEFORE[:8]
#: Options a train_args.json written before them lacks (all at their defaults in TINY).
NEWER_OPTIONS = (
    "cooldown_steps",
    "tokenizer",
    "lr_step_offset",
    "rewarmup",
    "select",
    "patience",
    "keep_last",
    "mix",
    "dict_share",
    "bpe_dropout",
    "vocab_from",
    "peak_tflops",
    "precision",
)


@pytest.mark.parametrize("state_keys", [STATE_KEYS_BEFORE, STATE_KEYS_BEFORE_SELECT], ids=["today", "before-select"])
def test_a_run_folder_written_by_the_earlier_trainer_resumes_exactly(cli_runs, tmp_path, state_keys):
    """A run folder in the files the trainer wrote before (``train_args.json`` without newer options, plus a key this
    trainer does not know; ``trainer_state.json`` without ``world_size`` or the ``--select`` fields) resumes, and
    ends where the run trained straight through ends, bit for bit. The unknown key is named on stderr, ignored and
    kept in the file (the trainer that wrote it may resume the run again)."""
    folder = tmp_path / "old"
    rc, _, err = run_main(train.main, ["--out", folder, "--max-steps", "6", *TINY])
    assert rc == 0, err
    saved = json.loads((folder / "train_args.json").read_text())
    old_args = {k: v for k, v in saved.items() if k not in NEWER_OPTIONS}
    (folder / "train_args.json").write_text(json.dumps({**old_args, "a_future_option": 3}))
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    (folder / "last" / "trainer_state.json").write_text(json.dumps({k: state[k] for k in state_keys}))
    rc, out, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "12"])
    assert rc == 0, err
    assert "a_future_option" in err and "warning" in err and "resuming" in out
    rewritten = json.loads((folder / "train_args.json").read_text())
    assert rewritten["a_future_option"] == 3 and rewritten["cooldown_steps"] == 0 and rewritten["max_steps"] == 12
    straight = cli_runs["root"] / "straight" / "last"
    for name in ("model.safetensors", "optimizer.safetensors"):
        a, b = load_file(str(straight / name)), load_file(str(folder / "last" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    assert state["step"] == 12 and state["world_size"] == 1 and state["last_eval_step"] == 12


def test_train_config_reads_what_a_run_saved():
    """``TrainConfig.from_saved``: a missing option takes its default, an unknown key is returned (for the caller to
    name), ``init_card`` (no option) comes back; ``to_saved`` writes ``init_card`` only for a warm start."""
    config, ignored = TrainConfig.from_saved({"out": "runs/old", "max_steps": 50, "gone": 1, "init_card": {"step": 3}})
    assert (config.out, config.max_steps, config.dict_share, config.select) == ("runs/old", 50, 0.0, "auto")
    assert ignored == ["gone"] and config.init_card == {"step": 3}
    assert TrainConfig.from_saved(config.to_saved()) == (config, [])
    assert "init_card" not in TrainConfig(out="x").to_saved() and "init_card" not in build_parser().parse_args(
        ["--out", "x"]
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_steps = 3  # a changed value is a new config (dataclasses.replace)


def test_the_trainer_state_counts_steps_and_keeps_the_best_evaluation():
    state = TrainerState.from_dict(
        {
            "step": 4,
            "epoch": 1,
            "batch": 2,
            "tokens_seen": 10,
            "best_valid_loss": 2.0,
            "best_step": 2,
            "best_metrics": {},
            "from_a_newer_trainer": 1,
        }
    )
    assert state.world_size == 1 and state.best_score is None and state.evals_since_best == 0
    state.advance(2, 5)
    assert (state.step, state.batch, state.tokens_seen) == (5, 3, 15)
    state.next_epoch()
    assert (state.epoch, state.batch) == (2, 0)
    # a state from before --select is judged by its best valid loss
    assert not state.record_evaluation("loss", 2.5, 2.5, {}) and state.evals_since_best == 1
    assert state.record_evaluation("loss", 1.5, 1.54321, {}) and (state.best_step, state.best_valid_loss) == (5, 1.5432)
    assert state.evals_since_best == 0 and state.last_eval_step == 5
    chrf = TrainerState()
    assert chrf.record_evaluation("chrf", 30.0, 1.6, {"bleu": 9.0, "chrf": 30.0})
    assert not chrf.record_evaluation("chrf", 29.0, 1.2, {"bleu": 9.5, "chrf": 29.0})  # higher chrF is better
    assert chrf.best_metrics == {"bleu": 9.0, "chrf": 30.0} and chrf.evals_since_best == 1
    assert TrainerState.from_dict(chrf.to_dict()) == chrf


def test_a_second_trainer_in_a_live_runs_folder_is_refused_and_touches_nothing(cli_runs, tmp_path):
    """``--resume`` (or a fresh run) into a folder whose status names another live trainer would interleave two
    processes' checkpoints and metrics: it is refused with a clear message, and status.json stays the live one's."""
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "busy"
    shutil.copytree(cli_runs["root"] / "resumed", folder)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        status = {"state": "running", "pid": live.pid, "step": 6}
        (folder / "status.json").write_text(json.dumps(status))
        before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        for argv in (["--out", folder, "--resume"], ["--out", folder, *TINY]):
            rc, _, err = run_main(train.main, argv)
            assert rc == 2 and f"process {live.pid}" in err and "stop it first" in err
        assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    finally:
        live.kill()
        live.wait()
    # A folder copied while its trainer ran names that trainer too; the message says it is a copy.
    original = tmp_path / "original"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--out", str(original)])
    try:
        (folder / "status.json").write_text(json.dumps({**status, "pid": live.pid}))
        rc, _, err = run_main(train.main, ["--out", folder, "--resume"])
        assert rc == 2 and f"copy of {original}" in err and f"process {live.pid}" in err
    finally:
        live.kill()
        live.wait()
    rc, _, err = run_main(train.main, ["--out", folder, "--resume"])  # the trainer is gone: resuming works
    assert rc == 0, err


def test_a_bare_resume_trains_with_the_runs_saved_threads(cli_runs, tmp_path, monkeypatch):
    """A run started with ``--threads 1`` and resumed with a bare ``--resume`` keeps one thread: the thread count
    was set before the saved options were read, so a resumed one-thread run took every core and, next to another
    run, slowed to a tenth of its speed (OpenMP threads fighting for the cores)."""
    import shutil

    folder = tmp_path / "threads"
    shutil.copytree(cli_runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "threads": 1}))
    monkeypatch.setattr("trainer.loop.default_threads", lambda world_size=1: 2)  # what an unset --threads takes
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        rc, _, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "13"])
        assert rc == 0, err
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_given_options_names_only_what_was_typed():
    parser = build_parser()
    assert given_options(parser, ["--out", "r", "--resume"]) == {"out", "resume"}
    assert given_options(parser, ["--out", "r", "--max-steps", "5", "--test-at-end"]) == {
        "out",
        "max_steps",
        "test_at_end",
    }


def test_resume_without_limits_keeps_the_saved_ones(cli_runs, tmp_path):
    """A bare ``--resume`` keeps the run's own --max-steps (12, not the CLI default) and its settings; typed
    options still override."""
    import shutil

    folder = tmp_path / "again"
    shutil.copytree(cli_runs["root"] / "resumed", folder)
    rc, out, err = run_main(train.main, ["--out", folder, "--resume"])
    assert rc == 0, err
    assert f"resuming {folder} at step 12: this leg stops at step 12 (--max-steps 12 kept from the saved run" in out
    status = json.loads((folder / "status.json").read_text())
    assert status["max_steps"] == 12 and status["state"] == "finished"
    saved = json.loads((folder / "train_args.json").read_text())
    assert "given" not in saved and saved["max_steps"] == 12
    rc, _, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "14", "--no-progress"])
    assert rc == 0, err
    assert json.loads((folder / "last" / "trainer_state.json").read_text())["step"] == 14


def test_a_resume_names_the_time_limit_it_keeps(cli_runs, tmp_path):
    """A copy resumed with a larger ``--max-steps`` keeps the earlier leg's ``--max-minutes``: the first line says
    so, instead of the leg stopping on the clock long before its steps without a word."""
    import shutil

    folder = tmp_path / "clock"
    shutil.copytree(cli_runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "max_minutes": 32.0}))
    rc, out, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "13"])
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first == (
        f"resuming {folder} at step 12: this leg stops at step 13 or after 32 minutes, whichever comes "
        "first (--max-minutes 32 kept from the saved run; type an option to change it)"
    )
    rc, out, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "14", "--max-minutes", "90"])
    assert rc == 0, err
    assert out.splitlines()[0] == (
        f"resuming {folder} at step 13: this leg stops at step 14 or after 90 minutes, whichever comes first"
    )


def test_a_resumed_copy_cools_down_to_its_max_steps(cli_runs, tmp_path):
    """``--resume --max-steps 15 --cooldown-steps 3`` on a copy of a 12-step run: steps 13–15 take the schedule's
    rate times 3/3, 2/3, 1/3 (logged at every step here), and the option is saved for a bare resume."""
    import shutil

    folder = tmp_path / "cool"
    shutil.copytree(cli_runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "log_every": 1}))
    rc, _, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "15", "--cooldown-steps", "3"])
    assert rc == 0, err
    factor = factor_for_peak(1e-3, 32, 5)
    lrs = {r["step"]: r["lr"] for r in read_records(folder) if "lr" in r and r["step"] > 12}
    assert lrs == {s: pytest.approx(noam_lr(s, 32, 5, factor) * (16 - s) / 3, rel=1e-9) for s in (13, 14, 15)}
    saved = json.loads((folder / "train_args.json").read_text())
    assert saved["cooldown_steps"] == 3
    assert recipe_extra(TrainConfig.from_saved(saved)[0])["cooldown_steps"] == 3  # a card says it was cooled


def test_cooldown_factor_falls_linearly_to_the_last_step():
    assert [cooldown_factor(s, 10, 4) for s in range(5, 11)] == [1.0, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert cooldown_factor(3, 10, 0) == 1.0 and cooldown_factor(11, 10, 4) == 0.0


def test_train_errors_exit_2(tmp_path):
    rc, _, err = run_main(train.main, ["--out", tmp_path / "empty", "--resume", "--no-progress"])
    assert rc == 2 and "nothing to resume" in err
    rc, _, err = run_main(train.main, ["--out", tmp_path / "x", "--train-tsv", tmp_path / "missing.tsv"])
    assert rc == 2 and "No such data file" in err
    rc, _, err = run_main(train.main, ["--out", tmp_path / "y", *TINY, "--d-model", "30", "--n-heads", "4"])
    assert rc == 2 and "divisible" in err
    rc, _, err = run_main(train.main, ["--out", tmp_path / "z", *TINY, "--max-steps", "5", "--cooldown-steps", "6"])
    assert rc == 2 and "--cooldown-steps 6 is longer than --max-steps 5" in err
