"""How fast the app answers a person, measured in a real browser: ``python -m benchmarks.browser [--repeats N]``.

Serves the app as ``make run`` does (:mod:`benchmarks.app_server`), drives it with Playwright and Debian's
Chromium, and prints the median and worst of ``--repeats`` (≥ 5) timings, in seconds, from the user's action
until the page has finished its rerun and shows the new state:

* **page load → first chart**: a fresh browser context opens ``/?text=…&step=1`` (a new sentence each time)
  until the step's alignment map (the first chart; HTML since the Plotly version cost ~3 s of page load) is
  drawn and no element is stale;
* **first Next on a sentence**: a new sentence at step 0, then Next;
* **Next** and **Back**: one step forward or back in the middle of a sentence;
* **layer change**: another decoder layer in the Translate step view's *Layer* box;
* **Run to end**;
* and, for the split of where the time goes, **server: Translate rerun for Next**: the same click's script run
  alone, in-process with Streamlit's AppTest (model work, figure building and serialisation; no browser, no
  network). What a browser row takes beyond it is the frontend: the websocket round trip and React drawing in
  Chromium (Translate draws no Plotly chart);
* **floor: a click on a one-button Streamlit app** (:mod:`benchmarks.floor_app`), timed as Next is: what
  Streamlit itself costs per click on this machine, below which no page can go.

"Finished" means: the expected ``Step k of N`` text is shown, no element is marked stale (``data-stale``, which
Streamlit sets on what the current rerun has not redrawn yet), Streamlit's running icon is gone, and two
animation frames have passed (Plotly draws in the next frame). The machine is shared and noisy: compare rows
of one run with each other, and runs on one machine only.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from benchmarks.app_server import CHROMIUM, ROOT, ServerError, chromium, serve, settled
from benchmarks.table import print_table

GOALS_S = {
    "page load → first chart": 2.5,
    "first Next on a sentence": 0.8,
    "Next": 0.3,
    "Back": 0.3,
    "layer change": 0.5,
    "Run to end": None,
}
FLOOR = "floor: Next on a one-button Streamlit app"
SENTENCES = [
    "The cat sat on the mat.",
    "Bobby likes blackberries.",
    "I am hungry.",
    "Where is the station?",
    "The weather is nice today.",
    "My brother reads a book.",
    "We go home now.",
    "She drinks cold water.",
    "The children play in the garden.",
    "Close the window, please.",
    "He works in a big city.",
    "The train is late again.",
]
TIMEOUT_MS = 120_000


def timed(action, page, pattern: str | None) -> float:
    """Seconds from ``action()`` until :func:`settled` with ``pattern``."""
    t0 = time.perf_counter()
    action()
    settled(page, pattern)
    return time.perf_counter() - t0


def step_pattern(k: int) -> str:
    return rf"Step {k} of \d+"


def total_steps(page) -> int:
    """Raises: RuntimeError: the page shows no "Step k of n"."""
    found = re.search(r"Step \d+ of (\d+)", page.inner_text("body"))
    if found is None:
        raise RuntimeError("the page shows no 'Step k of n'")
    return int(found.group(1))


def open_sentence(page, url: str, text: str, step: int = 0) -> None:
    query = f"?text={text.replace(' ', '+')}" + (f"&step={step}" if step else "")
    page.goto(f"{url}/{query}")
    page.get_by_text(re.compile(r"Step \d+ of \d+")).first.wait_for(timeout=TIMEOUT_MS)
    settled(page, step_pattern(step), min_ms=300)


def measure(url: str, repeats: int, browser) -> dict[str, list[float]]:
    """Every timing of :data:`GOALS_S`, ``repeats`` times each (seconds)."""
    times: dict[str, list[float]] = {name: [] for name in GOALS_S}
    viewport = {"width": 1280, "height": 720}
    warm = browser.new_context(viewport=viewport)  # the first visit loads the checkpoint: not what is measured
    open_sentence(warm.new_page(), url, SENTENCES[-1])
    warm.close()
    for i in range(repeats):
        ctx = browser.new_context(viewport=viewport)
        page = ctx.new_page()
        text = SENTENCES[i % len(SENTENCES)]
        t0 = time.perf_counter()
        page.goto(f"{url}/?text={text.replace(' ', '+')}&step=1")
        page.locator(".ae-align").first.wait_for(timeout=TIMEOUT_MS)
        settled(page, step_pattern(1))
        times["page load → first chart"].append(time.perf_counter() - t0)

        open_sentence(page, url, SENTENCES[(i + len(SENTENCES) // 2) % len(SENTENCES)])
        next_button = page.get_by_role("button", name="Next")
        times["first Next on a sentence"].append(timed(next_button.click, page, step_pattern(1)))
        n = total_steps(page)
        for k in range(2, min(n, 4) + 1):
            times["Next"].append(timed(next_button.click, page, step_pattern(k)))
        k = min(n, 4)
        times["Back"].append(timed(page.get_by_role("button", name="Back").click, page, step_pattern(k - 1)))

        def pick_layer(page=page, i=i) -> None:
            page.get_by_label("Layer").first.click()
            options = page.get_by_role("option")
            options.nth(i % options.count()).click()

        times["layer change"].append(timed(pick_layer, page, step_pattern(k - 1)))
        run_to_end = page.get_by_role("button", name=re.compile("Run to end"))
        times["Run to end"].append(timed(run_to_end.click, page, rf"Step {n} of {n}"))
        ctx.close()
    return times


#: Runs the Translate page in AppTest with the shipped translator (as ``make run`` would pick it).
APPTEST_SCRIPT = """
import pathlib, runpy
import streamlit as st
st.session_state["app_ckpt_path"] = pathlib.Path({ckpt!r})
runpy.run_path({page!r}, run_name="__main__")
"""


def server_rerun_seconds(repeats: int) -> list[float]:
    """Seconds of the Translate page's script run after a Next click, in-process (AppTest), ``repeats`` times."""
    from streamlit.testing.v1 import AppTest

    script = APPTEST_SCRIPT.format(
        ckpt=str(ROOT / "checkpoints" / "en-de"), page=str(ROOT / "app_pages" / "translate" / "translate.py")
    )
    times = []
    for i in range(repeats):
        at = AppTest.from_string(script, default_timeout=120)
        at.query_params["text"] = SENTENCES[i % len(SENTENCES)]
        at.run()
        for _ in range(2):  # the first Next of a sentence, then one in the middle: time the second
            (next_button,) = [b for b in at.button if b.label == "Next"]
            next_button.click()
            t0 = time.perf_counter()
            at.run()
        times.append(time.perf_counter() - t0)
    return times


