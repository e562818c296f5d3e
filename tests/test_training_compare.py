"""The Training page's compare view: runs overlaid, selected from the URL, vanishing or half written while read;
a decoder-only run. Every run is a fake run folder in a temporary runs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from training_page_helpers import PAGE, compare_charts, fake_run, page, run_picker, snap_slider

from charts.training import PALETTE
from launching import launch as L
from training import runs as R
from viz.labels import KIND_SHORT

pytestmark = pytest.mark.usefixtures("training_page_env")


@pytest.fixture
def three_runs(tmp_path):
    fake_run(tmp_path, "oldest", age=300)
    fake_run(tmp_path, "older", age=200, steps=(50, 100, 150), evals=(100,))
    fake_run(tmp_path, "newest", age=100, state="stopped")
    return tmp_path


def test_compare_two_runs_overlays_their_curves(three_runs, monkeypatch):
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="tn_compare_runs").value == ["newest", "older"]  # the two most recent that have ended
    charts = compare_charts(at)
    assert list(charts) == ["loss", "valid_loss", "valid_bleu", "valid_chrf", "tokens_per_s", "lr"]
    for metric, spec in charts.items():
        assert [t["legendgroup"] for t in spec["data"]] == ["newest", "older"], metric
        assert spec["layout"]["title"]["text"] and spec["layout"]["xaxis"]["title"]["text"] == "optimizer step"
        assert spec["layout"]["yaxis"]["title"]["text"]
    colours = {(t["legendgroup"], t["line"]["color"]) for spec in charts.values() for t in spec["data"]}
    assert len(colours) == 2  # one colour per run, the same on every chart
    assert charts["loss"]["data"][1]["x"] == [50, 100, 150] and charts["valid_loss"]["data"][1]["x"] == [100]

    at.multiselect(key="tn_compare_runs").set_value(["oldest", "newest", "older"]).run()
    at.radio(key="tn_compare_x").set_value("tokens seen").run()
    assert not at.exception
    charts = compare_charts(at)
    assert [t["name"] for t in charts["valid_bleu"]["data"]] == ["oldest", "newest", "older"]
    assert charts["valid_bleu"]["data"][0]["x"] == [130_000, 260_000]  # evaluation lines: tokens of their step
    assert "tokens seen" in charts["loss"]["layout"]["xaxis"]["title"]["text"]
    at.radio(key="tn_compare_x").set_value("wall time (minutes)").run()
    assert compare_charts(at)["loss"]["data"][0]["x"] == pytest.approx([50 * 0.5 / 60 * k for k in (1, 2, 3, 4)])

    at.multiselect(key="tn_compare_runs").set_value([]).run()
    assert not at.exception and compare_charts(at) == {}
    assert any("Pick runs" in c.value for c in at.caption)


def test_a_run_that_ends_while_the_page_is_open_is_preselected(tmp_path, monkeypatch):
    run = fake_run(tmp_path, "watched", age=10, state="running", pid=os.getpid())
    at = page(monkeypatch, tmp_path)
    assert at.multiselect(key="tn_compare_runs").value == []  # nothing has ended yet
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "finished"}))
    at.run()
    assert not at.exception and at.multiselect(key="tn_compare_runs").value == ["watched"]
    at.multiselect(key="tn_compare_runs").set_value([]).run()  # a person's choice, even an empty one, is kept
    at.run()
    assert at.multiselect(key="tn_compare_runs").value == []


def test_compare_selection_comes_from_the_url(three_runs, monkeypatch):
    monkeypatch.setenv(R.RUNS_ENV, str(three_runs))
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.query_params["compare"] = ["oldest", "no-such-run"]
    at.query_params["compare_x"] = "tokens seen"
    at.run()
    assert not at.exception, at.exception
    assert at.multiselect(key="tn_compare_runs").value == ["oldest"]  # an unknown run id in the URL is dropped
    assert at.radio(key="tn_compare_x").value == "tokens seen"
    assert [t["name"] for t in compare_charts(at)["loss"]["data"]] == ["oldest"]


def test_compare_run_vanished_after_listing(three_runs, monkeypatch):
    real_list_runs = L.list_runs

    def listing_then_gone(root=None):  # "ghost" is listed, then deleted before its metrics are read
        rows = real_list_runs(root)
        return [{**rows[0], "name": "ghost", "path": str(Path(root) / "ghost")}] + rows

    monkeypatch.setattr(L, "list_runs", listing_then_gone)
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="tn_compare_runs").value == ["ghost", "newest"]
    assert any("`ghost` is no longer there" in i.value for i in at.info), [i.value for i in at.info]
    charts = compare_charts(at)
    assert charts and all([t["name"] for t in c["data"]] == ["newest"] for c in charts.values())
    assert charts["loss"]["data"][0]["line"]["color"] == PALETTE[1]  # colours follow the selection: ghost's stays free


def test_compare_tolerates_runs_being_written(tmp_path, monkeypatch):
    # "running": its pid is this (live) process, so the page polls it
    fake_run(tmp_path, "writing", age=100, state="running", pid=os.getpid(), evals=(), tail='{"step": 250, "loss": 4.')
    fake_run(tmp_path, "fresh", age=200, steps=(), evals=())
    fake_run(tmp_path, "garbage", age=300, tail='not json\n[1, 2]\n{"step": "x", "loss": 1}\n')
    (tmp_path / "nometrics").mkdir()
    at = page(monkeypatch, tmp_path)
    assert at.table[0].value.set_index("name")["state"]["writing"] == "running"
    at.multiselect(key="tn_compare_runs").set_value(["writing", "fresh", "garbage", "nometrics"]).run()
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
    (run / "metrics.jsonl").write_text(
        _json.dumps({"step": 5, "loss": 7.0, "lr": 1e-3, "tokens_seen": 100, "time_s": 1.0}) + "\n"
    )
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
    from training.checkpoints import probe_record

    run = fake_run(root, name, age=age, evals=())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines += [
        {
            "step": s,
            "valid_loss": round(7 - s / 50, 3),
            "valid_ppl": round(math.exp(7 - s / 50), 2),
            "time_s": 0.5 * s + 2,
        }
        for s in (100, 200)
    ]
    lines.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    tok = TextTokenizer.train(["The cat sat on the mat.", "Die Katze saß auf der Matte."] * 5, vocab_size=120)
    cfg = ModelConfig(
        arch="decoder-only",
        vocab_size=tok.vocab_size,
        d_model=16,
        n_heads=2,
        n_encoder_layers=0,
        n_decoder_layers=1,
        d_ff=32,
        max_len=24,
    )
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
    assert at.selectbox(key="tn_hf_kind").options == [KIND_SHORT["self"]]
    assert any(m.value.startswith("Continuation at step 200: The cat sat.") for m in at.markdown)
    assert any(t == "layer 1 · head 2" for t in titles)
    snap_slider(at).set_value(0).run()
    assert not at.exception and any("Continuation at step 0" in m.value for m in at.markdown)
    # compare: the language model's BLEU / chrF are "not measured", its losses plot
    assert at.multiselect(key="tn_compare_runs").value == ["lm", "translator"]
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


def test_the_preselected_runs_stay_out_of_the_link(three_runs, monkeypatch):
    """Any click on the Training page wrote the preselected runs into the link (``?compare=newest&compare=older``),
    though they were nobody's choice: a link says only what a person chose."""
    at = page(monkeypatch, three_runs)
    assert at.multiselect(key="tn_compare_runs").value == ["newest", "older"]
    at.radio(key="tn_compare_x").set_value("tokens seen").run()
    assert not at.exception and at.multiselect(key="tn_compare_runs").value == ["newest", "older"]
    assert "compare" not in at.query_params and at.query_params["compare_x"] == "tokens seen"
    assert not any("Session State API" in w.value for w in at.warning)
    at.multiselect(key="tn_compare_runs").set_value(["oldest"]).run()  # a person's choice goes into the link
    assert at.query_params["compare"] == "oldest"
    monkeypatch.setenv(R.RUNS_ENV, str(three_runs))
    again = AppTest.from_file(str(PAGE), default_timeout=60)
    again.query_params["compare"] = "oldest,no-such-run"  # a link: its runs come back, an unknown one noted
    again.run()
    assert again.multiselect(key="tn_compare_runs").value == ["oldest"]
    assert any("no-such-run" in i.value for i in again.info)
