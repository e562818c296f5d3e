"""The Training page: ``training/form.py`` and ``training/launch.py`` (form validation, the CLI it builds, real tiny
runs started as subprocesses, the one-run lock, stop, kill -9, delete, garbage tolerance) and
``app_pages/training.py`` via AppTest.

Every run goes into a temporary runs root; nothing touches ``runs/``.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from model.checkpoint import load_checkpoint
from training import form as TF
from training import launch as L
from training import runs as R
from training.config import FIELDS, build_parser, value_type
from ui.run_view import progress
from viz.labels import KIND_SHORT
from viz.training import LEG_SCORES, PALETTE

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "app_pages" / "training.py"

TINY = {"d_model": 32, "n_heads": 2, "layers": 1, "d_ff": 64, "max_steps": 20, "max_minutes": 0.0,
        "limit_train": 200, "eval_every": 10, "eval_sentences": 5, "vocab_size": 500, "warmup": 5,
        "log_every": 5, "threads": 1, "device": "cpu", "batch_tokens": 600}
LONG = {**TINY, "max_steps": 100_000, "max_minutes": 2.0, "eval_every": 100_000}


def wait_for(pred, timeout=180.0, every=0.25):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(every)
    return False


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv(L.DEMO_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real tiny run, launched through :func:`launch.launch` and waited for."""
    root = tmp_path_factory.mktemp("runs")
    os.environ.pop(L.DEMO_ENV, None)
    run = L.launch({**TF.preset_form("2-minute CPU demo"), **TINY}, root, name="tiny")
    assert wait_for(lambda: (R.read_status(run) or {}).get("state") in ("finished", "stopped", "failed")), \
        R.log_tail(run)
    return root, run


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
    assert cmd == [sys.executable, "-m", "training.train", "--out", "runs/x", "--phrases-per-epoch", "2000",
                   "--limit-train", "3000", "--vocab-size", "2000", "--arch", "encoder-decoder", "--d-model", "64",
                   "--n-heads", "2", "--layers", "2", "--d-ff", "256", "--dropout", "0.1", "--pos-encoding",
                   "sinusoidal", "--norm-first", "--peak-lr", "0.001", "--warmup", "200", "--label-smoothing", "0.1",
                   "--batch-tokens", "1500", "--max-steps", "100000", "--max-minutes", "2.0", "--seed", "1",
                   "--device", "auto", "--log-every", "10", "--eval-every", "100", "--eval-sentences", "50",
                   "--no-progress"]  # TrainConfig's order: the always-shown recipe plus what differs from a default
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
        form = {**lm, "data": data, "train_tsv": "/r/train.tsv" if data == "tsv" else None,
                "mix": "ding=1" if data == "mixture" else None}  # the shipped Ding pairs need no preparing
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
    special = {"pos_encoding": "rope", "device": "cpu", "data_dir": "/data", "valid_tsv": "/v.tsv",
               "init_from": "checkpoints/en-de", "tokenizer": "checkpoints/en-de/tokenizer.json"}
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
START = "2026-01-01T00:00:00+00:00"
T0 = datetime.fromisoformat(START).timestamp()


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
    (run / "status.json").write_text(json.dumps({**status, "max_steps": 100_000, "max_minutes": 2.0,
                                                 "started": (now - timedelta(seconds=30)).isoformat()}))
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


# --- real runs -------------------------------------------------------------------------------------------
def test_tiny_run_finishes(finished):
    root, run = finished
    assert R.read_status(run)["state"] == "finished", R.log_tail(run)
    assert L.active_run(root) is None and not (root / L.LOCK_NAME).exists()  # lock released once it ended
    (row,) = L.list_runs(root)
    assert row["name"] == "tiny" and row["state"] == "finished" and row["step"] == 20
    assert row["loss"] is not None and row["valid_loss"] is not None and "d32" in row["model"]
    metrics = R.read_metrics(run)
    assert any("lr" in m for m in metrics) and any(m.get("event") == "stopped" for m in metrics)
    probes = R.read_probes(run)
    assert [p.step for p in probes] == [0, 10, 20]
    assert load_checkpoint(run / "best").config.d_model == 32
    assert not L.can_resume(run)  # all its steps are done


