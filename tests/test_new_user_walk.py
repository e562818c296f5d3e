"""The smaller readability defects a new user's walk through the pages found at 1280×720: a score axis that went
below 0, the runs table cutting off its last columns, the worked example's X in the editor's small type, and two
notations for the attention projections.

Figure-level checks and ``AppTest`` runs of the pages (the Training page on fabricated run folders).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_teaching_pages import _app

from charts.training import SCORE_MIN_TOP, compare_figure, run_figure, score_axis

ROOT = Path(__file__).resolve().parent.parent


# --- scores on a 0–100 axis ---------------------------------------------------------------------------------------
def test_scores_that_are_all_zero_sit_on_a_0_to_100_axis_not_minus_1_to_1():
    """A young run's BLEU was 0 at every evaluation (or it had evaluated once): Plotly drew it on −1…1, as if a score
    could be negative."""
    once = [{"step": 10, "valid_loss": 7.0, "valid_bleu": 0.0, "valid_chrf": 0.0}]
    fig = run_figure(
        once, {"BLEU": "valid_bleu", "chrF": "valid_chrf"}, "Validation BLEU / chrF", "score (0–100)", score=True
    )
    assert list(fig.layout.yaxis.range) == [0.0, SCORE_MIN_TOP]
    runs = {"a": once + [{"step": 20, "valid_bleu": 0.0}], "b": [{"step": 5, "loss": 3.0}]}
    for metric in ("valid_bleu", "valid_chrf"):
        assert compare_figure(runs, metric).layout.yaxis.range[0] == 0.0
    assert score_axis([12.0, 37.9]) == [0.0, pytest.approx(37.9 * 1.15)] and score_axis([95.0]) == [0.0, 100.0]
    loss = run_figure(once, {"valid loss": "valid_loss"}, "Loss", "nats")
    assert loss.layout.yaxis.range is None  # other curves keep Plotly's range


# --- notation -----------------------------------------------------------------------------------------------------
def test_the_pages_write_the_projections_as_the_paper_does():
    """The Worked examples said W^Q, W^K, W^V, W^O and the Ablation tab "Wᴼ": one notation, the paper's."""
    other = re.compile(r"W[ᵠᴷⱽᴼ]|W_[QKVO]\b|W_?[qkvo]\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("app_pages", "ui", "viz", "charts", "teaching")
        for path in sorted((ROOT / folder).glob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if other.search(line)
    ]
    assert offenders == []


# --- pages ----------------------------------------------------------------------------------------------------------
def test_the_worked_example_shows_x_as_large_as_its_steps():
    """The layer-norm example's X was only in the data editor, whose numbers are small and, stretched over the page,
    far right of their row names; the class reads the steps' numbers in 15 px cells."""
    at = _app("app_pages/lecture/lecture.py")
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [c["layout"]["title"]["text"] for c in charts]
    x = next(c for c, t in zip(charts, titles, strict=True) if t.startswith("X"))
    assert titles.index(x["layout"]["title"]["text"]) < next(i for i, t in enumerate(titles) if t.startswith("Mean"))
    heatmap = x["data"][0]
    assert heatmap["text"][1][2] == "0.5000" and heatmap["y"] == ["token 0", "token 1", "token 2"]


def _fake_run(root: Path, name: str) -> None:
    """A finished run folder with a long name and one evaluation."""
    run = root / name
    run.mkdir(parents=True)
    lines = [
        {
            "step": 5,
            "loss": 6.0,
            "lr": 1e-4,
            "grad_norm": 1.0,
            "tokens_per_s": 3000.0,
            "tokens_seen": 6000,
            "time_s": 3.0,
        },
        {"step": 10, "valid_loss": 5.9, "valid_bleu": 0.0, "valid_chrf": 1.2, "time_s": 6.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "status.json").write_text(
        json.dumps(
            {
                "state": "finished",
                "pid": 0,
                "step": 10,
                "max_steps": 10,
                "started": "2026-01-01T12:00:00+00:00",
                "updated": "2026-01-01T12:01:00+00:00",
            }
        )
    )
    (run / "config.json").write_text(
        json.dumps({"d_model": 32, "n_heads": 2, "n_encoder_layers": 1, "pos_encoding": "sinusoidal"})
    )


def test_the_runs_table_wraps_instead_of_cutting_off_its_columns(tmp_path, monkeypatch):
    """At 1280 px the runs table's data grid cut off its last columns (started, updated) behind a scroll bar."""
    from streamlit.testing.v1 import AppTest

    from launching import launch as L
    from training import runs as R

    _fake_run(tmp_path, "a-run-with-a-rather-long-name")
    monkeypatch.setenv(R.RUNS_ENV, str(tmp_path))
    monkeypatch.delenv(L.DEMO_ENV, raising=False)
    at = AppTest.from_file(str(ROOT / "app_pages" / "training" / "training.py"), default_timeout=90)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (runs,) = [t for t in at.table if "started" in t.value.columns]
    assert runs.value["name"].tolist() == ["a-run-with-a-rather-long-name"]
    assert not [d for d in at.dataframe if "started" in d.value.columns]
    charts = {
        json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec) for c in at.get("plotly_chart")
    }
    assert charts["Validation BLEU / chrF"]["layout"]["yaxis"]["range"][0] == 0
