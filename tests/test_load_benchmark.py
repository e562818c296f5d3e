"""The lecture-hall load benchmark (``python -m benchmarks.load``): its protocol helpers on ForwardMsgs built here,
its numbers, its localhost guard, and a tiny run of two scenarios against a served app (no think time, two
actions per visitor: every action timed, no error, and every step shown the one the visitor's clicks reach).
Nothing here asserts a speed."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from benchmarks.app_server import ServerError, serve
from benchmarks.load import Options, Record, app_dir_env, options, parse_args, run_levels, server_env
from benchmarks.load_client import FINISHED, NotLocalError, Outcome, local_base
from benchmarks.load_scenarios import StepThrough, demo_sentences
from benchmarks.load_stats import ProcessProbe, errors_cell, level_row, percentile
from benchmarks.page_view import PageView

ROOT = Path(__file__).resolve().parent.parent
#: It starts a server: with the browser tests, one after another on one xdist worker (see test_many_visitors.py).
pytestmark = pytest.mark.xdist_group("browser")


# --- protocol helpers, on messages built here -------------------------------------------------------------------
def element(path: list[int], kind: str, fragment_id: str = "", **fields) -> ForwardMsg:
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = path
    msg.delta.fragment_id = fragment_id
    proto = getattr(msg.delta.new_element, kind)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(proto, name).extend(value)
        else:
            setattr(proto, name, value)
    return msg


def block(path: list[int], kind: str, **fields) -> ForwardMsg:
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = path
    proto = getattr(msg.delta.add_block, kind)
    proto.SetInParent()
    for name, value in fields.items():
        setattr(proto, name, value)
    return msg


def finished(status: int = FINISHED) -> ForwardMsg:
    msg = ForwardMsg()
    msg.script_finished = status
    return msg


def run(view: PageView, msgs: list[ForwardMsg], fragment_id: str = "") -> list[int | None]:
    view.begin_run()
    statuses = [view.apply(m) for m in msgs]
    view.end_run(fragment_id)
    return statuses


def test_a_run_gives_widgets_by_label_with_their_values_and_the_step_shown():
    view = PageView()
    statuses = run(
        view,
        [
            element([0, 0], "button", id="b-next", label="Next"),
            element([0, 1], "selectbox", id="s-layer", label="Layer", options=["layer 1", "layer 2"], default=1),
            element([0, 2], "checkbox", id="c-words", label="Word level", default=False),
            element([0, 3], "markdown", body="**Step 2 of 8** · KV cache: 1.0 KiB"),
            block([0, 4], "tab_container", id="t-tab", default_tab_index=0),
            block([0, 4, 0], "tab", label="Heads"),
            block([0, 4, 1], "tab", label="Summaries"),
            finished(),
        ],
    )
    assert statuses[-1] == FINISHED and statuses[:-1] == [None] * 7
    assert view.find("Next").id == "b-next" and view.find("Layer", "selectbox").id == "s-layer"
    assert view.find("Missing") is None and view.find("Next", "selectbox") is None
    assert view.step == (2, 8) and view.exceptions == []
    tabs = view.widgets["t-tab"]
    assert tabs.kind == "tabs" and tabs.options == ["Heads", "Summaries"]
    assert view.values == {
        "s-layer": ("string_value", "layer 2"),
        "c-words": ("bool_value", False),
        "t-tab": ("string_value", "Heads"),
    }

    states = {w.id: w for w in view.rerun(trigger=view.find("Next")).rerun_script.widget_states.widgets}
    assert states["b-next"].trigger_value is True
    assert states["s-layer"].string_value == "layer 2" and states["t-tab"].string_value == "Heads"
    assert states["c-words"].WhichOneof("value") == "bool_value"


def test_a_fragment_run_keeps_the_widgets_outside_it_and_a_value_the_server_sets_wins():
    view = PageView()
    run(
        view,
        [
            element([0, 0], "button", id="b-next", label="Next"),
            element([0, 1, 0], "selectbox", "frag", id="s-head", label="Head", options=["mean", "head 1"], default=0),
        ],
    )
    view.values["s-head"] = ("string_value", "head 1")  # the visitor chose it
    run(
        view,
        [
            element([0, 1, 0], "selectbox", "frag", id="s-head", label="Head", options=["mean", "head 1"], default=0),
            finished(),
        ],
        fragment_id="frag",
    )
    assert set(view.widgets) == {"b-next", "s-head"} and view.values["s-head"] == ("string_value", "head 1")
    run(
        view,
        [
            element(
                [0, 0],
                "selectbox",
                id="s-head",
                label="Head",
                options=["mean", "head 1"],
                default=0,
                set_value=True,
                raw_value="mean",
            ),
            finished(),
        ],
    )
    assert set(view.widgets) == {"s-head"} and view.values["s-head"] == ("string_value", "mean")


def test_an_exception_element_is_reported():
    view = PageView()
    run(view, [element([0, 0], "exception", type="ValueError", message="bad step"), finished()])
    assert view.exceptions == ["ValueError: bad step"]


class FakeVisitor:
    """Shows a fixed step whatever is clicked: a session that does not follow its own clicks."""

    def __init__(self, shown):
        self.view = PageView(step=shown)

    async def click(self, label):
        return Outcome(label, 0.01)


def test_a_step_that_does_not_follow_the_clicks_is_a_mismatch():
    visitor = FakeVisitor((0, 5))
    walk = StepThrough("I am hungry.", None)
    walk.opened(visitor, Outcome("first load", 0.1))
    outcome = asyncio.run(walk.act(visitor))  # Next: step 1 is expected, the page still shows 0
    assert outcome.errors == ["mismatch"] and "expected step 1 of 5" in outcome.detail


def test_percentiles_and_the_report_row():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5 and percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert percentile([7.0], 95) == 7.0
    assert errors_cell(Counter()) == "0" and errors_cell(Counter(timeout=2, mismatch=1)) == "3 (2 timeout, 1 mismatch)"
    previous = Record(1, server={"rss_mb": 500.0})
    record = Record(
        11,
        first_loads=[Outcome("first load", 0.5), Outcome("first load", None, ["http"])],
        actions=[Outcome("Next", 0.1), Outcome("Next", 0.3), Outcome("Back", None, ["timeout"])],
        window_s=10.0,
        server={"cpu_cores": 1.25, "rss_mb": 530.0},
        client_cpu_cores=0.1,
    )
    row, numbers = level_row(record, previous)
    assert row == (
        "11",
        "0.50 / 0.50",
        "0.20 / 0.29 / 0.30",
        "2 (1 http, 1 timeout)",
        "1.25",
        "530",
        "3.0",
        "0.2",
        "0.10",
    )
    assert numbers["mb_per_session"] == pytest.approx(3.0) and numbers["by_action_s"]["Next"]["n"] == 2


def test_only_this_machine_is_a_target(capsys):
    assert local_base("http://127.0.0.1:8501/") == ("ws://127.0.0.1:8501", "127.0.0.1", 8501)
    assert local_base("http://localhost:80")[0] == "ws://localhost:80"
    for url in ("http://10.0.0.7:8501", "http://example.com", "ftp://127.0.0.1", "127.0.0.1:8501"):
        with pytest.raises(NotLocalError):
            local_base(url)
    with pytest.raises(SystemExit):
        parse_args(["--url", "http://192.168.1.20:8501"])
    assert "not on this machine" in capsys.readouterr().err


def test_server_flags_become_streamlit_environment_variables():
    assert server_env(["--runner.postScriptGC=false"]) == {"STREAMLIT_RUNNER_POST_SCRIPT_GC": "false"}
    for bad in (["--no.suchOption=1"], ["--runner.postScriptGC"]):
        with pytest.raises(SystemExit):
            server_env(bad)


def test_another_checkout_is_served_with_its_own_settings_not_this_ones(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    for folder, toml in (
        (here, "[runner]\npostScriptGC = false\n[server]\nfolderWatchBlacklist = ['.venv']\n"),
        (there, "[server]\nheadless = true\n"),
    ):
        (folder / ".streamlit").mkdir(parents=True)
        (folder / ".streamlit" / "config.toml").write_text(toml)
    assert app_dir_env(there, root=here) == {"STREAMLIT_RUNNER_POST_SCRIPT_GC": "true"}  # Streamlit's default
    assert app_dir_env(here, root=here) == {}


def test_the_probe_reads_the_kernels_peak_and_starts_it_again():
    """The soak's bound is checked against VmHWM, which no sample between two readings can miss."""
    probe = ProcessProbe(pids=[os.getpid()])
    block = bytearray(64 * 2**20)  # 64 MiB, touched: resident
    block[::4096] = b"x" * len(block[::4096])
    with_block = probe.peak_bytes()
    assert with_block >= probe.sample()["rss_bytes"] > 64 * 2**20
    del block
    if probe.reset_peak():  # Linux >= 4.0, and this process is ours
        assert probe.peak_bytes() < with_block - 32 * 2**20