def test_half_written_and_garbage_files(finished, tmp_path):
    _, run = finished
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "status.json").write_text("{not json")
    (bad / "config.json").write_text("[1, 2]")
    good = (run / "metrics.jsonl").read_text().splitlines()
    (bad / "metrics.jsonl").write_text("\n".join(good[:3]) + '\n{"step": 9, "lo')
    (bad / "probes.jsonl").write_text('garbage\n{"step": "x"}\n')
    assert len(R.read_metrics(bad)) == 3 and R.read_probes(bad) == []
    (tmp_path / "empty").mkdir()
    rows = {r["name"]: r for r in L.list_runs(tmp_path)}
    assert rows["bad"]["state"] == "unknown" and rows["empty"]["state"] == "unknown"
    assert L.list_runs(tmp_path / "missing") == []
    assert R.read_metrics(tmp_path / "vanished") == [] and L.effective_state(None) == "unknown"
    assert L.summarize(tmp_path / "vanished")["state"] == "unknown"
    (tmp_path / L.LOCK_NAME).write_text("garbage")
    assert L.active_run(tmp_path) is None and not (tmp_path / L.LOCK_NAME).exists()
    old = time.time() - 3600
    os.utime(bad / "status.json", (old, old))
    os.utime(bad / "metrics.jsonl", (old, old))  # fresh metrics without a status could be a live older trainer
    L.delete(bad)
    assert not bad.exists()


def test_lock_delete_and_stop(tmp_path):
    run = L.launch(LONG, tmp_path, name="long")
    try:
        assert wait_for(lambda: L.effective_state(R.read_status(run)) == "running", 120), R.log_tail(run)
        assert L.active_run(tmp_path) == run
        with pytest.raises(L.LaunchError, match="still training"):
            L.launch(TINY, tmp_path, name="second")
        assert not (tmp_path / "second").exists()
        with pytest.raises(L.LaunchError, match="still training"):
            L.delete(run)
        assert L.list_runs(tmp_path)[0]["state"] == "running"
        assert L.stop(run)
        assert wait_for(lambda: (R.read_status(run) or {}).get("state") != "running", 120), R.log_tail(run)
        assert R.read_status(run)["state"] == "stopped" and R.read_status(run)["reason"] == "SIGTERM"
        assert L.effective_state(R.read_status(run)) == "stopped" and L.active_run(tmp_path) is None
        assert L.can_resume(run) and (run / "last" / "trainer_state.json").is_file()
    finally:
        L.stop(run)
    L.delete(run)
    assert not run.exists()


def test_kill_9_is_failed_and_checkpoint_loads(tmp_path):
    run = L.launch(LONG, tmp_path, name="killed")
    try:
        assert wait_for(lambda: (run / "checkpoints" / "step-10" / "config.json").is_file(), 120), R.log_tail(run)
        status = R.read_status(run)
        assert L.effective_state(status) == "running"
    finally:
        pid = (R.read_status(run) or {}).get("pid") or json.loads((tmp_path / L.LOCK_NAME).read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: L.effective_state(R.read_status(run)) == "failed", 30)
    assert R.read_status(run)["state"] == "running"  # the file still says so; the page knows better
    assert L.active_run(tmp_path) is None  # stale lock
    found = [p for p in (run / "last", run / "best", run / "checkpoints" / "step-0") if (p / "config.json").is_file()]
    assert found and load_checkpoint(found[-1]).config.d_model == 32
    L.delete(run)  # a dead run may be deleted
    assert not run.exists()


# --- the page --------------------------------------------------------------------------------------------
def page(monkeypatch, root: Path, demo: bool = False) -> AppTest:
    monkeypatch.setenv(R.RUNS_ENV, str(root))
    if demo:
        monkeypatch.setenv(L.DEMO_ENV, "1")
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_page_empty_root(tmp_path, monkeypatch):
    at = page(monkeypatch, tmp_path)
    assert any("No runs yet" in i.value for i in at.info)
    assert len(at.button) >= 1 and at.selectbox(key="train_preset").value == "2-minute CPU demo"


def test_page_shows_the_shipped_translators_legs(tmp_path, monkeypatch):
    """The expander with the shipped model's scores after each leg, drawn from its card's ``legs``."""
    at = page(monkeypatch, tmp_path)
    (expander,) = [e for e in at.expander if "shipped translator was trained" in e.label]
    charts = list(expander.get("plotly_chart"))
    assert len(charts) == 1
    names = {t["name"] for t in json.loads(charts[0].proto.spec)["data"] if t.get("showlegend", True)}
    card = json.loads((ROOT / "checkpoints" / "en-de" / "card.json").read_text())
    want = {**LEG_SCORES, **card.get("legs_labels", {})}
    assert set(want.values()) <= names


def test_page_invalid_form_shows_error(tmp_path, monkeypatch):
    at = page(monkeypatch, tmp_path)
    preset = at.selectbox(key="train_preset").value
    at.number_input(key=f"f_d_model_{preset}").set_value(30)
    at.number_input(key=f"f_heads_{preset}").set_value(4)
    at.button[0].click().run()
    assert not at.exception
    assert any("divisible" in e.value for e in at.error), [e.value for e in at.error]
    assert not any(tmp_path.iterdir())  # nothing started


