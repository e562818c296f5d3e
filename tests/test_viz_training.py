"""The overlaid training curves of several runs (``charts/training.py``, the records read by
``charts/run_metrics.py``): one trace per run on every chart, the same colour for a run everywhere, the three x axes,
and bad ``metrics.jsonl`` records skipped."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from charts.run_metrics import X_AXES, run_series
from charts.training import (
    LEG_SCORES,
    METRICS,
    PALETTE,
    compare_figure,
    compare_figures,
    legs_figure,
    run_figure,
    run_styles,
)
from training.runs import read_jsonl

ROOT = Path(__file__).resolve().parent.parent


def log_line(step, loss=5.0, tokens=None, time_s=None, **extra):
    return {
        "step": step,
        "epoch": 0,
        "loss": loss,
        "lr": 1e-4 * step / 50,
        "grad_norm": 1.0,
        "tokens_per_s": 3000.0,
        "tokens_seen": 1000 * step if tokens is None else tokens,
        "time_s": step * 0.6 if time_s is None else time_s,
        **extra,
    }


def eval_line(step, valid_loss=4.0, time_s=None):
    return {
        "step": step,
        "valid_loss": valid_loss,
        "valid_bleu": 1.5,
        "valid_chrf": 12.0,
        "time_s": step * 0.6 + 3 if time_s is None else time_s,
    }


RUN_A = [
    log_line(50, 8.0),
    log_line(100, 7.0),
    eval_line(100, 6.5),
    log_line(150, 6.0),
    log_line(200, 5.5),
    eval_line(200, 5.8),
    {"step": 200, "test_bleu": 2.0, "test_chrf": 20.0},
    {"step": 200, "event": "stopped", "reason": "max_steps"},
]
RUN_B = [log_line(50, 8.5, tokens=2000 * 50), log_line(100, 7.5, tokens=2000 * 100)]  # no evaluation yet


def test_one_trace_per_run_with_its_id_and_one_colour_everywhere():
    figs = compare_figures({"a": RUN_A, "b": RUN_B})
    assert set(figs) == set(METRICS)
    for metric, fig in figs.items():
        assert [t.legendgroup for t in fig.data] == ["a", "b"], metric
        assert [t.line.color for t in fig.data] == list(PALETTE[:2]), metric
        assert fig.layout.title.text and fig.layout.xaxis.title.text == X_AXES["step"]
        assert fig.layout.yaxis.title.text == METRICS[metric][1]
    loss = figs["loss"]
    assert [t.name for t in loss.data] == ["a", "b"]
    assert list(loss.data[0].x) == [50, 100, 150, 200] and list(loss.data[0].y) == [8.0, 7.0, 6.0, 5.5]
    valid = figs["valid_loss"]
    assert list(valid.data[0].x) == [100, 200] and list(valid.data[0].y) == [6.5, 5.8]
    assert list(valid.data[1].x) == [None] and valid.data[1].name == "b (no evaluation yet)"  # in the legend


def test_styles_follow_the_given_order_not_the_dict():
    styles = run_styles(["x", "b", "a"])
    fig = compare_figure({"a": RUN_A, "b": RUN_B}, "loss", styles=styles)
    assert [t.line.color for t in fig.data] == [PALETTE[2], PALETTE[1]]
    many = run_styles([f"r{i}" for i in range(len(PALETTE) + 1)])
    assert many["r0"]["color"] == many[f"r{len(PALETTE)}"]["color"]
    assert many["r0"]["dash"] != many[f"r{len(PALETTE)}"]["dash"]  # same colour again, other dash


def test_x_axis_tokens_seen_interpolates_evaluation_lines():
    recs = [log_line(100, tokens=10_000), log_line(200, tokens=30_000), eval_line(150), eval_line(250), eval_line(0)]
    xs, ys = run_series(recs, "valid_loss", "tokens seen")
    assert xs == [0.0, 20_000.0, 30_000.0]  # step 0 = 0 tokens; 150 between the logs; past the last: the last
    xs, _ = run_series(recs, "loss", "tokens seen")
    assert xs == [10_000, 30_000]
    fig = compare_figure({"a": recs}, "valid_bleu", "tokens seen")
    assert fig.layout.xaxis.title.text == X_AXES["tokens seen"] and list(fig.data[0].x) == [0, 20_000, 30_000]
    # a trainer that never logged a token count: evaluation lines cannot be placed, nothing is invented
    assert run_series([eval_line(100)], "valid_loss", "tokens seen") == ([], [])


def test_x_axis_wall_time_in_minutes():
    recs = [
        log_line(100, time_s=60.0),
        log_line(200, time_s=180.0),
        eval_line(200, time_s=240.0),
        {"step": 300, "loss": 4.0},
    ]  # no time_s: left out of the time axis only
    assert run_series(recs, "loss", "wall time (minutes)") == ([1.0, 3.0], [5.0, 5.0])
    assert run_series(recs, "valid_loss", "wall time (minutes)") == ([4.0], [4.0])
    assert run_series(recs, "loss", "step")[0] == [100, 200, 300]
    fig = compare_figure({"a": recs}, "loss", "wall time (minutes)")
    assert "minutes" in fig.layout.xaxis.title.text


def test_bad_records_are_skipped():
    recs = [
        "garbage",
        None,
        3,
        [1, 2],
        {},
        {"loss": 1.0},
        {"step": "7", "loss": 1.0},
        {"step": True, "loss": 1.0},
        {"step": -5, "loss": 1.0},
        {"step": 10, "loss": "nan"},
        {"step": 11, "loss": float("nan")},
        {"step": 12, "loss": float("inf")},
        {"step": 13, "loss": True},
        {"step": 14.5, "loss": 2.0},
        log_line(20, 3.0),
    ]
    for x in X_AXES:
        xs, ys = run_series(recs, "loss", x)
        assert len(xs) == len(ys) == 1 and ys == [3.0], x
    assert all(math.isfinite(v) for v in run_series(recs, "lr")[1])
    fig = compare_figure({"a": recs}, "valid_loss")
    assert list(fig.data[0].x) == [None] and fig.layout.annotations[0].text == "No evaluation yet"


def test_a_step_logged_twice_keeps_the_last_record():
    # a run killed after step 200 and resumed from its step-100 save logs 150 and 200 again
    recs = [log_line(100, 7.0), log_line(150, 6.0), log_line(200, 5.0), log_line(150, 6.2), log_line(200, 5.1)]
    assert run_series(recs, "loss") == ([100, 150, 200], [7.0, 6.2, 5.1])


def test_unknown_metric_or_axis_is_an_error_and_empty_input_is_fine():
    with pytest.raises(ValueError, match="x axis"):
        run_series(RUN_A, "loss", "epochs")
    with pytest.raises(ValueError, match="metric"):
        compare_figure({"a": RUN_A}, "perplexity")
    assert run_series([], "loss") == ([], [])
    fig = compare_figure({}, "loss")
    assert len(fig.data) == 0 and fig.layout.annotations[0].text == "No run selected"


def test_the_real_trainer_log_has_every_curve(tmp_path):
    """The record keys this module reads are the ones the trainer (``trainer/loop.py``) writes: a tiny real run
    (12 steps, evaluations at 6 and 12) has points on every chart against every x axis."""
    from train_helpers import TINY, run_main

    from trainer import train

    rc, _, err = run_main(train.main, ["--out", tmp_path / "run", "--max-steps", "12", *TINY])
    assert rc == 0, err
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    for x in X_AXES:
        for metric in METRICS:
            xs, ys = run_series(records, metric, x)
            assert xs and len(xs) == len(ys), (metric, x)
            assert xs == sorted(xs), (metric, x)  # cumulative tokens and time grow with the step


def test_run_figure_one_run_several_series():
    """The Training page's live charts: one trace per series in palette order, bad records skipped, a series
    without points kept in the legend, room for the tick labels, and a log axis only over a wide range."""
    records = [
        {"step": 10, "loss": 8.0, "lr": 2e-4},
        {"step": 20, "loss": 7.5, "lr": 4e-4},
        "garbage",
        {"step": 20, "valid_loss": 7.4, "valid_ppl": 1636.0},
        {"step": "x", "loss": 1.0},
        {"step": 30, "loss": float("nan")},
    ]
    fig = run_figure(records, {"train loss": "loss", "valid loss": "valid_loss", "BLEU": "valid_bleu"}, "Loss", "nats")
    train, valid, bleu = fig.data
    assert list(train.x) == [10, 20] and list(train.y) == [8.0, 7.5] and list(valid.x) == [20]
    assert bleu.name == "BLEU (no points yet)" and list(bleu.x) == [None]
    assert [t.line.color for t in fig.data] == list(PALETTE[:3]) and fig.layout.showlegend
    assert fig.layout.yaxis.automargin and fig.layout.xaxis.automargin and fig.layout.xaxis.title.text == "step"
    lr = run_figure(records, {"lr": "lr"}, "LR", "lr")
    assert lr.layout.yaxis.exponentformat == "e" and not lr.layout.showlegend  # 2e-4, not 200μ; title names it
    narrow = run_figure(records, {"ppl": "valid_ppl"}, "Perplexity", "ppl", log_y=True)
    assert narrow.layout.yaxis.type != "log"  # one point: a log axis would have no readable ticks
    wide = run_figure(
        [{"step": 1, "valid_ppl": 2000.0}, {"step": 2, "valid_ppl": 90.0}],
        {"ppl": "valid_ppl"},
        "Perplexity",
        "ppl",
        log_y=True,
    )
    assert wide.layout.yaxis.type == "log"
    assert len(run_figure([], {"loss": "loss"}, "Loss", "nats").data) == 1  # nothing logged yet: no error


def test_legend_sits_under_the_axis_title_not_on_it():
    """The legend at y = −0.22 of the plot covered the x-axis title on the Training charts."""
    from viz.theme import AXIS_ROOM, LEGEND_ROW

    runs = {f"run-{i}": [{"step": s, "loss": 5.0 - s / 100} for s in (10, 20, 30)] for i in range(12)}
    fig = compare_figure(runs, "loss")
    legend = fig.layout.legend
    assert legend.yref == "container" and legend.y == 0 and legend.yanchor == "bottom"
    assert legend.font.size >= 14
    assert fig.layout.margin.b >= AXIS_ROOM + 2 * LEGEND_ROW  # twelve runs take two legend rows, under the title
    one = run_figure(runs["run-0"], {"train loss": "loss", "valid loss": "valid_loss"}, "Loss", "nats")
    assert one.layout.legend.yref == "container" and one.layout.margin.b >= AXIS_ROOM + LEGEND_ROW


# --- a checkpoint's training legs --------------------------------------------------------------------------------
LEGS = [
    {
        "leg": "leg 1",
        "train_minutes": 100,
        "tokens_seen": 13e6,
        "valid_chrf": 24.7,
        "everyday_chrf": 35.1,
        "test_chrf": 23.7,
        "flores_chrf": 12.0,
        "shipped": True,
    },
    {
        "leg": "leg 2",
        "train_minutes": 215,
        "tokens_seen": 19e6,
        "valid_chrf": 26.0,
        "everyday_chrf": 37.7,
        "test_chrf": 24.8,
        "flores_chrf": 13.0,
        "shipped": True,
    },
    {
        "leg": "leg 3 (tried)",
        "train_minutes": 300,
        "tokens_seen": 25e6,
        "valid_chrf": 26.1,
        "everyday_chrf": 37.0,
        "shipped": False,
    },
    "garbage",
    {"leg": "no tokens", "train_minutes": 9, "valid_chrf": 99.0},
    {"leg": "bad", "tokens_seen": 5e6, "valid_chrf": math.nan},
]


def test_legs_figure_draws_each_score_against_cumulative_tokens_and_tried_legs_hollow():
    fig = legs_figure(LEGS)
    shipped = {t.name: t for t in fig.data if t.showlegend is not False}
    assert set(shipped) == set(LEG_SCORES.values())  # the test chrF has only shipped points: no dotted part
    assert list(shipped["Ding valid chrF"].x) == [13, 19] and list(shipped["Ding valid chrF"].y) == [24.7, 26.0]
    tried = [t for t in fig.data if t.showlegend is False]
    assert len(tried) == 2 and all(t.line.dash == "dot" for t in tried)  # valid and everyday went on to leg 3
    valid_tried = next(t for t in tried if t.legendgroup == "valid_chrf")
    assert list(valid_tried.x) == [19, 25] and valid_tried.marker.color == "white"  # from the last shipped leg
    assert [c[0] for c in valid_tried.customdata] == ["leg 2", "leg 3 (tried)"]
    assert fig.layout.xaxis.title.text.startswith("tokens of training (millions)")


def test_legs_figure_without_legs_says_so():
    fig = legs_figure([{"leg": "x"}, None])
    assert not fig.data and "no training legs" in fig.layout.annotations[0].text


def test_a_lone_point_is_ticked_at_whole_steps():
    """Around a run's first evaluation the step axis read "12, 12.5, 13": steps and tokens tick at whole numbers."""
    from charts.training import compare_figure, run_figure

    records = [{"step": 13, "valid_loss": 6.4, "tokens_seen": 2, "time_s": 3.0}]
    assert run_figure(records, {"valid loss": "valid_loss"}, "Loss", "nats").layout.xaxis.dtick == 1
    assert compare_figure({"r": records}, "valid_loss").layout.xaxis.dtick == 1
    assert compare_figure({"r": records}, "valid_loss", x="wall time (minutes)").layout.xaxis.dtick is None
    wide = records + [{"step": 300, "valid_loss": 5.0}]
    assert run_figure(wide, {"valid loss": "valid_loss"}, "Loss", "nats").layout.xaxis.dtick is None


