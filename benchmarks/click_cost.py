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

``--before TREE`` compares two versions of the code in one run: another checkout of this repository (e.g. ``git
worktree add /tmp/before HEAD~3``) is served beside this one, each view has a visitor on each, and the two servers
take turns round by round (the order swapped every round), so that what else the machine does weighs on both
alike. Printed per view: CPU per click before and after, and the median over the rounds of after ÷ before.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

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


async def measure(urls: dict[str, str], views: list[str], clicks: int, rounds: int) -> dict[tuple[str, str], dict]:
    """Per (server label, view): ``cpu_ms`` (server CPU per click, one value per round) and ``wall_s`` (every
    click's wall time). ``urls``: label → base URL of a served app; with more than one, the servers take turns
    within each round, in an order that is reversed every other round.

    Raises:
        RuntimeError: no process listens on a URL's port, or a first load or click failed.
    """
    probes, visitors, steppers = {}, {}, {}
    for label, url in urls.items():
        probes[label] = ProcessProbe(port=int(url.rsplit(":", 1)[1]))
        if not probes[label].pids:
            raise RuntimeError(f"{label}: no server process found listening on the port")
        for view in views:
            visitor, stepper = Visitor(url, timeout_s=600), StepThrough(LECTURE_TEXT, random.Random(0), VIEWS[view])
            opened = await visitor.open(stepper.page, stepper.query)
            if opened.errors:
                raise RuntimeError(f"{label} {view}: the first load failed: {opened.errors} {opened.detail}")
            stepper.opened(visitor, opened)
            await _walk(visitor, stepper, 2 * (stepper.total or 0))  # to the end and back: every step read once
            visitors[label, view], steppers[label, view] = visitor, stepper
    results: dict[tuple[str, str], dict] = {key: {"cpu_ms": [], "wall_s": []} for key in visitors}
    labels = list(urls)
    for r in range(rounds):
        for label in labels if r % 2 == 0 else labels[::-1]:
            for view in views:
                key = (label, view)
                before = probes[label].sample()["cpu_s"]
                results[key]["wall_s"] += await _walk(visitors[key], steppers[key], clicks)
                results[key]["cpu_ms"].append(1000 * (probes[label].sample()["cpu_s"] - before) / clicks)
    for visitor in visitors.values():
        await visitor.close()
    return results


def _cpu(r: dict) -> str:
    return f"{statistics.mean(r['cpu_ms']):.1f} ({min(r['cpu_ms']):.1f}–{max(r['cpu_ms']):.1f})"


def rows(results: dict[tuple[str, str], dict], label: str = "after") -> list[tuple[str, ...]]:
    """One table row per view of server ``label``: CPU per click (mean, min–max over rounds), ratio to ``plain``,
    wall p50."""
    plain = statistics.mean(results[label, "plain"]["cpu_ms"]) if (label, "plain") in results else None
    out: list[tuple[str, ...]] = []
    for (lab, view), r in results.items():
        if lab != label:
            continue
        cpu = statistics.mean(r["cpu_ms"])
        out.append(
            (
                view,
                _cpu(r),
                f"{cpu / plain:.2f}" if plain else "—",
                f"{1000 * statistics.median(r['wall_s']):.0f}",
            )
        )
    return out


def compared_rows(results: dict[tuple[str, str], dict]) -> list[tuple[str, ...]]:
    """One row per view measured on both servers: CPU per click before and after (mean, min–max), and the median
    over the rounds of after ÷ before (each round's two batches ran back to back)."""
    out: list[tuple[str, ...]] = []
    for (label, view), before in results.items():
        if label != "before" or ("after", view) not in results:
            continue
        after = results["after", view]
        ratios = [a / b for a, b in zip(after["cpu_ms"], before["cpu_ms"], strict=True) if b > 0]
        out.append((view, _cpu(before), _cpu(after), f"{statistics.median(ratios):.3f}" if ratios else "—"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.click_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--views", default="plain,lens,attribution", help=f"a comma list of {', '.join(VIEWS)}")
    p.add_argument("--clicks", type=int, default=40, help="clicks per view per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--before",
        type=Path,
        help="another checkout of this repository (e.g. a git worktree of an older commit), served beside this one "
        "and measured in the same rounds",
    )
    args = p.parse_args(argv)
    views = args.views.split(",")
    if bad := [v for v in views if v not in VIEWS]:
        p.error(f"unknown view {bad}: choose from {', '.join(VIEWS)}")
    if args.before is not None and not (args.before / "app.py").is_file():
        p.error(f"--before {args.before}: no app.py there (a checkout of this repository is needed)")
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    with ExitStack() as stack:
        urls = {}
        if args.before is not None:
            log = ROOT / "test-artifacts" / "streamlit-click-cost-before.log"
            urls["before"] = stack.enter_context(serve(log, root=args.before.resolve()))
        urls["after"] = stack.enter_context(serve(ROOT / "test-artifacts" / "streamlit-click-cost.log"))
        results = asyncio.run(measure(urls, views, args.clicks, args.rounds))
    print(f"\n### one click on a step already read, {started} UTC, {args.rounds} rounds × {args.clicks} clicks\n")
    if args.before is None:
        print_table(rows(results), ("view", "server CPU per click ms (rounds' range)", "÷ plain", "wall p50 ms"))
    else:
        print(f"before: {args.before.resolve()}; after: {ROOT}\n")
        print_table(
            compared_rows(results),
            ("view", "before: ms per click (range)", "after: ms per click (range)", "after ÷ before (median)"),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