def test_page_form_launches_a_decoder_only_run(tmp_path, monkeypatch):
    launched = []

    def fake_launch(form, root, name=None, train_tsv_bytes=None):  # record, start nothing
        launched.append(form)
        return Path(root) / "lm-run"

    monkeypatch.setattr(L, "launch", fake_launch)
    at = page(monkeypatch, tmp_path)
    preset = at.selectbox(key="train_preset").value
    assert at.selectbox(key=f"f_arch_{preset}").value == "encoder-decoder"
    at.selectbox(key=f"f_arch_{preset}").set_value("decoder-only")
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (form,) = launched
    assert form["arch"] == "decoder-only"
    assert any("--arch decoder-only" in s.value for s in at.success)


def test_page_form_brown_corpus(tmp_path, monkeypatch):
    """The Brown corpus is refused for a translator (message, nothing launched) and preselected by the
    language-model preset, whose launch passes ``--corpus brown``."""
    launched = []
    monkeypatch.setattr(L, "launch", lambda form, root, name=None, train_tsv_bytes=None:
                        launched.append(form) or Path(root) / "lm-run")
    at = page(monkeypatch, tmp_path)
    preset = at.selectbox(key="train_preset").value
    at.radio(key=f"f_data_{preset}").set_value("brown")
    at.button[0].click().run()
    assert not at.exception and not launched
    assert any("English only" in e.value for e in at.error)
    at.selectbox(key="train_preset").set_value("2-minute CPU demo, language model").run()
    lm = at.selectbox(key="train_preset").value
    assert at.radio(key=f"f_data_{lm}").value == "brown"
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert launched[-1]["data"] == "brown" and any("--corpus brown" in s.value for s in at.success)


def test_page_form_mixture_shares(tmp_path, monkeypatch):
    """The real-pairs mixture: the shares typed in the form become ``--mix``; a corpus not prepared yet is refused
    with the command that prepares it, and leaving it out (share 0) starts the run on what there is."""
    from corpora import parallel

    monkeypatch.setattr(parallel, "PREPARED", tmp_path / "prepared")  # nothing prepared
    launched = []
    monkeypatch.setattr(L, "launch", lambda form, root, name=None, train_tsv_bytes=None:
                        launched.append(form) or Path(root) / "mix-run")
    at = page(monkeypatch, tmp_path)
    at.selectbox(key="train_preset").set_value("real sentence pairs (Tatoeba + Multi30K + BConTrasT + Ding)").run()
    preset = at.selectbox(key="train_preset").value
    assert at.radio(key=f"f_data_{preset}").value == "mixture"
    assert at.number_input(key=f"f_mix_multi30k_{preset}").value == 2
    assert any("Not prepared yet" in c.value for c in at.caption)
    at.button[0].click().run()
    assert not at.exception and not launched
    assert any("python -m corpora prepare all" in e.value for e in at.error), [e.value for e in at.error]
    for corpus in ("tatoeba", "multi30k", "bcontrast"):
        at.number_input(key=f"f_mix_{corpus}_{preset}").set_value(0)
    at.number_input(key=f"f_mix_ding_{preset}").set_value(3)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert launched[-1]["mix"] == "tatoeba=0,multi30k=0,bcontrast=0,ding=3"
    assert any("--mix tatoeba=0,multi30k=0,bcontrast=0,ding=3" in s.value for s in at.success)


def test_the_form_keeps_a_presets_general_domain_shares(tmp_path, monkeypatch):
    """The form showed only the four everyday corpora: the preset that adapts the translator to news and Wikipedia
    lost its shares of the general-domain files when launched from the page."""
    from corpora import parallel
    from corpora.extra import EXTRA_CORPORA

    monkeypatch.setattr(parallel, "PREPARED", tmp_path / "prepared")
    at = page(monkeypatch, tmp_path)
    name = next(n for n in TF.PRESETS if "wmt-news-extra" in (TF.preset_form(n).get("mix") or ""))
    at.selectbox(key="train_preset").set_value(name).run()
    preset = at.selectbox(key="train_preset").value
    wanted = parallel.parse_repeats(TF.preset_form(name)["mix"], parallel.DEFAULT_REPEATS)
    assert any(wanted.get(c) for c in EXTRA_CORPORA)
    for corpus, n in wanted.items():
        assert at.number_input(key=f"f_mix_{corpus}_{preset}").value == n, corpus


def test_page_demo_hides_form(tmp_path, monkeypatch):
    at = page(monkeypatch, tmp_path, demo=True)
    assert any("hosted demo" in i.value for i in at.info)
    assert len(at.number_input) == 0 and len(at.button) == 0


