"""The training CLI on a tiny model (in-process), exact --resume, the learning-rate schedule, and the translate /
evaluate CLIs on the checkpoint the tiny run produced."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import json
import math
import signal

import pytest
import torch
from safetensors.torch import load_file

from corpora.files import read_tsv
from model import translate
from model.checkpoint import load_checkpoint
from training import evaluate, train
from training.batches import encode_examples
from training.best import recipe_extra
from training.config import TrainConfig, build_parser, given_options
from training.loop import Trainer
from training.schedule import cooldown_factor, factor_for_peak, noam_lr
from training.state import TrainerState

TINY = ["--limit-train", "200", "--eval-every", "6", "--eval-sentences", "10", "--d-model", "32", "--n-heads", "2",
        "--layers", "1", "--d-ff", "64", "--vocab-size", "500", "--warmup", "5", "--log-every", "3",
        "--no-progress", "--threads", "1"]


def run_main(fn, argv) -> tuple[int, str, str]:
    """``fn(argv)`` with stdout/stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = fn([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def test_a_finished_run_gives_back_the_signal_handlers_and_its_trainer(tmp_path):
    """Called in-process, the trainer must not leave its SIGINT/SIGTERM handlers behind: they would swallow the
    caller's Ctrl-C and keep the trainer, its model and (under DDP) its process group alive until exit."""
    def live_trainers():
        gc.collect()
        # type(), not isinstance(): isinstance reads __class__, which warns on torch's deprecated module objects
        return sum(type(o) is Trainer for o in gc.get_objects())

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    alive = live_trainers()
    rc, _, err = run_main(train.main, ["--out", tmp_path / "run", "--max-steps", "2", *TINY])
    assert rc == 0, err
    assert {s: signal.getsignal(s) for s in before} == before
    assert live_trainers() == alive


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run ``straight`` (12 steps) and ``resumed`` (6 steps, then ``--resume --max-steps 12``)."""
    root = tmp_path_factory.mktemp("runs")
    torch.manual_seed(0)
    straight = run_main(train.main, ["--out", root / "straight", "--max-steps", "12", *TINY])
    first_half = run_main(train.main, ["--out", root / "resumed", "--max-steps", "6", *TINY])
    half_state = json.loads((root / "resumed" / "last" / "trainer_state.json").read_text())
    torch.manual_seed(123)  # the resumed run must not depend on the state of the process it runs in
    second_half = run_main(train.main, ["--out", root / "resumed", "--resume", "--max-steps", "12",
                                        "--no-progress", "--threads", "1"])
    return {"root": root, "straight": straight, "first_half": first_half, "second_half": second_half,
            "half_state": half_state}


def _records(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_tiny_training_run(runs):
    rc, out, err = runs["straight"]
    assert rc == 0, err
    folder = runs["root"] / "straight"
    assert "stopped at step 12 (max_steps)" in out
    for name in ("best", "last"):
        ckpt = load_checkpoint(folder / name)
        assert ckpt.config.d_model == 32 and ckpt.config.n_heads == 2 and ckpt.config.n_encoder_layers == 1
        assert ckpt.config.vocab_size == ckpt.tokenizer.vocab_size <= 500
    for f in ("optimizer.safetensors", "trainer_state.json"):
        assert (folder / "last" / f).is_file()
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    assert state["step"] == 12 and state["best_step"] in (6, 12) and state["tokens_seen"] > 0
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["step"] == state["best_step"] and card["valid"]["sentences"] == 10
    assert card["parameters"] == load_checkpoint(folder / "best").model.num_parameters()
    assert json.loads((folder / "train_args.json").read_text())["max_steps"] == 12

    records = _records(folder)
    losses = [r for r in records if "loss" in r]
    assert [r["step"] for r in losses] == [3, 6, 9, 12]
    factor = factor_for_peak(1e-3, 32, 5)
    for r in losses:
        assert math.isfinite(r["loss"]) and r["loss"] > 0 and r["tokens_per_s"] > 0
        assert r["lr"] == pytest.approx(noam_lr(r["step"], 32, 5, factor), rel=1e-9)
    evals = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in evals] == [6, 12]
    assert all(math.isfinite(r["valid_loss"]) and 0 <= r["valid_chrf"] <= 100 for r in evals)
    assert records[-1] == {"step": 12, "event": "stopped", "reason": "max_steps"}


def test_resume_is_exact(runs):
    for key in ("first_half", "second_half"):
        rc, _, err = runs[key]
        assert rc == 0, err
    assert runs["half_state"]["step"] == 6
    straight, resumed = runs["root"] / "straight", runs["root"] / "resumed"
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
    records = _records(resumed)
    assert [r["step"] for r in records if "loss" in r] == [3, 6, 9, 12]
    assert [r for r in records if r.get("event") == "stopped"] == [
        {"step": 6, "event": "stopped", "reason": "max_steps"},
        {"step": 12, "event": "stopped", "reason": "max_steps"},
    ]
    assert [r["valid_loss"] for r in records if "valid_loss" in r] == \
        [r["valid_loss"] for r in _records(straight) if "valid_loss" in r]


# What the trainer wrote before its options became a TrainConfig and its state a TrainerState (2e4cffe and earlier):
# trainer_state.json without world_size (a single process), and an older one from before --select.
STATE_KEYS_BEFORE = ("step", "epoch", "batch", "tokens_seen", "train_seconds", "best_valid_loss", "best_step",
                     "best_metrics", "best_score", "evals_since_best", "last_eval_step")
STATE_KEYS_BEFORE_SELECT = STATE_KEYS_BEFORE[:8]
#: Options a train_args.json written before them lacks (all at their defaults in TINY).
NEWER_OPTIONS = ("cooldown_steps", "tokenizer", "lr_step_offset", "rewarmup", "select", "patience", "keep_last", "mix",
                 "dict_share", "bpe_dropout", "vocab_from", "peak_tflops", "precision")


@pytest.mark.parametrize("state_keys", [STATE_KEYS_BEFORE, STATE_KEYS_BEFORE_SELECT], ids=["today", "before-select"])
def test_a_run_folder_written_by_the_earlier_trainer_resumes_exactly(runs, tmp_path, state_keys):
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
    straight = runs["root"] / "straight" / "last"
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
        ["--out", "x"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_steps = 3  # a changed value is a new config (dataclasses.replace)


def test_the_trainer_state_counts_steps_and_keeps_the_best_evaluation():
    state = TrainerState.from_dict({"step": 4, "epoch": 1, "batch": 2, "tokens_seen": 10, "best_valid_loss": 2.0,
                                    "best_step": 2, "best_metrics": {}, "from_a_newer_trainer": 1})
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


def test_a_second_trainer_in_a_live_runs_folder_is_refused_and_touches_nothing(runs, tmp_path):
    """``--resume`` (or a fresh run) into a folder whose status names another live trainer would interleave two
    processes' checkpoints and metrics: it is refused with a clear message, and status.json stays the live one's."""
    import shutil
    import subprocess
    import sys
    folder = tmp_path / "busy"
    shutil.copytree(runs["root"] / "resumed", folder)
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


def test_a_bare_resume_trains_with_the_runs_saved_threads(runs, tmp_path, monkeypatch):
    """A run started with ``--threads 1`` and resumed with a bare ``--resume`` keeps one thread: the thread count
    was set before the saved options were read, so a resumed one-thread run took every core and, next to another
    run, slowed to a tenth of its speed (OpenMP threads fighting for the cores)."""
    import shutil
    folder = tmp_path / "threads"
    shutil.copytree(runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "threads": 1}))
    monkeypatch.setattr("training.loop.default_threads", lambda world_size=1: 2)  # what an unset --threads takes
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
        "out", "max_steps", "test_at_end"}


def test_resume_without_limits_keeps_the_saved_ones(runs, tmp_path):
    """A bare ``--resume`` keeps the run's own --max-steps (12, not the CLI default) and its settings; typed
    options still override."""
    import shutil
    folder = tmp_path / "again"
    shutil.copytree(runs["root"] / "resumed", folder)
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


def test_a_resume_names_the_time_limit_it_keeps(runs, tmp_path):
    """A copy resumed with a larger ``--max-steps`` keeps the earlier leg's ``--max-minutes``: the first line says
    so, instead of the leg stopping on the clock long before its steps without a word."""
    import shutil
    folder = tmp_path / "clock"
    shutil.copytree(runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "max_minutes": 32.0}))
    rc, out, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "13"])
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first == (f"resuming {folder} at step 12: this leg stops at step 13 or after 32 minutes, whichever comes "
                     "first (--max-minutes 32 kept from the saved run; type an option to change it)")
    rc, out, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "14", "--max-minutes", "90"])
    assert rc == 0, err
    assert out.splitlines()[0] == (f"resuming {folder} at step 13: this leg stops at step 14 or after 90 minutes, "
                                   "whichever comes first")


def test_a_resumed_copy_cools_down_to_its_max_steps(runs, tmp_path):
    """``--resume --max-steps 15 --cooldown-steps 3`` on a copy of a 12-step run: steps 13–15 take the schedule's
    rate times 3/3, 2/3, 1/3 (logged at every step here), and the option is saved for a bare resume."""
    import shutil
    folder = tmp_path / "cool"
    shutil.copytree(runs["root"] / "resumed", folder)
    saved = json.loads((folder / "train_args.json").read_text())
    (folder / "train_args.json").write_text(json.dumps({**saved, "log_every": 1}))
    rc, _, err = run_main(train.main, ["--out", folder, "--resume", "--max-steps", "15", "--cooldown-steps", "3"])
    assert rc == 0, err
    factor = factor_for_peak(1e-3, 32, 5)
    lrs = {r["step"]: r["lr"] for r in _records(folder) if "lr" in r and r["step"] > 12}
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


# --- learning-rate schedule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (32, 5), (256, 500)])
def test_noam_lr_peaks_at_warmup(d_model, warmup):
    lrs = [noam_lr(s, d_model, warmup) for s in range(1, 4 * warmup)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == warmup
    peak = noam_lr(warmup, d_model, warmup)
    assert noam_lr(warmup - 1, d_model, warmup) < peak > noam_lr(warmup + 1, d_model, warmup)
    # Paper eq. (3): linear warmup, then inverse square root.
    assert noam_lr(1, d_model, warmup) == pytest.approx(d_model**-0.5 * warmup**-1.5)
    assert noam_lr(4 * warmup, d_model, warmup) == pytest.approx(d_model**-0.5 * (4 * warmup) ** -0.5)
    assert noam_lr(0, d_model, warmup) == noam_lr(1, d_model, warmup)  # step 0 is treated as step 1


@pytest.mark.parametrize("peak", [1e-3, 2e-3, 7e-4])
def test_factor_for_peak_gives_requested_peak(peak):
    for d_model, warmup in ((256, 500), (32, 5), (512, 4000)):
        factor = factor_for_peak(peak, d_model, warmup)
        assert noam_lr(warmup, d_model, warmup, factor) == pytest.approx(peak, rel=1e-12, abs=0)
        assert max(noam_lr(s, d_model, warmup, factor) for s in range(1, 3 * warmup)) == pytest.approx(peak, rel=1e-12)


# --- translate / evaluate CLIs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def best(runs):
    assert runs["straight"][0] == 0
    return runs["root"] / "straight" / "best"


def test_translate_text(best):
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "The house is big."])
    assert rc == 0, err
    assert out.endswith("\n") and out.count("\n") == 1  # exactly one line, whatever the tiny model says


def test_translate_json(best):
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--json", "The house is big."])
    assert rc == 0, err
    result = json.loads(out)
    n_src = len(result["src_ids"])
    n_tgt = len(result["tgt_ids"])
    assert result["source"] == "The house is big." and result["src_tokens"][-1] == "<eos>"
    assert len(result["token_probs"]) == n_tgt > 0
    shapes = result["attention_shapes"]
    assert shapes["encoder"] == [1, 2, n_src, n_src]
    assert shapes["cross"] == [1, 2, n_tgt + 1, n_src]  # <bos> + generated tokens as decoder inputs
    assert shapes["decoder"] == [1, 2, n_tgt + 1, n_tgt + 1]


def test_translate_input_file(best, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("The house is big.\nGood morning.\nWhere is the station?\n", encoding="utf-8")
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--input", path])
    assert rc == 0, err
    assert len(out.splitlines()) == 3



def test_translate_input_file_with_beam_search_matches_sentence_by_sentence(best, tmp_path):
    lines = ["The house is big.", "", "Good morning.", "Where is the station?"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    beam = ["--strategy", "beam", "--beam", "3", "--alpha", "1.0"]
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--input", path, *beam])
    assert rc == 0, err
    got = out.split("\n")[:-1]
    assert len(got) == 4 and got[1] == ""
    for line, text in zip(lines, got, strict=True):
        if line:  # the batched search gives what the one-sentence search gives
            assert text == run_main(translate.main, ["--checkpoint", best, line, *beam])[1].rstrip("\n")
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "--input", path, "--strategy", "beam", "--beam", "0"])
    assert rc == 2 and "beam size" in err

def test_translate_errors(best, tmp_path):
    rc, out, err = run_main(translate.main, ["--checkpoint", tmp_path / "no-such-checkpoint", "Hello."])
    assert rc == 2 and out == ""
    assert "error:" in err and "Checkpoint folder not found" in err
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "   "])
    assert rc == 2 and "empty" in err
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "--input", tmp_path / "missing.txt"])
    assert rc == 2 and "cannot read" in err
    with pytest.raises(SystemExit) as exc:  # neither a sentence nor --input
        run_main(translate.main, ["--checkpoint", best])
    assert exc.value.code == 2


def test_evaluate_cli(best, tmp_path):
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "5"])
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["sentences"] == 5 and 0 <= result["bleu"] <= 100 and 0 <= result["chrf"] <= 100
    tsv = tmp_path / "mine.tsv"
    tsv.write_text("Good morning.\tGuten Morgen.\nThe house is big.\tDas Haus ist groß.\n", encoding="utf-8")
    rc, out, _ = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tsv, "--show", "1"])
    assert rc == 0 and out.startswith("SRC Good morning.\nREF Guten Morgen.\nOUT ")
    assert json.loads(out.strip().splitlines()[-1])["sentences"] == 2
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tsv, "--loss"])
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    ckpt = load_checkpoint(best)
    expected = evaluate.validation_loss(ckpt.model, encode_examples(ckpt.tokenizer, read_tsv(tsv), ckpt.config),
                                        4000, torch.device("cpu"), "fp32")
    assert result["loss"] == pytest.approx(expected, abs=1e-4)  # the references' loss, no label smoothing
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]), rel=1e-3)


def test_evaluate_cli_threads(best, monkeypatch):
    """--threads 1 is what an evaluation beside a training run should use; a negative count is refused by argparse."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)  # the suite's other tests keep their threads
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "2", "--threads", "1"])
    assert rc == 0, err
    assert calls == [1]
    assert json.loads(out.strip().splitlines()[-1])["sentences"] == 2
    rc, _, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "2"])
    assert rc == 0 and calls == [1]  # 0, the default, leaves torch's own choice alone
    with pytest.raises(SystemExit) as exc:
        run_main(evaluate.main, ["--checkpoint", best, "--threads", "-1"])
    assert exc.value.code == 2