def test_legs_figure_takes_the_cards_labels_for_its_sets():
    """A lineage scored on other sets names them (a card's ``legs_labels``); unknown keys are ignored."""
    legs = [{"leg": "a", "train_minutes": 10, "tokens_seen": 1e6, "valid_chrf": 30.0, "test_chrf": 28.0}]
    fig = legs_figure(legs, labels={"valid_chrf": "mixture valid chrF", "bogus": "x"})
    assert {t.name for t in fig.data} == {"mixture valid chrF", LEG_SCORES["test_chrf"]}


def test_the_curve_runs_through_the_evaluations_before_the_shipped_model():
    """A card marks only the model shipped now: the trainer's evaluations and the models shipped before it are the
    curve that led there, drawn solid up to it, never a dotted branch back from it to the first evaluation."""
    legs = [
        {"leg": f"step {s}", "tokens_seen": t, "valid_chrf": c, "shipped": False}
        for s, t, c in ((1000, 2.2e7, 41.1), (4940, 1.075e8, 54.2))
    ]
    legs.append({"leg": "the soup", "tokens_seen": 1.112e8, "valid_chrf": 54.16, "shipped": True})
    legs.append({"leg": "tried after it", "tokens_seen": 1.15e8, "valid_chrf": 54.5, "shipped": False})
    fig = legs_figure(legs)
    solid = next(t for t in fig.data if t.showlegend is not False)
    dotted = next(t for t in fig.data if t.showlegend is False)
    assert list(solid.x) == [22, 107.5, 111.2] and solid.line.dash is None
    assert list(dotted.x) == [111.2, 115] and dotted.line.dash == "dot"


