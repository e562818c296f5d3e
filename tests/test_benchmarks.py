"""The benchmark scripts run end to end (tiny settings: this checks they work, not how fast anything is)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from benchmarks import decode, train
from benchmarks.table import print_table


def test_print_table_is_markdown_with_any_number_of_columns():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_table([("a", "1", "x"), ("bb", "22", "yy")], header=("n", "v", "w"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("| n ") and set(lines[1]) <= {"|", "-"} and len(lines) == 4
    assert all(line.count("|") == 4 for line in lines)


def test_decode_benchmark_prints_both_tables():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert decode.main(["--tokens", "4", "--repeats", "1", "--test-sentences", "3", "--sweep", "4,8"]) == 0
    text = out.getvalue()
    assert "speed-up of the cache" in text and "Where the cache pays off" in text
    assert "| 8 tokens" in text and "MiB" in text and "with the loop guard (3)" in text


def test_hugging_face_benchmark_builds_a_marian_folder_and_prints_the_table():
    """``python -m benchmarks.hf`` at the tiny shape: the folder it writes loads through our loader and every row
    of the comparison is printed (the real shape is the same code, 74M parameters)."""
    from benchmarks import hf

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert hf.main(["--shape", "tiny", "--repeats", "1", "--tokens", "4", "--no-page"]) == 0
    text = out.getvalue()
    assert "tiny-sized (random)" in text and "one KV-cached decode step" in text and "head-ablation sweep" in text


def test_train_benchmark_prints_a_row_per_impl_precision_and_thread_count():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            train.main(
                ["--config", "tiny", "--batch", "4", "--len", "8", "--steps", "2", "--warmup", "1", "--threads", "1,2"]
            )
            == 0
        )
    text = out.getvalue()
    assert "native bf16: yes" in text or "native bf16: no" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    assert rows[0][-1] == "× vs ours fp32 1 thread"
    cells = {tuple(r[:3]): r[3:] for r in rows[1:]}
    assert set(cells) == {
        (impl, prec, threads)
        for impl in ("ours", "torch.nn.Transformer")
        for prec in ("fp32", "bf16")
        for threads in ("1", "2")
    }
    for steps, ms, tokens_s, ratio in cells.values():
        assert steps == "2" and float(ms.replace(",", "")) > 0 and float(tokens_s.replace(",", "")) > 0
        assert ratio.endswith("×") and float(ratio[:-1]) > 0
    assert cells[("ours", "fp32", "1")][3] == "1.00×"


def test_browser_benchmark_rows_give_median_worst_and_the_goal_verdict():
    from benchmarks.browser import GOALS_S, rows

    times = {name: [0.2, 0.4, 0.3] for name in GOALS_S}
    table = {r[0]: r for r in rows(times)}
    assert set(table) == set(GOALS_S)
    assert table["Next"][1:] == ("0.30", "0.40", "0.3", "yes", "3")
    assert table["first Next on a sentence"][4] == "yes"
    times["layer change"] = [1.0] * 5
    assert {r[0]: r for r in rows(times)}["layer change"][4] == "no (×2.0)"
    assert table["Run to end"][3:5] == ("—", "—")


def test_the_floor_app_counts_each_click():
    """The browser benchmark's floor row times this app's Next exactly as Translate's: it must step like it."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "benchmarks" / "floor_app.py")).run()
    for _ in range(2):
        at.button[0].click().run()
    assert not at.exception and at.markdown[0].value == "Step 2 of 99"


def test_screenshots_make_every_picture_the_docs_link_and_take_only():
    """``python -m benchmarks.screenshots`` writes exactly the files the docs show (no browser needed here)."""
    import re

    import pytest

    from benchmarks.app_server import ROOT
    from benchmarks.screenshots import SHOTS, VIEWPORTS, file_name, parse_args

    made = {file_name(s, v) for s in SHOTS for v in VIEWPORTS}
    linked = set(re.findall(r"screenshots/([\w-]+\.png)", (ROOT / "docs" / "presentation-mode.md").read_text()))
    assert len(made) == 2 * len(SHOTS) == 26 and made == linked
    args = parse_args([])
    assert args.out == ROOT / "docs" / "screenshots" and args.only == [s.name for s in SHOTS]
    assert parse_args(["--out", "/tmp/s", "--only", "translate, attention"]).only == ["translate", "attention"]
    with pytest.raises(SystemExit) as exc:
        parse_args(["--only", "translate,nope"])
    assert exc.value.code == 2


def test_the_browser_stepping_app_sends_every_step_of_the_sentence():
    """benchmarks.client_stepping_app (the measured alternative to a round trip per click) renders one view per
    step of the shared decoding, each with its "Step k of N" line, in a single HTML element."""
    import re

    import pytest
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parent.parent
    if not (root / "checkpoints" / "en-de" / "model.safetensors").is_file():
        pytest.skip("checkpoints/en-de is missing")
    at = AppTest.from_file(str(root / "benchmarks" / "client_stepping_app.py"), default_timeout=120)
    at.query_params["text"] = "The cat sat on the mat."
    at.run()
    assert not at.exception
    (html,) = [e.proto.body for e in at.get("html")]
    total = int(re.search(r"Step 0 of (\d+)", html).group(1))
    assert [int(k) for k in re.findall(r"Step (\d+) of \d+", html)] == list(range(total + 1))


def test_click_cost_compares_two_trees_round_by_round():
    """``benchmarks.click_cost --before TREE``: each view's CPU per click on both servers and the median over the
    rounds of after ÷ before (each round's pair ran back to back); without a second tree, the one-tree table."""
    from benchmarks.click_cost import compared_rows, rows

    results = {
        ("before", "plain"): {"cpu_ms": [20.0, 22.0, 30.0], "wall_s": [0.05, 0.06]},
        ("after", "plain"): {"cpu_ms": [16.0, 22.0, 24.0], "wall_s": [0.05, 0.07]},
        ("before", "attribution"): {"cpu_ms": [30.0, 30.0, 30.0], "wall_s": [0.06]},
        ("after", "attribution"): {"cpu_ms": [24.0, 24.0, 27.0], "wall_s": [0.06]},
    }
    assert compared_rows(results) == [
        ("plain", "24.0 (20.0–30.0)", "20.7 (16.0–24.0)", "0.800"),
        ("attribution", "30.0 (30.0–30.0)", "25.0 (24.0–27.0)", "0.800"),
    ]
    one = {key: value for key, value in results.items() if key[0] == "after"}
    assert rows(one) == [("plain", "20.7 (16.0–24.0)", "1.00", "60"), ("attribution", "25.0 (24.0–27.0)", "1.21", "60")]
