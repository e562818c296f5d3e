"""The Training page follows its runs: a run starting, resumed, launched and watched, new snapshots, legs counted,
delete asking to confirm. Every run goes into a temporary runs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from training_page_helpers import START, T0, fake_run, page, run_picker, snap_slider

from app_pages.training.run_view import progress
from launching import launch as L

pytestmark = pytest.mark.usefixtures("training_page_env")


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
    monkeypatch.setattr(
        L,
        "launch",
        lambda form, root, name=None, train_tsv_bytes=None: fake_run(
            Path(root), "second", age=0, state="running", pid=os.getpid()
        ),
    )
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
    from training.checkpoints import probe_record

    tok = TextTokenizer.train(["The cat sat on the mat.", "Die Katze saß auf der Matte."] * 5, vocab_size=120)
    cfg = ModelConfig(
        vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32, max_len=24
    )
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
    status = {
        "step": 900,
        "max_steps": 100_000,
        "max_minutes": 2.0,
        "started": "2025-12-31T23:00:00+00:00",
        "leg_started": START,
        "leg": 2,
        "earlier_seconds": 120.0,
    }
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


def test_the_runs_table_writes_counts_as_whole_numbers_beside_a_run_without_them():
    """A run that never logged (its step blank) turns the step column into floats, which st.table wrote as
    "400.0000"; a static table writes whole numbers without decimals and a blank as nothing."""
    import pandas as pd

    from app_pages.training.run_view import table_row
    from ui.widgets import static_styler

    rows = [
        table_row({"name": "a", "step": 400, "max_steps": 1200, "loss": 3.47401, "bleu": 11.96}),
        table_row({"name": "b", "step": None, "max_steps": None, "loss": None, "bleu": None}),
    ]
    html = static_styler(pd.DataFrame(rows)).to_html()
    assert ">400<" in html and ">1,200<" in html and ">3.474<" in html and ">11.96<" in html
    assert ".0000" not in html and "nan" not in html.lower()
    assert ">7.50<" in static_styler(pd.DataFrame([{"x": 7.5}]), {"x": "{:.2f}"}).to_html()  # a format wins