def test_demo_sentences_are_a_few_hundred_distinct_ones():
    sentences = demo_sentences()
    assert len(set(sentences)) == len(sentences) >= 300


# --- a tiny run against a served app ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    if not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint checkpoints/en-de is missing")
    try:
        with serve(ROOT / "test-artifacts" / "streamlit-load-benchmark.log") as url:
            yield url
    except ServerError as exc:
        pytest.fail(str(exc))


def test_the_burst_is_a_hundred_visitors_within_five_seconds_unless_told_otherwise():
    assert (
        options(parse_args(["--scenario", "burst"]), "burst").levels,
        options(parse_args(["--scenario", "burst"]), "burst").ramp_s,
    ) == ([100], 5.0)
    told = options(parse_args(["--scenario", "burst", "--levels", "1,10", "--ramp", "2"]), "burst")
    assert (told.levels, told.ramp_s) == ([1, 10], 2.0)
    lecture = options(parse_args([]), "lecture")
    assert (lecture.levels, lecture.ramp_s) == ([1, 10, 25, 50, 100, 200], 20.0)


@pytest.mark.parametrize("scenario, visitors", [("lecture", 3), ("attention", 2), ("burst", 4)])
def test_a_tiny_run_times_every_action_without_an_error(server, scenario, visitors):
    opts = Options([visitors], hold_s=120, ramp_s=0, think_s=(0, 0), actions=2, timeout_s=120)
    probe = ProcessProbe(port=local_base(server)[2])
    [record] = asyncio.run(run_levels(server, scenario, opts, probe))
    outcomes = record.first_loads + record.actions
    assert len(record.first_loads) == visitors and len(record.actions) == 2 * visitors
    assert [o for o in outcomes if o.errors or o.seconds is None] == []  # steps match the clicks: no mismatch
    if scenario in ("lecture", "burst"):  # burst: each its own sentence, all first pages at once (batched)
        assert Counter(o.action for o in record.actions) == {"Next": 2 * visitors}
    assert record.server["rss_mb"] > 0 and record.server["cpu_cores"] >= 0


