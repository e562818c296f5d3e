"""How the chaos benchmark reads a page after a click: every click counts, a merge is Streamlit's, a short page
after two runs is a lost step (benchmarks.chaos_visitors.verdict)."""

import pytest

from benchmarks.chaos_visitors import verdict


@pytest.mark.parametrize(
    ("shown", "expected", "direction", "total", "single", "one_run", "said"),
    [
        (5, 3, 1, 9, False, False, "ok"),  # a double Next: two steps on
        (4, 3, 1, 9, True, True, "ok"),  # a plain Next: one step
        (9, 8, 1, 9, False, False, "ok"),  # the second Next clamps at the last step
        (0, 1, -1, 9, False, False, "ok"),  # the second Back clamps at step 0
        (8, 9, -1, 9, False, True, "one short"),  # one run served both clicks: merged, or the second still to come
        (8, 9, -1, 9, False, False, "lost"),  # two runs came and the page moved one step
        (9, 9, -1, 9, False, True, "lost"),  # nothing moved
        (4, 3, 1, 9, True, False, "ok"),
        (5, 3, 1, 9, True, True, "lost"),  # a plain click served twice
        (6, 3, 1, 9, False, False, "lost"),  # a double click served three times
    ],
)
def test_every_click_counts_and_only_a_single_run_may_serve_two(
    shown, expected, direction, total, single, one_run, said
):
    assert verdict(shown, expected, direction, total, single, one_run) == said


def test_the_step_log_records_each_callback_and_drawing_and_reads_back_per_session(tmp_path, monkeypatch):
    """A lost step is diagnosed from the server's side: with the step log on, a Next is one ``move`` (from, to)
    and the run's ``draw`` at the new step, under the session's id; the chaos report reads them back."""
    import json

    from app_helpers import button, make_app, step_line

    from benchmarks.chaos import session_steps
    from ui import widgets

    log = tmp_path / "steps.jsonl"
    monkeypatch.setattr(widgets, "STEP_LOG", str(log))
    at = make_app(text="Bobby likes blackberries.")
    button(at, "Next").click().run()
    assert step_line(at)[0] == 1
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["draw", "move", "draw"]
    assert (events[1]["before"], events[1]["after"], events[2]["step"]) == (0, 1, 1)
    session = events[0]["session"]
    assert session and {e["session"] for e in events} == {session}
    lines = session_steps(log, session)
    assert len(lines) == 3 and "move" in lines[1] and "after=1" in lines[1]
    assert session_steps(log, "another") == [] and session_steps(tmp_path / "none.jsonl", session) == []
