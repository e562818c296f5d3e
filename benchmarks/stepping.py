"""A step click with a server round trip (Translate, a fragment rerun) against one stepped in the browser alone.

``python -m benchmarks.stepping [--clicks 12]`` serves the app and :mod:`benchmarks.client_stepping_app` (every
step's view sent at once, stepped by the component's own JavaScript), opens each in Chromium, and clicks Next and
Back ``--clicks`` times on each. It prints one Markdown table: the click as a person sees it (from the click to the
new step drawn, p50 / p95), the server CPU one click costs (read from /proc), and what the first view of a sentence
costs (its load time and the HTML sent for the step view).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.app_server import chromium, open_page, serve, settled
from benchmarks.browser import step_pattern, timed
from benchmarks.load_stats import ProcessProbe, listening_pids, percentile
from benchmarks.table import print_table

ROOT = Path(__file__).resolve().parent.parent
TEXT = "The children play in the garden."
STEP_VIEW_JS = (
    "() => Array.from(document.querySelectorAll('.ae-topk, .ae-align')).reduce((n, e) => n + e.outerHTML.length, 0)"
)


def cpu_seconds(url: str) -> float:
    """CPU seconds the server behind ``url`` has used so far."""
    probe = ProcessProbe(listening_pids(int(url.rsplit(":", 1)[1])))
    return probe.sample()["cpu_s"]


def round_trip(url: str, browser, clicks: int) -> dict:
    """Translate: Next to the end, Back, and so on; each click waits for the page to show the new step."""
    page = open_page(browser)
    t0 = time.perf_counter()
    page.goto(f"{url}/?text={TEXT.replace(' ', '+')}")
    settled(page, step_pattern(0))
    load = time.perf_counter() - t0
    total = int(page.inner_text("body").split(" of ", 1)[1].split()[0])
    times, step, cpu0 = [], 0, cpu_seconds(url)
    for i in range(clicks):
        forward = (i // total) % 2 == 0
        step += 1 if forward else -1
        button = page.get_by_role("button", name="Next" if forward else "Back")
        times.append(timed(button.click, page, rf"Step {step} of {total}"))
    cpu = (cpu_seconds(url) - cpu0) / clicks
    page.get_by_role("button", name="Next").click()
    settled(page)
    html_chars = page.evaluate(STEP_VIEW_JS)
    page.context.close()
    return {"times": times, "cpu_ms": 1000 * cpu, "load": load, "chars": html_chars}


def in_browser(url: str, browser, clicks: int) -> dict:
    """The same clicks on the element's own buttons, each waiting for the new step's view to be shown."""
    page = open_page(browser)
    t0 = time.perf_counter()
    page.goto(f"{url}/?text={TEXT.replace(' ', '+')}")
    page.locator(".ae-step[data-step='0']").wait_for()
    load = time.perf_counter() - t0
    total = page.locator(".ae-step").count() - 1
    times, step, cpu0 = [], 0, cpu_seconds(url)
    for i in range(clicks):
        forward = (i // total) % 2 == 0
        step += 1 if forward else -1
        t = time.perf_counter()
        page.locator("#ae-next" if forward else "#ae-back").click()
        page.locator(f".ae-step[data-step='{step}']").wait_for(state="visible")
        times.append(time.perf_counter() - t)
    cpu = (cpu_seconds(url) - cpu0) / clicks
    chars = int(page.get_by_text("characters of HTML").inner_text().split(":")[1].split()[0].replace(",", ""))
    page.context.close()
    return {"times": times, "cpu_ms": 1000 * cpu, "load": load, "chars": chars}


def row(name: str, r: dict) -> tuple[str, ...]:
    p50, p95 = statistics.median(r["times"]), percentile(r["times"], 95) or 0.0  # None only without times
    return (
        name,
        f"{p50 * 1000:.0f} / {p95 * 1000:.0f} ms",
        f"{r['cpu_ms']:.1f} ms",
        f"{r['load']:.2f} s",
        f"{r['chars']:,}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stepping", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clicks", type=int, default=12)
    args = parser.parse_args(argv)
    logs = ROOT / "test-artifacts"
    with chromium() as browser:
        with serve(logs / "streamlit-stepping-app.log") as url:
            round_trip(url, browser, 2)  # the first visit loads the model: not measured
            server = round_trip(url, browser, args.clicks)
        with serve(logs / "streamlit-stepping-client.log", script="benchmarks/client_stepping_app.py") as url:
            in_browser(url, browser, 2)
            client = in_browser(url, browser, args.clicks)
    print(f"\n### A step click: server round trip or the browser alone ({args.clicks} clicks each, '{TEXT}')\n")
    print_table(
        [
            row("round trip (Translate: a fragment rerun)", server),
            row("in the browser (all steps sent at once)", client),
        ],
        (
            "step click",
            "click → new step drawn, p50 / p95",
            "server CPU per click",
            "first view",
            "HTML characters (step view: one step / all steps)",
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
