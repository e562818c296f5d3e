"""``python -m tools.card``: a shipped card carried across one more leg adds up, and bad inputs get a message."""

import json
from pathlib import Path

import pytest
from card_helpers import START, VALID, leg_run, report_files, suite_report, write_config

from tools.card import add_sets, append_leg, card_pages, main, markdown_rows
from tools.card_inputs import CardError

ROOT = Path(__file__).resolve().parents[1]


def test_a_leg_adds_its_steps_tokens_and_minutes_to_the_lineage(tmp_path):
    run = leg_run(tmp_path)
    new = append_leg(
        START,
        run,
        8,
        "leg 7 soup",
        VALID,
        suite_report("greedy"),
        suite_report("beam"),
        "the soup",
        cooldown_from=1500,
        date="2026-11-26",
    )
    assert new["step"] == 22631 + 3000
    assert new["tokens_seen"] == 103_638_498 + 3000 * 4000
    assert new["train_minutes"] == round(660.6 + 3000 * 0.7 / 60, 1)
    assert new["total"] == {"tokens_seen": new["tokens_seen"], "train_minutes": new["train_minutes"]}
    assert new["valid"]["loss"] == 1.80 and new["valid"]["sentences"] == 1600
    assert new["test"] == {
        "split": "Multi30K test2016",
        "sentences": 10,
        "bleu": 38.1,
        "chrf": 63.0,
        "decoding": "greedy",
    }
    assert new["beam"]["ding test"]["chrf"] == 38.2
    assert new["beam"]["decoding"] == "beam 8, length penalty alpha 1.0"  # as the report says, not assumed
    assert new["suite"]["goal_beam"]["I am hungry."] == {"beam": "Ich habe Hunger."}
    # every set's repeated words, not one set's: the goal is about each test set
    assert new["suite"]["repeats"]["everyday"] == {"checked": 10, "longest": 2, "repeating": 1, "looping": 0}
    assert set(new["suite"]["repeats_beam"]) == {"multi30k test2016", "everyday", "ding test"}
    labels = [r["leg"] for r in new["legs"]]
    assert labels[1:4] == [
        "leg 8, from leg 7 soup · step 23,631",
        "leg 8, from leg 7 soup (cooldown) · step 24,631",
        "leg 8, from leg 7 soup (cooldown) · step 25,631",
    ]
    assert [r["shipped"] for r in new["legs"]] == [False, False, False, False, True]
    assert new["legs"][2]["valid_loss"] == 1.7  # the evaluation written last wins
    assert START["legs"][0]["shipped"] is True and START["step"] == 22631  # the input card is untouched


def test_the_card_counts_the_weights_the_leg_trained_and_says_when_the_model_grew(tmp_path):
    run = leg_run(tmp_path)
    small = append_leg(START, run, 8, "leg 7 soup", VALID, suite_report("greedy"), suite_report("beam"), "the soup")
    # 16·100 tied embeddings; per encoder layer 4·(16·16+16) + (16·32+32) + (32·16+16) + 2·2·16, per decoder layer
    # one attention and one norm more; the final norms 2·2·16
    enc, dec = 1088 + 1072 + 64, 2 * 1088 + 1072 + 96
    assert small["parameters"] == 1600 + 2 * enc + 2 * dec + 64 and "architecture_changes" not in small
    write_config(run, layers=4)  # the leg trained a grown copy: python -m tools.grow
    grown = append_leg(small, run, 9, "leg 8", VALID, suite_report("greedy"), suite_report("beam"), "the grown model")
    assert grown["parameters"] == small["parameters"] + 2 * enc + 2 * dec
    assert grown["architecture_changes"] == [
        {
            "leg": 9,
            "parameters": [small["parameters"], grown["parameters"]],
            "n_encoder_layers": 4,
            "n_decoder_layers": 4,
        }
    ]
    (run / "config.json").unlink()
    with pytest.raises(CardError, match="config.json"):
        append_leg(START, run, 8, "x", VALID, suite_report("greedy"), suite_report("beam"), "y")


def test_the_shipped_card_carries_forward(tmp_path):
    """The card in checkpoints/en-de has the shape the command reads: its legs stay, one row is shipped."""
    card = json.loads((ROOT / "checkpoints" / "en-de" / "card.json").read_text(encoding="utf-8"))
    new = append_leg(
        card, leg_run(tmp_path), 99, "the shipped model", VALID, suite_report("greedy"), suite_report("beam"), "x"
    )
    assert len(new["legs"]) == len(card["legs"]) + 4
    assert sum(r["shipped"] for r in new["legs"]) == 1
    assert new["step"] == card["step"] + 3000
    assert new["data"]["corpora"] == card["data"]["corpora"]