def test_page_shows_finished_run(finished, monkeypatch):
    root, run = finished
    at = page(monkeypatch, root)
    assert at.table[0].value["name"].tolist() == ["tiny"]
    assert "finished" in " ".join(m.value for m in at.markdown)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert "Loss" in titles and any("Learning rate" in t for t in titles)
    loss = charts[titles.index("Loss")]
    assert {t["name"] for t in loss["data"]} == {"train loss", "valid loss"}
    assert any(t.startswith("layer 1 · head") for t in titles)  # heads forming
    assert any("Translation at step 20" in m.value for m in at.markdown)
    snap_slider(at).set_value(0).run()
    assert not at.exception and any("Translation at step 0" in m.value for m in at.markdown)
    labels = {b.label: b.disabled for b in at.button}
    assert labels["Stop"] and not labels["Delete"] and not labels["Open in explorer"]


def test_run_without_status_but_fresh_metrics_is_not_deletable(tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "metrics.jsonl").write_text('{"step": 50, "loss": 5.0}\n')
    (row,) = L.list_runs(tmp_path)
    assert row["state"] == "unknown" and row["step"] == 50
    with pytest.raises(L.LaunchError):
        L.delete(legacy)
    old = time.time() - 3600
    os.utime(legacy / "metrics.jsonl", (old, old))
    L.delete(legacy)
    assert not legacy.exists()


# --- compare runs (fake run folders: no training) ---------------------------------------------------------
def run_picker(at: AppTest):
    return next(s for s in at.selectbox if s.label == "Watch run")


def snap_slider(at: AppTest):
    return next(s for s in at.select_slider if s.label == "snapshot step")


def fake_run(root: Path, name: str, *, age: float, state: str = "finished", steps=(50, 100, 150, 200),
             evals=(100, 200), tail: str = "", pid: int = 0) -> Path:
    """A run folder as the trainer leaves it: metrics.jsonl (log and evaluation lines), status.json,
    config.json; ``age`` seconds old (the runs list is newest first); ``tail`` is appended raw."""
    run = root / name
    run.mkdir(parents=True)
    lines = [{"step": s, "epoch": 0, "loss": round(9 - s / 50, 3), "lr": 1e-4 * s / 50, "grad_norm": 1.0,
              "tokens_per_s": 3000.0, "tokens_seen": 1300 * s, "time_s": 0.5 * s} for s in steps]
    lines += [{"step": s, "valid_loss": round(8 - s / 50, 3), "valid_bleu": s / 100, "valid_chrf": s / 10,
               "time_s": 0.5 * s + 2} for s in evals]
    lines.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)
    (run / "status.json").write_text(json.dumps({"state": state, "pid": pid, "step": max(steps, default=0),
                                                 "max_steps": 200}))
    (run / "config.json").write_text(json.dumps({"d_model": 32, "n_heads": 2, "n_encoder_layers": 1,
                                                 "pos_encoding": "sinusoidal"}))
    then = time.time() - age
    os.utime(run, (then, then))
    return run


def compare_charts(at: AppTest) -> dict[str, dict]:
    """The compare section's charts: metric → Plotly spec."""
    out = {}
    for chart in at.get("plotly_chart"):
        key = chart.proto.id.rsplit("-", 1)[-1]
        if key.startswith("cmp_"):
            out[key[4:]] = json.loads(chart.proto.spec)
    return out


@pytest.fixture
def three_runs(tmp_path):
    fake_run(tmp_path, "oldest", age=300)
    fake_run(tmp_path, "older", age=200, steps=(50, 100, 150), evals=(100,))
    fake_run(tmp_path, "newest", age=100, state="stopped")
    return tmp_path


def test_compare_two_runs_overlays_their_curves(three_runs, monkeypatch):
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="compare").value == ["newest", "older"]  # the two most recent that have ended
    charts = compare_charts(at)
    assert list(charts) == ["loss", "valid_loss", "valid_bleu", "valid_chrf", "tokens_per_s", "lr"]
    for metric, spec in charts.items():
        assert [t["legendgroup"] for t in spec["data"]] == ["newest", "older"], metric
        assert spec["layout"]["title"]["text"] and spec["layout"]["xaxis"]["title"]["text"] == "optimizer step"
        assert spec["layout"]["yaxis"]["title"]["text"]
    colours = {(t["legendgroup"], t["line"]["color"]) for spec in charts.values() for t in spec["data"]}
    assert len(colours) == 2  # one colour per run, the same on every chart
    assert charts["loss"]["data"][1]["x"] == [50, 100, 150] and charts["valid_loss"]["data"][1]["x"] == [100]

    at.multiselect(key="compare").set_value(["oldest", "newest", "older"]).run()
    at.radio(key="compare_x").set_value("tokens seen").run()
    assert not at.exception
    charts = compare_charts(at)
    assert [t["name"] for t in charts["valid_bleu"]["data"]] == ["oldest", "newest", "older"]
    assert charts["valid_bleu"]["data"][0]["x"] == [130_000, 260_000]  # evaluation lines: tokens of their step
    assert "tokens seen" in charts["loss"]["layout"]["xaxis"]["title"]["text"]
    at.radio(key="compare_x").set_value("wall time (minutes)").run()
    assert compare_charts(at)["loss"]["data"][0]["x"] == pytest.approx([50 * 0.5 / 60 * k for k in (1, 2, 3, 4)])

    at.multiselect(key="compare").set_value([]).run()
    assert not at.exception and compare_charts(at) == {}
    assert any("Pick runs" in c.value for c in at.caption)