def test_evaluate_cli_beam_search(best):
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "6", "--strategy", "beam", "--beam", "2",
                                            "--alpha", "1.0"])
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["strategy"] == "beam" and result["beam"] == 2 and result["alpha"] == 1.0
    assert result["sentences"] == 6 and 0 <= result["chrf"] <= 100
    scores = {}
    for strategy in (["--strategy", "greedy"], ["--strategy", "beam", "--beam", "1"]):
        rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "6", *strategy])
        assert rc == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        scores[strategy[1]] = (result["bleu"], result["chrf"])
    assert scores["greedy"] == scores["beam"]  # beam 1 is greedy
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--strategy", "beam", "--beam", "17"])
    assert rc == 2 and out == "" and "beam size" in err

def test_evaluate_errors(best, tmp_path):
    rc, out, err = run_main(evaluate.main, ["--checkpoint", tmp_path / "nope"])
    assert rc == 2 and out == "" and "Checkpoint folder not found" in err
    rc, _, err = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tmp_path / "missing.tsv"])
    assert rc == 2 and "No such data file" in err


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "none"])
def test_every_positional_encoding_trains_and_loads(tmp_path, pos):
    rc, _, err = run_main(train.main, ["--out", tmp_path / pos, "--max-steps", "3", "--pos-encoding", pos, *TINY])
    assert rc == 0, err
    ckpt = load_checkpoint(tmp_path / pos / "best")
    assert ckpt.config.pos_encoding == pos
