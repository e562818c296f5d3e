"""What one click on a step already read costs the server: ``python -m benchmarks.click_cost``.

One visitor per view (``--views plain,lens,attribution``: the lecture's Translate page as is, with the logit lens on,
with the attribution view on) steps the lecturer's sentence through one served app process
(:mod:`benchmarks.load_client`: Streamlit's own websocket protocol). Each first walks the sentence to its end and
back, so every step's decoding, lens, attribution and faithfulness is computed before anything is measured; then
the views take turns, ``--clicks`` Next / Back clicks each per round for ``--rounds`` rounds, one click at a time,
and the server's CPU (user + system of its process, ``/proc``, clock ticks: hence batches of clicks) over each
batch is divided by its clicks. Printed: the server CPU per click (ms, mean over the rounds, and the rounds' spread),
its ratio to the plain page's in the same run, and the clicks' wall time. This is the cost a room of visitors
multiplies (:mod:`benchmarks.load`): a process's interpreter serves about one core's worth of clicks a second.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from benchmarks.app_server import ROOT, serve
from benchmarks.load_client import Visitor
from benchmarks.load_scenarios import LECTURE_TEXT, StepThrough
from benchmarks.load_stats import ProcessProbe
from benchmarks.table import print_table

#: The views measured and the link parameters that open each.
VIEWS = {"plain": "", "lens": "&lens=1", "attribution": "&attr=1"}


async def _walk(visitor: Visitor, stepper: StepThrough, clicks: int) -> list[float]:
    """``clicks`` Next / Back clicks, one at a time; their wall times (s).

    Raises:
        RuntimeError: a click failed (an error, an exception drawn, a step other than the one expected).
    """
    seconds = []
    for _ in range(clicks):
        outcome = await stepper.act(visitor)
        if outcome.errors or outcome.seconds is None:
            raise RuntimeError(f"{outcome.action}: {outcome.errors} {outcome.detail}")
        seconds.append(outcome.seconds)
    return seconds


async def measure(url: str, views: list[str], clicks: int, rounds: int) -> dict[str, dict]:
    """Per view: ``cpu_ms`` (server CPU per click, one value per round) and ``wall_s`` (every click's wall time)."""
    probe = ProcessProbe(port=int(url.rsplit(":", 1)[1]))
    if not probe.pids:
        raise RuntimeError("no server process found listening on the port")
    visitors, steppers = {}, {}
    for view in views:
        visitor, stepper = Visitor(url, timeout_s=600), StepThrough(LECTURE_TEXT, random.Random(0), VIEWS[view])
        opened = await visitor.open(stepper.page, stepper.query)
        if opened.errors:
            raise RuntimeError(f"{view}: the first load failed: {opened.errors} {opened.detail}")
        stepper.opened(visitor, opened)
        await _walk(visitor, stepper, 2 * (stepper.total or 0))  # to the end and back: every step read once
        visitors[view], steppers[view] = visitor, stepper
    results: dict[str, dict] = {view: {"cpu_ms": [], "wall_s": []} for view in views}
    for _ in range(rounds):
        for view in views:
            before = probe.sample()["cpu_s"]
            results[view]["wall_s"] += await _walk(visitors[view], steppers[view], clicks)
            results[view]["cpu_ms"].append(1000 * (probe.sample()["cpu_s"] - before) / clicks)
    for visitor in visitors.values():
        await visitor.close()
    return results


def rows(results: dict[str, dict]) -> list[tuple[str, ...]]:
    """One table row per view: CPU per click (mean, min–max over rounds), ratio to ``plain``, wall p50."""
    plain = statistics.mean(results["plain"]["cpu_ms"]) if "plain" in results else None
    out: list[tuple[str, ...]] = []
    for view, r in results.items():
        cpu = statistics.mean(r["cpu_ms"])
        out.append(
            (
                view,
                f"{cpu:.1f} ({min(r['cpu_ms']):.1f}–{max(r['cpu_ms']):.1f})",
                f"{cpu / plain:.2f}" if plain else "—",
                f"{1000 * statistics.median(r['wall_s']):.0f}",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.click_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--views", default="plain,lens,attribution", help=f"a comma list of {', '.join(VIEWS)}")
    p.add_argument("--clicks", type=int, default=40, help="clicks per view per round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    views = args.views.split(",")
    if bad := [v for v in views if v not in VIEWS]:
        p.error(f"unknown view {bad}: choose from {', '.join(VIEWS)}")
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    with serve(ROOT / "test-artifacts" / "streamlit-click-cost.log") as url:
        results = asyncio.run(measure(url, views, args.clicks, args.rounds))
    print(f"\n### one click on a step already read, {started} UTC, {args.rounds} rounds × {args.clicks} clicks\n")
    print_table(rows(results), ("view", "server CPU per click ms (rounds' range)", "÷ plain", "wall p50 ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