def test_a_run_that_ends_while_the_page_is_open_is_preselected(tmp_path, monkeypatch):
    run = fake_run(tmp_path, "watched", age=10, state="running", pid=os.getpid())
    at = page(monkeypatch, tmp_path)
    assert at.multiselect(key="compare").value == []  # nothing has ended yet
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "finished"}))
    at.run()
    assert not at.exception and at.multiselect(key="compare").value == ["watched"]
    at.multiselect(key="compare").set_value([]).run()  # a person's choice, even an empty one, is kept
    at.run()
    assert at.multiselect(key="compare").value == []


def test_compare_selection_comes_from_the_url(three_runs, monkeypatch):
    monkeypatch.setenv(R.RUNS_ENV, str(three_runs))
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.query_params["compare"] = ["oldest", "no-such-run"]
    at.query_params["compare_x"] = "tokens seen"
    at.run()
    assert not at.exception, at.exception
    assert at.multiselect(key="compare").value == ["oldest"]  # an unknown run id in the URL is dropped
    assert at.radio(key="compare_x").value == "tokens seen"
    assert [t["name"] for t in compare_charts(at)["loss"]["data"]] == ["oldest"]


def test_compare_run_vanished_after_listing(three_runs, monkeypatch):
    real_list_runs = L.list_runs

    def listing_then_gone(root=None):  # "ghost" is listed, then deleted before its metrics are read
        rows = real_list_runs(root)
        return [{**rows[0], "name": "ghost", "path": str(Path(root) / "ghost")}] + rows

    monkeypatch.setattr(L, "list_runs", listing_then_gone)
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="compare").value == ["ghost", "newest"]
    assert any("`ghost` is no longer there" in i.value for i in at.info), [i.value for i in at.info]
    charts = compare_charts(at)
    assert charts and all([t["name"] for t in c["data"]] == ["newest"] for c in charts.values())
    assert charts["loss"]["data"][0]["line"]["color"] == PALETTE[1]  # colours follow the selection: ghost's stays free


def test_compare_tolerates_runs_being_written(tmp_path, monkeypatch):
    # "running": its pid is this (live) process, so the page polls it
    fake_run(tmp_path, "writing", age=100, state="running", pid=os.getpid(), evals=(), tail='{"step": 250, "loss": 4.')
    fake_run(tmp_path, "fresh", age=200, steps=(), evals=())
    fake_run(tmp_path, "garbage", age=300, tail="not json\n[1, 2]\n{\"step\": \"x\", \"loss\": 1}\n")
    (tmp_path / "nometrics").mkdir()
    at = page(monkeypatch, tmp_path)
    assert at.table[0].value.set_index("name")["state"]["writing"] == "running"
    at.multiselect(key="compare").set_value(["writing", "fresh", "garbage", "nometrics"]).run()
    assert not at.exception, at.exception
    infos = " ".join(i.value for i in at.info)
    assert "`fresh` has no metrics yet" in infos and "`nometrics` has no metrics yet" in infos
    charts = compare_charts(at)
    assert [t["legendgroup"] for t in charts["loss"]["data"]] == ["writing", "garbage"]
    assert charts["loss"]["data"][0]["x"] == [50, 100, 150, 200]  # the half-written step 250 is skipped
    assert charts["valid_loss"]["data"][0]["x"] == [None]  # no evaluation yet: training curves only
    assert "no evaluation yet" in charts["valid_loss"]["data"][0]["name"]
    assert charts["valid_loss"]["data"][1]["x"] == [100, 200]  # the run with garbage lines still plots


