"""The Training page: real tiny runs started as subprocesses (the one-run lock, stop, kill -9, delete, garbage
tolerance) and ``app_pages/training/training.py`` via AppTest: the form launching runs, a finished run, "Open in
explorer".

Every run goes into a temporary runs root; nothing touches ``runs/``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from training_page_helpers import LONG, ROOT, TINY, page, snap_slider, wait_for

from charts.training import LEG_SCORES
from launching import form as TF
from launching import launch as L
from model.checkpoint import load_checkpoint
from training import runs as R

# One worker runs this module and test_runs.py, so conftest's finished run is made once, not once per worker
pytestmark = [pytest.mark.usefixtures("training_page_env"), pytest.mark.xdist_group("finished-run")]


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


def test_page_empty_root(tmp_path, monkeypatch):
    at = page(monkeypatch, tmp_path)
    assert any("No runs yet" in i.value for i in at.info)
    assert len(at.button) >= 1 and at.selectbox(key="tn_form_preset").value == "2-minute CPU demo"


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
    preset = at.selectbox(key="tn_form_preset").value
    at.number_input(key=f"tn_form_d_model_{preset}").set_value(30)
    at.number_input(key=f"tn_form_heads_{preset}").set_value(4)
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
    preset = at.selectbox(key="tn_form_preset").value
    assert at.selectbox(key=f"tn_form_arch_{preset}").value == "encoder-decoder"
    at.selectbox(key=f"tn_form_arch_{preset}").set_value("decoder-only")
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (form,) = launched
    assert form["arch"] == "decoder-only"
    assert any("--arch decoder-only" in s.value for s in at.success)


def test_page_form_brown_corpus(tmp_path, monkeypatch):
    """The Brown corpus is refused for a translator (message, nothing launched) and preselected by the
    language-model preset, whose launch passes ``--corpus brown``."""
    launched = []
    monkeypatch.setattr(
        L, "launch", lambda form, root, name=None, train_tsv_bytes=None: launched.append(form) or Path(root) / "lm-run"
    )
    at = page(monkeypatch, tmp_path)
    preset = at.selectbox(key="tn_form_preset").value
    at.radio(key=f"tn_form_data_{preset}").set_value("brown")
    at.button[0].click().run()
    assert not at.exception and not launched
    assert any("English only" in e.value for e in at.error)
    at.selectbox(key="tn_form_preset").set_value("2-minute CPU demo, language model").run()
    lm = at.selectbox(key="tn_form_preset").value
    assert at.radio(key=f"tn_form_data_{lm}").value == "brown"
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert launched[-1]["data"] == "brown" and any("--corpus brown" in s.value for s in at.success)


def test_page_form_mixture_shares(tmp_path, monkeypatch):
    """The real-pairs mixture: the shares typed in the form become ``--mix``; a corpus not prepared yet is refused
    with the command that prepares it, and leaving it out (share 0) starts the run on what there is."""
    from corpora import parallel

    monkeypatch.setattr(parallel, "PREPARED", tmp_path / "prepared")  # nothing prepared
    launched = []
    monkeypatch.setattr(
        L, "launch", lambda form, root, name=None, train_tsv_bytes=None: launched.append(form) or Path(root) / "mix-run"
    )
    at = page(monkeypatch, tmp_path)
    at.selectbox(key="tn_form_preset").set_value("real sentence pairs (Tatoeba + Multi30K + BConTrasT + Ding)").run()
    preset = at.selectbox(key="tn_form_preset").value
    assert at.radio(key=f"tn_form_data_{preset}").value == "mixture"
    assert at.number_input(key=f"tn_form_mix_multi30k_{preset}").value == 2
    assert any("Not prepared yet" in c.value for c in at.caption)
    at.button[0].click().run()
    assert not at.exception and not launched
    assert any("python -m corpora prepare all" in e.value for e in at.error), [e.value for e in at.error]
    for corpus in ("tatoeba", "multi30k", "bcontrast"):
        at.number_input(key=f"tn_form_mix_{corpus}_{preset}").set_value(0)
    at.number_input(key=f"tn_form_mix_ding_{preset}").set_value(3)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert launched[-1]["mix"] == "tatoeba=0,multi30k=0,bcontrast=0,ding=3"
    assert any("--mix tatoeba=0,multi30k=0,bcontrast=0,ding=3" in s.value for s in at.success)


def test_the_form_keeps_a_presets_general_domain_shares(tmp_path, monkeypatch):
    """The form showed only the four everyday corpora: the preset that adapts the translator to news and Wikipedia
    lost its shares of the general-domain files when launched from the page."""
    from corpora import mixture, parallel
    from corpora.extra import EXTRA_CORPORA

    monkeypatch.setattr(parallel, "PREPARED", tmp_path / "prepared")
    at = page(monkeypatch, tmp_path)
    name = next(n for n in TF.PRESETS if "wmt-news-extra" in (TF.preset_form(n).get("mix") or ""))
    at.selectbox(key="tn_form_preset").set_value(name).run()
    preset = at.selectbox(key="tn_form_preset").value
    wanted = mixture.parse_repeats(TF.preset_form(name)["mix"], mixture.DEFAULT_REPEATS)
    assert any(wanted.get(c) for c in EXTRA_CORPORA)
    for corpus, n in wanted.items():
        assert at.number_input(key=f"tn_form_mix_{corpus}_{preset}").value == n, corpus


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


def test_open_in_explorer_lists_the_copy_in_the_sidebar(finished, tmp_path, monkeypatch):
    """ "Open in explorer" copied best/ after the sidebar's picker had been drawn, so the copy showed only after a
    reload. The whole app (app.py draws the picker, then the page) with a temporary checkpoint folder."""
    import ui.checkpoints as C

    root, _ = finished
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    monkeypatch.setattr(C, "CHECKPOINT_ROOTS", [ckpts])
    real_export = L.export_best
    monkeypatch.setattr(L, "export_best", lambda run_dir, _root, name=None: real_export(run_dir, ckpts, name))
    monkeypatch.setenv(R.RUNS_ENV, str(root))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/training/training.py").run()
    assert not at.exception, at.exception
    assert not at.sidebar.selectbox  # no checkpoint yet
    next(b for b in at.button if b.label == "Open in explorer").click().run()
    assert not at.exception, at.exception
    assert (ckpts / "tiny" / "config.json").is_file()
    assert "tiny" in at.sidebar.selectbox(key="app_ckpt").options
    assert any("checkpoints/tiny" in s.value for s in at.success)