def test_the_command_writes_the_card_and_bad_inputs_get_a_message(tmp_path, capsys):
    run = leg_run(tmp_path)
    files = report_files(tmp_path)
    args = [
        "--card",
        str(files["card"]),
        "--run",
        str(run),
        "--leg",
        "8",
        "--parent",
        "leg 7 soup",
        "--valid",
        str(files["valid"]),
        "--greedy",
        str(files["greedy"]),
        "--beam",
        str(files["beam"]),
        "--selected-by",
        "the soup",
        "--out",
        str(tmp_path / "out.json"),
    ]
    assert main(args) == 0
    assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["step"] == 25631
    out = capsys.readouterr().out
    assert "step 25,631" in out and " CPU-min, " in out  # START names no GPU
    files["card"].write_text(json.dumps({**START, "device": "cuda (NVIDIA H200)"}), encoding="utf-8")
    assert main(args) == 0 and " GPU-min, " in capsys.readouterr().out
    # the rows belong in the card beside card.json, the leg's story in the history beside it
    assert f"in {tmp_path / 'README.md'} " in out and f"goes to {tmp_path / 'HISTORY.md'}" in out
    # the leg's three evaluations as README table rows; the shipped row (no valid loss) is left out
    assert [line for line in out.splitlines() if line.startswith("|")] == [
        "| leg 8, from leg 7 soup · step 23,631 | 672.3 | 107.6M | 1.9000 | 51.0 |",
        "| leg 8, from leg 7 soup · step 24,631 | 683.9 | 111.6M | 1.7000 | 52.5 |",
        "| leg 8, from leg 7 soup · step 25,631 | 695.6 | 115.6M | 1.7000 | 53.0 |",
    ]

    assert main([*args[:2], "--run", str(tmp_path / "gone"), *args[4:]]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err
    files["card"].write_text("{not json", encoding="utf-8")
    assert main(args) == 2
    assert "not readable JSON" in capsys.readouterr().err
    files["card"].write_text(json.dumps(START), encoding="utf-8")
    assert main([*args[:8], "--valid", str(files["valid"]), "--greedy", str(files["beam"]), *args[12:]]) == 2
    assert "no greedy scores" in capsys.readouterr().err
    files["beam"].write_text(json.dumps({**suite_report("beam"), "decoding": {}}), encoding="utf-8")
    assert main(args) == 2
    assert "beam width and alpha" in capsys.readouterr().err


def test_the_curve_rows_fit_the_shipped_cards_curve_table():
    """The printed rows have the columns of the curve table under Training procedure in checkpoints/en-de/README.md,
    the page card_pages names for the shipped card."""
    readme, history = card_pages(ROOT / "checkpoints" / "en-de" / "card.json")
    assert readme.is_file() and history.is_file()
    text = readme.read_text(encoding="utf-8")
    section = text[text.index("### Training procedure") :]
    header = next(line for line in section.splitlines() if line.startswith("| step |"))
    row = markdown_rows(
        [{"leg": "x", "train_minutes": 1.0, "tokens_seen": 10**6, "valid_loss": 2.0, "valid_chrf": 40.0}]
    )[0]
    assert header.count("|") == row.count("|")


def _flores(strategy: str, beam: int = 8) -> dict:
    report = suite_report(strategy)
    report["sets"][0]["scores"][strategy] = {"bleu": 1.0, "chrf": 1.0}  # a re-measured set must not replace the card's
    report["sets"].append(
        {
            "name": "flores200-devtest",
            "sentences": 1012,
            "references": 1012,
            "scores": {strategy: {"bleu": 4.6, "chrf": 30.6}},
            "repeats": {strategy: {"checked": 1000, "longest": 7, "repeating": 72, "looping": 21}},
        }
    )
    report["decoding"]["beam"] = beam
    return report


def test_sets_added_after_shipping_join_the_card_and_nothing_else_changes(tmp_path, capsys):
    run = leg_run(tmp_path)
    card = append_leg(START, run, 8, "leg 7 soup", VALID, suite_report("greedy"), suite_report("beam"), "the soup")
    new, added = add_sets(card, _flores("greedy"), _flores("beam"))
    assert added == ["flores200-devtest (greedy)", "flores200-devtest (beam)"]
    assert new["suite"]["greedy"]["flores200-devtest"] == {"sentences": 1012, "bleu": 4.6, "chrf": 30.6}
    assert new["beam"]["flores200-devtest"]["chrf"] == 30.6
    assert new["suite"]["repeats"]["flores200-devtest"]["looping"] == 21
    assert new["suite"]["greedy"]["multi30k test2016"] == card["suite"]["greedy"]["multi30k test2016"]
    assert {k: v for k, v in new.items() if k not in ("suite", "beam")} == {
        k: v for k, v in card.items() if k not in ("suite", "beam")
    }
    assert "flores200-devtest" not in card["suite"]["greedy"]  # the card given is untouched
    old = dict(card, suite=dict(card["suite"], repeats={"greedy": {"longest": 1, "over_three": 0}}))
    assert add_sets(old, _flores("greedy"), _flores("beam"))[0]["suite"]["repeats"] == old["suite"]["repeats"]
    with pytest.raises(CardError, match="decoded with beam 4"):
        add_sets(card, _flores("greedy"), _flores("beam", beam=4))
    with pytest.raises(CardError, match="no suite scores"):
        add_sets(START, _flores("greedy"), _flores("beam"))
    paths = {}
    for name, value in (("card", card), ("greedy", _flores("greedy")), ("beam", _flores("beam"))):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(value), encoding="utf-8")
    out = tmp_path / "new.json"
    assert (
        main(
            [
                "--card",
                str(paths["card"]),
                "--add-sets",
                "--greedy",
                str(paths["greedy"]),
                "--beam",
                str(paths["beam"]),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["beam"]["flores200-devtest"]["bleu"] == 4.6
    assert "added flores200-devtest (greedy), flores200-devtest (beam)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(
            [
                "--card",
                str(paths["card"]),
                "--greedy",
                str(paths["greedy"]),
                "--beam",
                str(paths["beam"]),
                "--out",
                str(out),
            ]
        )
    assert "a leg needs --run, --leg, --parent, --valid, --selected-by" in capsys.readouterr().err


def test_a_cpu_leg_after_a_gpu_run_counts_its_minutes_apart_and_keeps_its_own_valid_curve(tmp_path):
    """A GPU-trained card continued on two CPU cores: the GPU's minutes stay, the CPU's go to cpu_minutes (a sum
    of the two would call 100 CPU-minutes GPU-minutes), and a leg whose trainer scored another valid set keeps its
    curve apart from the GPU run's points."""
    gpu = {
        **START,
        "train_minutes": 8.2,
        "device": "cuda:0",
        "legs": [
            {
                "leg": "GPU run · step 4,940",
                "train_minutes": 8.2,
                "tokens_seen": 103_638_498,
                "valid_loss": 1.7,
                "valid_chrf": 54.2,
                "shipped": False,
            }
        ],
    }
    new = append_leg(
        gpu,
        leg_run(tmp_path),
        2,
        "the GPU run",
        VALID,
        suite_report("greedy"),
        suite_report("beam"),
        "the soup",
        machine="cpu",
        own_valid="the leg's mixture valid",
    )
    assert new["train_minutes"] == 8.2 and new["cpu_minutes"] == round(3000 * 0.7 / 60, 1)
    assert new["total"] == {"tokens_seen": new["tokens_seen"], "train_minutes": 8.2, "cpu_minutes": 35.0}
    curve = new["leg_curves"]["leg2"]
    assert curve["valid_set"] == "the leg's mixture valid" and len(curve["rows"]) == 3
    assert all("cpu_minutes" in r and "train_minutes" not in r for r in curve["rows"])
    assert [r["leg"] for r in new["legs"]] == ["GPU run · step 4,940", "leg 2 · shipped"]
    assert new["legs"][-1]["cpu_minutes"] == 35.0 and new["legs"][-1]["shipped"] is True
    assert "flores_chrf" not in new["legs"][-1]  # the reports score no FLORES here
    greedy = suite_report("greedy")
    greedy["sets"].append(
        {"name": "flores200-devtest", "sentences": 1012, "scores": {"greedy": {"bleu": 6.2, "chrf": 33.7}}}
    )
    with_flores = append_leg(
        gpu, tmp_path / "run", 2, "the GPU run", VALID, greedy, suite_report("beam"), "x", machine="cpu"
    )
    assert with_flores["legs"][-1]["flores_chrf"] == 33.7  # the chart draws the general domain beside the rest
    (tmp_path / "b").mkdir()
    again = append_leg(
        new,
        leg_run(tmp_path / "b"),
        3,
        "leg 2",
        VALID,
        suite_report("greedy"),
        suite_report("beam"),
        "x",
        machine="cpu",
    )
    assert again["cpu_minutes"] == 70.0 and again["train_minutes"] == 8.2  # a second CPU leg adds to the first