def test_a_baseline_run_says_why_it_has_no_snapshots(tmp_path, monkeypatch):
    """A torch.nn.Transformer baseline run (``--impl torch``) has no traced attention: the page says so."""
    import json as _json

    run = tmp_path / "runs" / "torch-baseline"
    run.mkdir(parents=True)
    (run / "train_args.json").write_text(_json.dumps({"impl": "torch", "max_steps": 10}))
    (run / "status.json").write_text(_json.dumps({"state": "finished", "step": 10, "max_steps": 10}))
    (run / "metrics.jsonl").write_text(_json.dumps({"step": 5, "loss": 7.0, "lr": 1e-3, "tokens_seen": 100,
                                                    "time_s": 1.0}) + "\n")
    monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file(str(PAGE), default_timeout=60).run()
    assert not at.exception
    assert any("torch.nn.Transformer baseline" in i.value for i in at.info)


# --- a decoder-only (language model) run ------------------------------------------------------------------
def fake_lm_run(root: Path, name: str, *, age: float) -> Path:
    """A finished decoder-only run as the trainer leaves it: evaluation lines with ``valid_ppl`` and no BLEU/chrF,
    ``config.json`` / ``train_args.json`` saying ``decoder-only``, and real probes (a tiny random model's)."""
    import math

    import torch

    from model.config import ModelConfig
    from model.tokenizer import TextTokenizer
    from model.transformer import Transformer
    from training.runs import probe_record

    run = fake_run(root, name, age=age, evals=())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines += [{"step": s, "valid_loss": round(7 - s / 50, 3), "valid_ppl": round(math.exp(7 - s / 50), 2),
               "time_s": 0.5 * s + 2} for s in (100, 200)]
    lines.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    tok = TextTokenizer.train(["The cat sat on the mat.", "Die Katze saß auf der Matte."] * 5, vocab_size=120)
    cfg = ModelConfig(arch="decoder-only", vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_encoder_layers=0,
                      n_decoder_layers=1, d_ff=32, max_len=24)
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    (run / "train_args.json").write_text(json.dumps({"arch": "decoder-only", "impl": "ours", "max_steps": 200}))
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with open(run / "probes.jsonl", "w", encoding="utf-8") as f:
        for step in (0, 200):
            f.write(json.dumps(probe_record(model, tok, step, ["The cat sat."]), ensure_ascii=False) + "\n")
    then = time.time() - age
    os.utime(run, (then, then))
    return run


def test_page_shows_a_decoder_only_run(tmp_path, monkeypatch):
    fake_run(tmp_path, "translator", age=200)
    fake_lm_run(tmp_path, "lm", age=100)
    at = page(monkeypatch, tmp_path)
    rows = at.table[0].value.set_index("name")
    assert rows["model"]["lm"].endswith("decoder-only") and rows["bleu"].isna()["lm"]
    assert run_picker(at).value == "lm"
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Loss" in titles and "Validation perplexity (exp of the loss)" in titles
    assert "Validation BLEU / chrF" not in titles
    # heads forming: the probe's continuation and its masked self-attention
    assert at.selectbox(key="hf_kind").options == [KIND_SHORT["self"]]
    assert any(m.value.startswith("Continuation at step 200: The cat sat.") for m in at.markdown)
    assert any(t == "layer 1 · head 2" for t in titles)
    snap_slider(at).set_value(0).run()
    assert not at.exception and any("Continuation at step 0" in m.value for m in at.markdown)
    # compare: the language model's BLEU / chrF are "not measured", its losses plot
    assert at.multiselect(key="compare").value == ["lm", "translator"]
    charts = compare_charts(at)
    assert charts["valid_loss"]["data"][0]["x"] == [100, 200]
    for metric in ("valid_bleu", "valid_chrf"):
        lm, translator = charts[metric]["data"]
        assert lm["x"] == [None] and "not measured" in lm["name"] and translator["x"] == [100, 200]
    # the translator's own page still shows BLEU
    run_picker(at).set_value("translator").run()
    assert not at.exception
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Validation BLEU / chrF" in titles


def test_a_just_launched_run_is_starting_until_its_trainer_says_running(tmp_path):
    """Between the click and the trainer's first status.json (or a resumed run's old ``stopped`` status), the run
    the lock names is ``starting``, a live state the page keeps polling; once its process is gone it is not."""
    run = tmp_path / "fresh"
    run.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / L.LOCK_NAME).write_text(json.dumps({"run": "fresh", "pid": sleeper.pid}))
        assert L.run_state(run) == "starting" and L.run_state(run) in L.LIVE_STATES
        (run / "status.json").write_text(json.dumps({"state": "stopped", "step": 5}))  # resumed, not yet rewritten
        assert L.run_state(run) == "starting"
        assert L.summarize(run)["state"] == "starting"
        (run / "status.json").write_text(json.dumps({"state": "running", "pid": sleeper.pid}))
        assert L.run_state(run) == "running"
        other = tmp_path / "other"
        other.mkdir()
        assert L.run_state(other) == "unknown"  # the lock names another run
    finally:
        sleeper.kill()
        sleeper.wait()
    (run / "status.json").write_text(json.dumps({"state": "stopped", "step": 5}))
    assert L.run_state(run) == "stopped" and L.run_state(run) not in L.LIVE_STATES