def test_a_double_click_counts_both_clicks_or_is_merged_and_leaves_no_slot_busy(server):
    import urllib.request

    from benchmarks.load_client import Visitor
    from serving.metrics import read

    async def visit():
        visitor = Visitor(server, 120)
        opened = await visitor.open("", "text=My+sister+lives+in+Rome.&lens=1")
        assert not opened.errors and visitor.view.step[0] == 0
        clicked = await visitor.double_click("Next", gap_s=0.03)
        late = await visitor.drain(wait_s=0.5)
        await visitor.close()
        return clicked, late, visitor.view.step[0]

    clicked, late, step = asyncio.run(visit())
    assert not clicked.errors and clicked.seconds is not None
    # merged: Streamlit served both clicks with one run (one step), and a late run is the second click's own (two)
    # or the fragment rerun it queues for the merged click (one)
    assert step in ({1, 2} if clicked.merged else {2}), (clicked, late, step)
    with urllib.request.urlopen(f"{server}/_stcore/metrics", timeout=10) as r:
        gate = read(r.read().decode())
    assert gate["busy"] == gate["waiting"] == gate["sharing"] == 0 and gate["computed"] >= 1


def test_a_soak_is_followed_by_a_known_scenario_and_a_positive_room(capsys):
    from benchmarks.soak import main, then_level

    assert then_level("demo:100") == ("demo", 100)
    for bad in ("demo", "demo:0", "demo:-3", "lectures:10", ":5"):
        with pytest.raises(SystemExit):
            main(["--then", bad])
        assert "SCENARIO:VISITORS" in capsys.readouterr().err


def test_a_soak_lists_each_distinct_failure_once_and_at_most_five(capsys):
    from benchmarks.soak import print_failures

    failed = [Outcome("Next", 1.0, ["timeout"], f"step {i % 7}") for i in range(20)]
    print_failures([Outcome("Next", 0.1)] + failed + failed)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"- Next: timeout: step {i}" for i in range(5)]
