"""The Training page's form and progress line: ``launching/form.py`` (validation, the CLI it builds, presets) and
``app_pages.training.run_view.progress``; the demo's refusal and the runs root. No trainer is started."""

from __future__ import annotations

import inspect
import json
import os
import sys
from datetime import datetime, timedelta, timezone

import pytest
from training_page_helpers import START, T0, TINY, fake_run, page

from app_pages.training.run_view import progress
from launching import form as TF
from launching import launch as L
from trainer.options import build_parser
from training import runs as R
from training.config import FIELDS, value_type

pytestmark = pytest.mark.usefixtures("training_page_env")


# --- the form --------------------------------------------------------------------------------------------
def test_validate_form_errors():
    assert TF.validate_form(TF.preset_form("2-minute CPU demo")) == []
    for name in TF.PRESETS:  # the real-pairs preset needs the prepared corpora, which a fresh clone lacks
        assert all("not prepared yet" in e for e in TF.validate_form(TF.preset_form(name))), name
    assert any("divisible" in e for e in TF.validate_form({"d_model": 30, "n_heads": 4}))
    assert any("max_steps" in e for e in TF.validate_form({"max_steps": 0}))
    assert any("max_minutes" in e for e in TF.validate_form({"max_minutes": -1}))
    assert any("dropout" in e for e in TF.validate_form({"dropout": 1.5}))
    assert any("positional" in e for e in TF.validate_form({"pos_encoding": "wavelet"}))
    assert any("RoPE" in e for e in TF.validate_form({"pos_encoding": "rope", "d_model": 36, "n_heads": 4}))
    assert any("upload" in e for e in TF.validate_form({"data": "tsv"}))


def test_build_command_is_the_cli():
    form = {**TF.preset_form("2-minute CPU demo"), "norm_first": True, "data": "sentences+phrases"}
    cmd = TF.build_command(form, "runs/x")
    assert cmd == [
        sys.executable,
        "-m",
        "trainer.train",
        "--out",
        "runs/x",
        "--phrases-per-epoch",
        "2000",
        "--limit-train",
        "3000",
        "--vocab-size",
        "2000",
        "--arch",
        "encoder-decoder",
        "--d-model",
        "64",
        "--n-heads",
        "2",
        "--layers",
        "2",
        "--d-ff",
        "256",
        "--dropout",
        "0.1",
        "--pos-encoding",
        "sinusoidal",
        "--norm-first",
        "--peak-lr",
        "0.001",
        "--warmup",
        "200",
        "--label-smoothing",
        "0.1",
        "--batch-tokens",
        "1500",
        "--max-steps",
        "100000",
        "--max-minutes",
        "2.0",
        "--seed",
        "1",
        "--device",
        "auto",
        "--log-every",
        "10",
        "--eval-every",
        "100",
        "--eval-sentences",
        "50",
        "--no-progress",
    ]  # TrainConfig's order: the always-shown recipe plus what differs from a default
    args = build_parser().parse_args(cmd[3:])  # the trainer accepts it
    assert args.d_model == 64 and args.norm_first and args.max_minutes == 2.0
    tsv = TF.build_command({**form, "data": "tsv", "train_tsv": "/r/train.tsv"}, "r")
    assert tsv[tsv.index("--train-tsv") + 1] == "/r/train.tsv" and "--phrases-per-epoch" not in tsv


def test_decoder_only_form(tmp_path):
    """The architecture knob: validated, passed as ``--arch``, accepted by the trainer; presets stay translators."""
    assert all(TF.preset_form(p)["arch"] == "encoder-decoder" for p in ("2-minute CPU demo", "small", "base-like"))
    lm = TF.preset_form("2-minute CPU demo, language model")
    assert lm["arch"] == "decoder-only" and TF.validate_form(lm) == []
    for data in TF.DATA_SOURCES:  # every data choice makes sense for a language model too (both sides as texts)
        form = {
            **lm,
            "data": data,
            "train_tsv": "/r/train.tsv" if data == "tsv" else None,
            "mix": "ding=1" if data == "mixture" else None,
        }  # the shipped Ding pairs need no preparing
        assert TF.validate_form(form) == [], data
        cmd = TF.build_command(form, "runs/lm")
        assert cmd[cmd.index("--arch") + 1] == "decoder-only"
        args = build_parser().parse_args(cmd[3:])
        assert args.arch == "decoder-only" and args.layers == 4
        assert bool(args.words_per_epoch) == ("words" in data) and (args.train_tsv is not None) == (data == "tsv")
        assert (args.corpus == "brown") == (data == "brown")
    assert lm["data"] == "brown"  # the language-model preset reads English text
    translator = {**TF.preset_form("2-minute CPU demo"), "data": "brown"}
    assert any("Brown corpus is English only" in e for e in TF.validate_form(translator))
    assert any("architecture" in e for e in TF.validate_form({"arch": "encoder-only"}))
    assert any("divisible" in e for e in TF.validate_form({**lm, "d_model": 30, "n_heads": 4}))
    assert L.new_run_name(lm, tmp_path).endswith("-d64h2l4-lm")


def _other_value(name: str, field):
    """A value of option ``name`` other than its default, of its type."""
    if field.metadata.get("choices"):
        return next(c for c in field.metadata["choices"] if c != field.default)
    special = {
        "pos_encoding": "rope",
        "device": "cpu",
        "data_dir": "/data",
        "valid_tsv": "/v.tsv",
        "init_from": "checkpoints/en-de",
        "tokenizer": "checkpoints/en-de/tokenizer.json",
    }
    if name in special:
        return special[name]
    kind = value_type(name)
    if kind is bool:
        return not field.default
    if kind is int:
        return (field.default or 0) + 1
    return round((field.default or 0.0) + 0.25, 4)