# --- the page follows its runs ------------------------------------------------------------------------------
@pytest.fixture
def sleeper():
    """A live process that is not this one: the pid of a trainer that the lock names."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def header(at: AppTest) -> str:
    return next(m.value for m in at.markdown if " — state **" in m.value)


def test_a_resumed_run_is_starting_until_its_trainer_writes_its_status(tmp_path, monkeypatch, sleeper):
    """After Resume the page said "state finished · step 1794" while the new trainer was loading, and stopped
    following the run: the lock was taken for stale because status.json (the previous leg's) said finished, and
    the page's own check removed it. Until the new process writes its status, the run is starting."""
    run = fake_run(tmp_path, "resumed", age=10, state="finished", pid=12345)
    (tmp_path / L.LOCK_NAME).write_text(json.dumps({"run": "resumed", "pid": sleeper.pid}))
    assert L.active_run(tmp_path) == run and (tmp_path / L.LOCK_NAME).exists()
    at = page(monkeypatch, tmp_path)
    at.run()  # the next refresh: the lock is still there
    assert "state **starting**" in header(at), header(at)
    assert (tmp_path / L.LOCK_NAME).exists() and L.run_state(run) == "starting"
    assert {b.label: b.disabled for b in at.button}["Resume"]  # no second trainer meanwhile
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "running", "pid": sleeper.pid}))
    at.run()
    assert "state **running**" in header(at) and not {b.label: b.disabled for b in at.button}["Stop"]
    (run / "status.json").write_text(json.dumps({**status, "state": "finished", "pid": sleeper.pid}))
    assert L.run_state(run) == "finished" and L.active_run(tmp_path) is None  # its own last word: the lock is stale


def test_launching_a_run_watches_it(tmp_path, monkeypatch):
    """After starting a second run, "Watch run" stayed on the first one: the keyed picker ignored the new index."""
    fake_run(tmp_path, "first", age=100)
    monkeypatch.setattr(L, "launch", lambda form, root, name=None, train_tsv_bytes=None:
                        fake_run(Path(root), "second", age=0, state="running", pid=os.getpid()))
    at = page(monkeypatch, tmp_path)
    assert run_picker(at).value == "first"
    at.button[0].click().run()  # Start training
    assert not at.exception and run_picker(at).value == "second"
    assert "**second** — state **running**" in header(at)
    run_picker(at).set_value("first").run()  # the person's pick is kept from then on
    at.run()
    assert run_picker(at).value == "first"


def add_snapshots(run: Path, steps) -> None:
    """Append probe records (a tiny random translator's) at ``steps`` to the run's probes.jsonl."""
    import torch

    from model.config import ModelConfig
    from model.tokenizer import TextTokenizer
    from model.transformer import Transformer
    from training.runs import probe_record

    tok = TextTokenizer.train(["The cat sat on the mat.", "Die Katze saß auf der Matte."] * 5, vocab_size=120)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                      d_ff=32, max_len=24)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    record = probe_record(model, tok, 0, ["The cat sat."])
    with open(run / "probes.jsonl", "a", encoding="utf-8") as f:
        for step in steps:
            f.write(json.dumps({**record, "step": step}, ensure_ascii=False) + "\n")


def test_heads_forming_follows_new_snapshots(tmp_path, monkeypatch):
    """Heads forming stayed on the snapshot that was newest when the page was drawn (its slider kept its value)
    while later ones were written; it follows the newest, unless the person has picked an earlier one."""
    run = fake_run(tmp_path, "live", age=10, state="running", pid=os.getpid())
    add_snapshots(run, [0, 10])
    at = page(monkeypatch, tmp_path)
    assert snap_slider(at).value == 10
    add_snapshots(run, [30])
    at.run()
    assert snap_slider(at).value == 30
    assert any("Translation at step 30" in m.value for m in at.markdown)
    snap_slider(at).set_value(10).run()  # an earlier one, picked: it stays
    add_snapshots(run, [100])
    at.run()
    assert snap_slider(at).value == 10 and snap_slider(at).options[-1] == "100"