def rows(times: dict[str, list[float]]) -> list[tuple[str, ...]]:
    """Table rows: measure, median s, worst s, goal s, met?"""
    out: list[tuple[str, ...]] = []
    for name, values in times.items():
        med = statistics.median(values)
        goal = GOALS_S.get(name)
        verdict = "—" if goal is None else ("yes" if med <= goal else f"no (×{med / goal:.1f})")
        out.append(
            (
                name,
                f"{med:.2f}",
                f"{max(values):.2f}",
                "—" if goal is None else f"{goal:.1f}",
                verdict,
                str(len(values)),
            )
        )
    return out


def floor_seconds(repeats: int, browser) -> list[float]:
    """Seconds per click on :mod:`benchmarks.floor_app` (``3 * repeats`` clicks, as many as the Next row)."""
    with serve(ROOT / "test-artifacts" / "benchmark-floor.log", script="benchmarks/floor_app.py") as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 720})
        page = ctx.new_page()
        page.goto(url)
        settled(page, "Step 0 of 99", min_ms=300)
        button = page.get_by_role("button", name="Next")
        times = [timed(button.click, page, rf"Step {k} of 99") for k in range(1, 3 * repeats + 1)]
        ctx.close()
        return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.browser", description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="timings per measure (default 5; at least 1)")
    args = p.parse_args(argv)
    if not Path(CHROMIUM).is_file():
        print(f"error: Chromium not found at {CHROMIUM} (apt-get install -y chromium)", file=sys.stderr)
        return 2
    try:
        with chromium() as browser:
            with serve(ROOT / "test-artifacts" / "benchmark-browser.log") as url:
                times = measure(url, max(1, args.repeats), browser)
            times[FLOOR] = floor_seconds(max(1, args.repeats), browser)
        times["server: Translate rerun for Next"] = server_rerun_seconds(max(1, args.repeats))
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Browser timings, seconds (Chromium, 1280×720, {max(1, args.repeats)} repeats; median and worst):")
    print_table(rows(times), header=("measure", "median s", "worst s", "goal s", "goal met", "n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