def test_every_trainer_option_can_be_set_from_the_form():
    """The form and the trainer's parser come from one TrainConfig: whatever a form (or a preset file) sets reaches
    the trainer as it was set (attention dropout could not be set from the form once the two had drifted)."""
    parser = build_parser()
    base = TF.preset_form("base-like")
    for name, field in FIELDS.items():
        if name in TF.NOT_IN_FORM or name in ("corpus", "train_tsv", "mix", "phrases_per_epoch", "words_per_epoch"):
            continue  # the data source sets these (test_decoder_only_form)
        value = _other_value(name, field)
        args = parser.parse_args(TF.build_command({**base, name: value}, "runs/x")[3:])
        assert getattr(args, name) == value, name
    assert set(TF.form_defaults()) == set(FIELDS) - set(TF.NOT_IN_FORM) | {"data"}


def test_presets_are_data_files_of_known_options(tmp_path):
    assert list(TF.PRESETS)[0] == "2-minute CPU demo" and len(TF.PRESETS) == len(list(TF.PRESETS_DIR.glob("*.json")))
    (tmp_path / "1-typo.json").write_text(json.dumps({"name": "typo", "values": {"d_modell": 64}}))
    with pytest.raises(ValueError, match="d_modell"):
        TF.load_presets(tmp_path)


def test_old_train_args_are_normalised_when_read(tmp_path):
    """A run written before an option existed reads back with that option at its default (no guessing later)."""
    (tmp_path / "train_args.json").write_text(json.dumps({"out": "runs/old", "max_steps": 50, "d_model": 64}))
    saved = R.read_train_args(tmp_path)
    assert saved["max_steps"] == 50 and saved["d_model"] == 64
    assert saved["dict_share"] == 0.0 and saved["corpus"] == "ding" and saved["select"] == "auto"
    assert R.read_train_args(tmp_path / "missing") == {}


# --- the progress line -------------------------------------------------------------------------------------


def test_progress_shows_the_limit_that_ends_the_run_first():
    """A 2-minute run with a 100,000-step limit read "step 90 of 100000"; it shows its minutes."""
    status = {"step": 90, "max_steps": 100_000, "max_minutes": 2.0, "started": START}
    fraction, text = progress(status, now=T0 + 72)
    assert text == "1.2 of 2 minutes · step 90" and fraction == pytest.approx(0.6)
    assert progress({**status, "max_minutes": 0.0}, now=T0 + 72) == (pytest.approx(0.0009), "step 90 of 100000")
    fast = {**status, "step": 9000, "max_steps": 10_000}  # 90% of the steps in 60% of the time: steps bind
    assert progress(fast, now=T0 + 72)[1] == "step 9000 of 10000"
    older = {k: v for k, v in status.items() if k != "max_minutes"}  # status.json of an older trainer
    assert progress(older, max_minutes=2.0, now=T0 + 72)[1] == "1.2 of 2 minutes · step 90"
    ended = {**status, "updated": "2026-01-01T00:02:01+00:00"}  # an ended run: its own end, not now
    assert progress(ended, now=T0 + 3600, live=False) == (1.0, "2.0 of 2 minutes · step 90")
    assert progress({"step": 5}) is None


def test_the_page_shows_a_timed_run_by_its_minutes(tmp_path, monkeypatch):
    run = fake_run(tmp_path, "timed", age=10, state="running", pid=os.getpid(), steps=(50, 90))
    status = json.loads((run / "status.json").read_text())
    now = datetime.now(timezone.utc)
    (run / "status.json").write_text(
        json.dumps(
            {**status, "max_steps": 100_000, "max_minutes": 2.0, "started": (now - timedelta(seconds=30)).isoformat()}
        )
    )
    at = page(monkeypatch, tmp_path)
    header = " ".join(m.value for m in at.markdown)
    assert "of 2 minutes · step 90" in header and "of 100000" not in header


def test_stop_is_enabled_once_a_starting_run_runs(tmp_path, monkeypatch):
    """A run launched from the page was "starting" when the page was drawn; the live view (a fragment)
    then saw it running, but the Stop button and the runs table, drawn outside the fragment, kept the old state
    until a reload. Here the trainer writes "running" just as the live view looks: the page must redraw."""
    fake_run(tmp_path, "launched", age=10, state="running", pid=os.getpid())
    seen = {"live view": False}

    def run_state(run_dir):  # "starting" until the live view (show_run) has looked once, then "running"
        if any(frame.function == "show_run" for frame in inspect.stack()):
            seen["live view"] = True
        return "running" if seen["live view"] else "starting"

    monkeypatch.setattr(L, "run_state", run_state)
    at = page(monkeypatch, tmp_path)
    assert not at.exception
    assert {b.label: b.disabled for b in at.button}["Stop"] is False
    assert at.table[0].value.set_index("name")["state"]["launched"] == "running"


def test_demo_refuses_launch(tmp_path, monkeypatch):
    monkeypatch.setenv(L.DEMO_ENV, "1")
    with pytest.raises(L.LaunchError, match="demo"):
        L.launch(TINY, tmp_path)
    assert not any(tmp_path.iterdir())


def test_runs_root_env(tmp_path, monkeypatch):
    monkeypatch.setenv(R.RUNS_ENV, str(tmp_path))
    assert R.runs_root() == tmp_path
    monkeypatch.delenv(R.RUNS_ENV)
    assert R.runs_root() == R.RUNS_ROOT