def test_legs_figure_counts_tokens_so_a_gpu_run_and_a_cpu_leg_after_it_share_one_axis():
    """A lineage that began on a GPU and went on on two CPU cores: its minutes differ ~100-fold between the two,
    its tokens do not, so the axis and the hover count tokens and never name a machine's minutes."""
    legs = [
        {"leg": "GPU run's end", "train_minutes": 8.2, "tokens_seen": 1.075e8, "everyday_chrf": 79.0},
        {"leg": "CPU leg soup", "train_minutes": 89.0, "tokens_seen": 1.112e8, "everyday_chrf": 78.1},
    ]
    fig = legs_figure(legs)
    assert list(fig.data[0].x) == [107.5, 111.2]
    assert "minutes" not in fig.layout.xaxis.title.text and "M tokens" in fig.data[0].hovertemplate
    assert "minutes" not in fig.data[0].hovertemplate


def test_legs_figure_draws_a_score_measured_only_along_the_way_as_its_curve():
    """The trainer's valid chrF is taken at every evaluation of a run and never on the shipped model itself: all of
    its rows say shipped False, and the chart once drew none of them (an empty series beside two lone dots)."""
    legs = [
        {"leg": f"step {s}", "train_minutes": m, "tokens_seen": 1e7 * m, "valid_chrf": c, "shipped": False}
        for s, m, c in ((1000, 1.8, 41.1), (2000, 3.3, 49.5), (4940, 8.2, 54.2))
    ]
    legs.append({"leg": "shipped", "train_minutes": 8.2, "tokens_seen": 1e8, "everyday_chrf": 79.0, "shipped": True})
    fig = legs_figure(legs)
    valid = [t for t in fig.data if t.name == LEG_SCORES["valid_chrf"]]
    assert len(valid) == 1 and list(valid[0].x) == [18, 33, 82] and list(valid[0].y) == [41.1, 49.5, 54.2]
    assert valid[0].line.dash is None  # solid: the curve, not a tried-and-dropped branch