def test_progress_of_a_resumed_run_counts_its_legs():
    """A 2-minute run resumed said "2.0 of 2" after 4 minutes of training: the limit counts per leg, and the line
    says so, with the run's total beside it."""
    status = {"step": 900, "max_steps": 100_000, "max_minutes": 2.0, "started": "2025-12-31T23:00:00+00:00",
              "leg_started": START, "leg": 2, "earlier_seconds": 120.0}
    fraction, text = progress(status, now=T0 + 72)
    assert text == "this leg 1.2 of 2 minutes · total 3.2 minutes · step 900" and fraction == pytest.approx(0.6)
    ended = {**status, "updated": "2026-01-01T00:02:00+00:00"}
    assert progress(ended, live=False)[1] == "this leg 2.0 of 2 minutes · total 4.0 minutes · step 900"
    by_steps = {**status, "max_steps": 1000}
    assert progress(by_steps, now=T0 + 72)[1] == "step 900 of 1000 · total 3.2 minutes"


def test_delete_asks_to_confirm(tmp_path, monkeypatch):
    """Delete removed a run (every checkpoint) in one click; it asks first."""
    run = fake_run(tmp_path, "victim", age=10)
    at = page(monkeypatch, tmp_path)
    next(b for b in at.button if b.label == "Delete").click().run()
    assert not at.exception and run.is_dir()
    assert any("cannot be undone" in w.value for w in at.warning)
    next(b for b in at.button if b.label == "Cancel").click().run()
    assert run.is_dir() and not any(b.label == "Confirm delete" for b in at.button)
    next(b for b in at.button if b.label == "Delete").click().run()
    next(b for b in at.button if b.label == "Confirm delete").click().run()
    assert not at.exception and not run.exists()
    assert any("No runs yet" in i.value for i in at.info)


def test_open_in_explorer_lists_the_copy_in_the_sidebar(finished, tmp_path, monkeypatch):
    """"Open in explorer" copied best/ after the sidebar's picker had been drawn, so the copy showed only after a
    reload. The whole app (app.py draws the picker, then the page) with a temporary checkpoint folder."""
    import ui.state as S

    root, _ = finished
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    monkeypatch.setattr(S, "CHECKPOINT_ROOTS", [ckpts])
    real_export = L.export_best
    monkeypatch.setattr(L, "export_best", lambda run_dir, _root, name=None: real_export(run_dir, ckpts, name))
    monkeypatch.setenv(R.RUNS_ENV, str(root))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception, at.exception
    assert not at.sidebar.selectbox  # no checkpoint yet
    next(b for b in at.button if b.label == "Open in explorer").click().run()
    assert not at.exception, at.exception
    assert (ckpts / "tiny" / "config.json").is_file()
    assert "tiny" in at.sidebar.selectbox(key="ckpt_name").options
    assert any("checkpoints/tiny" in s.value for s in at.success)


def test_the_preselected_runs_stay_out_of_the_link(three_runs, monkeypatch):
    """Any click on the Training page wrote the preselected runs into the link (``?compare=newest&compare=older``),
    though they were nobody's choice: a link says only what a person chose."""
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="compare").value == ["newest", "older"]
    at.radio(key="compare_x").set_value("tokens seen").run()
    assert not at.exception and at.multiselect(key="compare").value == ["newest", "older"]
    assert "compare" not in at.query_params and at.query_params["compare_x"] == "tokens seen"
    assert not any("Session State API" in w.value for w in at.warning)
    at.multiselect(key="compare").set_value(["oldest"]).run()  # a person's choice goes into the link
    assert at.query_params["compare"] == "oldest"
    monkeypatch.setenv(R.RUNS_ENV, str(three_runs))
    again = AppTest.from_file(str(PAGE), default_timeout=60)
    again.query_params["compare"] = "oldest,no-such-run"  # a link: its runs come back, an unknown one noted
    again.run()
    assert again.multiselect(key="compare").value == ["oldest"]
    assert any("no-such-run" in i.value for i in again.info)


def test_the_runs_table_writes_counts_as_whole_numbers_beside_a_run_without_them():
    """A run that never logged (its step blank) turns the step column into floats, which st.table wrote as
    "400.0000"; a static table writes whole numbers without decimals and a blank as nothing."""
    import pandas as pd

    from ui.run_view import table_row
    from ui.widgets import static_styler

    rows = [table_row({"name": "a", "step": 400, "max_steps": 1200, "loss": 3.47401, "bleu": 11.96}),
            table_row({"name": "b", "step": None, "max_steps": None, "loss": None, "bleu": None})]
    html = static_styler(pd.DataFrame(rows)).to_html()
    assert ">400<" in html and ">1,200<" in html and ">3.474<" in html and ">11.96<" in html
    assert ".0000" not in html and "nan" not in html.lower()
    assert ">7.50<" in static_styler(pd.DataFrame([{"x": 7.5}]), {"x": "{:.2f}"}).to_html()  # a format wins
