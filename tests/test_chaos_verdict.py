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
