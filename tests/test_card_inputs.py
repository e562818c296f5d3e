"""``tools.card_inputs``: a leg's run folders read as the card counts them (one leg over several runs, thinned
rows, a run without evaluations refused)."""

import json

import pytest
from card_helpers import START, VALID, leg_run, report_files, suite_report, write_config

from tools.card import append_leg, main
from tools.card_inputs import CardError, leg_rows, read_metrics


def test_a_leg_that_went_on_as_a_second_run_counts_on_from_the_first(tmp_path):
    """A leg carried over two sessions as two runs (the second --init-from the first's end, its steps from 0) is
    one leg: steps, tokens and minutes of the second run count on from the first's, and the command takes both."""
    first = leg_run(tmp_path)
    second = leg_run(tmp_path / "next")
    write_config(second, layers=3)
    rows, total = leg_rows([first, second], START, 8, "x", cooldown_from=5500)
    assert total == {
        "step": 22631 + 6000,
        "tokens_seen": 103_638_498 + 6000 * 4000,
        "train_minutes": round(660.6 + 6000 * 0.7 / 60, 1),
    }
    steps = [int(r["leg"].rsplit("step ", 1)[1].replace(",", "")) - 22631 for r in rows]
    assert steps == [1000, 2000, 3000, 4000, 5000, 6000]
    assert [r["tokens_seen"] - 103_638_498 for r in rows] == [s * 4000 for s in steps]
    assert ["(cooldown)" in r["leg"] for r in rows] == [False] * 5 + [True]
    assert rows[4]["valid_loss"] == 1.7  # the second run's re-written evaluation of its step 2,000
    card = append_leg(START, [first, second], 8, "x", VALID, suite_report("greedy"), suite_report("beam"), "y")
    alone = append_leg(START, first, 8, "x", VALID, suite_report("greedy"), suite_report("beam"), "y")
    assert card["step"] == 28631 and card["parameters"] > alone["parameters"]  # the last run's model
    files = report_files(tmp_path)
    out = tmp_path / "out.json"
    assert (
        main(
            [
                "--card",
                str(files["card"]),
                "--run",
                str(first),
                str(second),
                "--leg",
                "8",
                "--parent",
                "x",
                "--valid",
                str(files["valid"]),
                "--greedy",
                str(files["greedy"]),
                "--beam",
                str(files["beam"]),
                "--selected-by",
                "y",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text(encoding="utf-8"))["step"] == 28631
    with pytest.raises(CardError, match="no run folder"):
        leg_rows([], START, 8, "x")


def test_rows_can_be_thinned_but_the_last_evaluation_always_stays(tmp_path):
    rows, total = leg_rows(leg_run(tmp_path), START, 8, "x", every=2000)
    assert [r["leg"].rsplit("step ", 1)[1] for r in rows] == ["24,631", "25,631"]
    assert total["step"] == 25631


def test_a_run_without_evaluations_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 50, "tokens_seen": 10, "loss": 3.0}\n', encoding="utf-8")
    with pytest.raises(CardError, match="no evaluation"):
        read_metrics(run)
