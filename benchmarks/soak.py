"""A soak: many visitors for many minutes, the server's memory read every ``--every`` seconds, and what is left
after they have all gone.

``python -m benchmarks.soak [--visitors 50] [--minutes 10] [--scenario demo]`` serves the app with
``server.disconnectedSessionTTL`` set to ``--ttl`` seconds (Streamlit keeps a disconnected session that long, for
a reconnect), runs one level of :mod:`benchmarks.load` visitors for the whole time, closes them, waits for the TTL
to pass, and prints the server's resident memory and CPU over time: the goal is memory within 10 % from the end
of the ramp to the end of the soak, and back near the start once everyone has left (a visitor who disconnects
leaves nothing behind). ``--url`` soaks a running server instead (127.0.0.1 only).

``--churn`` soaks with a room that changes (:mod:`benchmarks.soak_churn`): visitors who stay 20–90 s and are
replaced, new sentences every minute, half of them near the input cap, on Translate (with the lens or the
attribution view for some) and the Attention page. The table adds what the heavy-work gate and the shared figures
hold (``/_stcore/metrics``, :mod:`serving.metrics`), and the goal is resident memory under a bound: the memory once the
model is loaded and warm (before any visitor) plus the caches' byte budgets (:data:`serving.memory.GATE_BYTES` +
:data:`serving.memory.FIGURE_BYTES`), read once a warm-up visit of each kind (Translate, with the lens and the
attribution view, the Attention page; :func:`benchmarks.soak_churn.run_churn`) has left and the server's trim has run.

Where the memory goes, line by line: ``ATTENTION_EXPLORER_MEMORY_PROBE=/tmp/probe.jsonl python -m benchmarks.soak
--churn`` makes the served app write what its allocator holds in use and free, the caches' own counts and its
sessions' state every 10 s (:mod:`serving.memory_probe`); ``ATTENTION_EXPLORER_MEMORY_PEAKS=1`` beside it also
writes what every thread ran at each new high of the resident memory (read five times a second), the spikes between
two readings that only the high-water mark sees otherwise.

``--then demo:100`` runs one level of a :mod:`benchmarks.load` scenario on the same server once the churned room
has left (here 100 visitors with sentences of their own, ramped over ``--ramp`` and held 60 s): whether the
lecture-hall goals still hold on a process that has served half an hour of churn, with its caches full and its
heaps as the churn left them, and whether its memory stays under the same bound meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import Counter

from benchmarks.app_server import ROOT, serve
from benchmarks.chaos import gate_stats
from benchmarks.load import Options, Record, run_levels
from benchmarks.load_client import Outcome, local_base
from benchmarks.load_scenarios import SCENARIOS
from benchmarks.load_stats import TABLE_HEADER, ProcessProbe, errors_cell, level_row, summary
from benchmarks.soak_churn import run_churn
from benchmarks.table import print_table
from deploy.worker import MALLOC_ARENAS
from serving.memory import FIGURE_BYTES, GATE_BYTES

MIB = 2**20


async def soak(
    url: str,
    scenario: str,
    visitors: int,
    minutes: float,
    every_s: float,
    ramp_s: float,
    linger_s: float,
    churn: bool = False,
) -> tuple[list[tuple], tuple[list[Outcome], int] | list[Record], float | None, float | None]:
    """``(samples, what ran, baseline RSS MB, peak MB)``: ``samples`` are ``(minutes since start, RSS MB, server CPU
    cores, gate MiB, figure MiB)`` every ``every_s`` seconds during the soak and once more ``linger_s`` seconds after
    every visitor left; what ran is the level's records, or ``(outcomes, visitors who came)`` with ``churn``; the
    baseline is measured with ``churn`` only (else ``None``); the peak is the kernel's high-water mark of the server's
    resident memory from the baseline to the last visitor's leaving (``None`` where it cannot be read again)."""
    probe = ProcessProbe(port=local_base(url)[2])
    samples: list[tuple] = []
    start = time.monotonic()

    def caches() -> tuple[float, float]:
        stats = gate_stats(url) or {}
        return stats.get("bytes", 0) / MIB, stats.get("figure_bytes", 0) / MIB

    async def sampler(stop: asyncio.Event) -> None:
        before = probe.sample()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except asyncio.TimeoutError:
                pass
            after = probe.sample()
            delta = probe.delta(before, after)
            samples.append(
                ((after["t"] - start) / 60, delta["rss_mb"], delta["cpu_cores"], *await asyncio.to_thread(caches))
            )
            before = after

    stop = asyncio.Event()
    baseline: float | None = None
    watched_peak = False
    records: tuple[list[Outcome], int] | list[Record]
    if churn:

        def settled(visited: str) -> None:  # the model loaded and warm, the warm-up visits gone, memory handed back
            nonlocal baseline, watched_peak
            warmed[visited] = probe.sample()["rss_bytes"] / 1e6
            baseline = warmed[visited] if visited == "every page" else None
            if baseline is not None:  # from here on, the peak is the soak's
                watched_peak = probe.reset_peak()

        warmed: dict[str, float] = {}
        ran = asyncio.create_task(run_churn(url, visitors, minutes, ramp_s, settled))
        while baseline is None:
            await asyncio.sleep(0.2)
        print(f"after the warm-up visits: {', '.join(f'{k} {v:.0f} MB' for k, v in warmed.items())}", flush=True)
        watching = asyncio.create_task(sampler(stop))
        records = await ran
    else:
        opts = Options([visitors], hold_s=minutes * 60 - ramp_s, ramp_s=ramp_s)
        watching = asyncio.create_task(sampler(stop))
        records = await run_levels(url, scenario, opts, probe)  # closes every visitor at the end
    stop.set()
    await watching
    left = probe.sample()
    peak = probe.peak_bytes() / 1e6 if watched_peak else None
    await asyncio.sleep(linger_s)
    after = probe.sample()
    samples.append(
        (
            (after["t"] - start) / 60,
            probe.delta(left, after)["rss_mb"],
            probe.delta(left, after)["cpu_cores"],
            *caches(),
        )
    )
    return samples, records, baseline, peak


def churn_bound(baseline: float) -> float:
    """The churned soak's memory bound (MB): the warm process's resident memory ``baseline`` (MB) plus the caches'
    byte budgets (:data:`serving.memory.GATE_BYTES` + :data:`serving.memory.FIGURE_BYTES`)."""
    return baseline + (GATE_BYTES + FIGURE_BYTES) / 1e6


#: Seconds the level after a soak holds its visitors (after its ramp), as one level of :mod:`benchmarks.load`.
THEN_HOLD_S = 60.0


async def then_run(url: str, then: tuple[str, int], ramp_s: float, baseline: float | None) -> None:
    """One level of ``then = (scenario, visitors)`` on the soaked server (ramped over ``ramp_s``, held
    :data:`THEN_HOLD_S`), printed with :func:`then_report`."""
    scenario, count = then
    probe = ProcessProbe(port=local_base(url)[2])
    watched = probe.reset_peak()
    level = await run_levels(url, scenario, Options([count], hold_s=THEN_HOLD_S, ramp_s=ramp_s), probe)
    then_report(level[0], scenario, baseline, probe.peak_bytes() / 1e6 if watched else None)


def then_report(record: Record, scenario: str, baseline: float | None, highest: float | None) -> None:
    """The level run after the soak (:data:`benchmarks.load_stats.TABLE_HEADER`), and its high-water mark against
    the churn's bound."""
    row, _ = level_row(record, None)
    print(f"\nthen, on the same server: {record.visitors} visitors, {scenario}\n", flush=True)
    print_table([row], TABLE_HEADER)
    if highest is not None and baseline is not None:
        bound = churn_bound(baseline)
        print(
            f"its high-water mark (VmHWM): {highest:.0f} MB ({'under' if highest <= bound else 'OVER'} the bound "
            f"{bound:.0f} MB)",
            flush=True,
        )
    print_failures(record.first_loads + record.actions)


def churn_report(samples: list[tuple], ran, baseline: float, linger: int, highest: float | None = None) -> None:
    outcomes, came = ran
    bound = churn_bound(baseline)
    peak = max(s[1] for s in samples)
    print_table(
        [(f"{m:.1f}", f"{rss:.0f}", f"{cpu:.2f}", f"{g:.1f}", f"{f:.1f}") for m, rss, cpu, g, f in samples[:-1]]
        + [
            (
                f"{samples[-1][0]:.1f} (all left {linger} s ago)",
                f"{samples[-1][1]:.0f}",
                f"{samples[-1][2]:.2f}",
                f"{samples[-1][3]:.1f}",
                f"{samples[-1][4]:.1f}",
            )
        ],
        ("minute", "server RSS MB", "server CPU (cores)", "gate results MiB", "shared figures MiB"),
    )
    loads = summary([o.seconds for o in outcomes if o.action == "first load" and o.seconds and not o.errors])
    acts = summary([o.seconds for o in outcomes if o.action != "first load" and o.seconds and not o.errors])
    print(
        f"\nbaseline (model loaded, every page visited once, no visitor) {baseline:.0f} MB + caches' budget "
        f"{(GATE_BYTES + FIGURE_BYTES) / 1e6:.0f} MB = bound {bound:.0f} MB; peak {peak:.0f} MB "
        f"({'under' if peak <= bound else 'OVER'} the bound); after everyone left: {samples[-1][1]:.0f} MB"
    )
    if highest is not None:
        print(
            f"the kernel's high-water mark (VmHWM) from the baseline to the last visitor's leaving: {highest:.0f} MB "
            f"({'under' if highest <= bound else 'OVER'} the bound)"
        )
    print(
        f"{came} visitors came and went; first load p50 / p95 {loads['p50'] or 0:.2f} / {loads['p95'] or 0:.2f} s, "
        f"actions p50 / p95 {acts['p50'] or 0:.2f} / {acts['p95'] or 0:.2f} s ({acts['n']}); errors "
        f"{errors_cell(Counter(e for o in outcomes for e in o.errors))}; load average {os.getloadavg()[0]:.1f}"
    )
    print_failures(outcomes)


def print_failures(outcomes: list[Outcome], most: int = 5) -> None:
    """Up to ``most`` distinct failed outcomes, a line each (what was done, the errors, the detail)."""
    for line in sorted({f"{o.action}: {', '.join(o.errors)}: {o.detail}"[:300] for o in outcomes if o.errors})[:most]:
        print(f"- {line}", flush=True)


def then_level(text: str) -> tuple[str, int]:
    """``"demo:100"`` → ``("demo", 100)``.

    Raises:
        argparse.ArgumentTypeError: not a known scenario and a positive number of visitors.
    """
    scenario, _, count = text.partition(":")
    if scenario not in SCENARIOS or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected SCENARIO:VISITORS with a scenario of {', '.join(SCENARIOS)}")
    return scenario, int(count)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--visitors", type=int, default=50)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--scenario", default="demo", choices=SCENARIOS + ("mixed",))
    p.add_argument("--churn", action="store_true", help="visitors come and go, new sentences every minute")
    p.add_argument("--every", type=float, default=60.0, help="seconds between memory readings")
    p.add_argument("--ramp", type=float, default=20.0)
    p.add_argument("--ttl", type=int, default=30, help="server.disconnectedSessionTTL of the served app (s)")
    p.add_argument("--url", help="a running server (127.0.0.1/localhost only)")
    p.add_argument(
        "--then",
        type=then_level,
        metavar="SCENARIO:VISITORS",
        help="one level of benchmarks.load on the same server after the soak (e.g. demo:100)",
    )
    args = p.parse_args(argv)
    linger = args.ttl + 15  # the TTL, then a moment for the sessions' cleanup

    def run(url: str) -> None:
        samples, records, baseline, highest = asyncio.run(
            soak(url, args.scenario, args.visitors, args.minutes, args.every, args.ramp, linger, args.churn)
        )
        report(args, linger, samples, records, baseline, highest)
        if args.then is not None:  # after the soak's report: what the room measured is printed whatever this does
            asyncio.run(then_run(url, args.then, args.ramp, baseline))

    if args.url:
        local_base(args.url)
        run(args.url.rstrip("/"))
    else:
        env = {
            "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(args.ttl),
            "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", MALLOC_ARENAS),
        }  # as make serve's workers
        with serve(ROOT / "test-artifacts" / "streamlit-soak.log", env) as url:
            run(url)
    return 0


def report(args: argparse.Namespace, linger: int, samples: list[tuple], records, baseline, highest) -> None:
    """The soak's tables and verdicts (:func:`churn_report` with ``--churn``)."""
    what = "churn (new sentences every minute, visitors coming and going)" if args.churn else args.scenario
    print(
        f"\n### soak: {args.visitors} visitors, {what}, {args.minutes:g} min "
        f"({args.url or 'streamlit run app.py'}, disconnectedSessionTTL {args.ttl} s)\n",
        flush=True,
    )
    if args.churn:
        churn_report(samples, records, baseline, linger, highest)
        return
    during = samples[:-1]
    ramped = next((s for s in during if s[0] * 60 >= args.ramp), during[0])
    peak = max(s[1] for s in during)
    growth = 100 * (during[-1][1] - ramped[1]) / ramped[1]
    print_table(
        [(f"{m:.1f}", f"{rss:.0f}", f"{cpu:.2f}") for m, rss, cpu, *_ in during]
        + [(f"{samples[-1][0]:.1f} (all left {linger} s ago)", f"{samples[-1][1]:.0f}", f"{samples[-1][2]:.2f}")],
        ("minute", "server RSS MB", "server CPU (cores)"),
    )
    print(
        f"\nmemory from the end of the ramp to the end: {ramped[1]:.0f} → {during[-1][1]:.0f} MB "
        f"({growth:+.1f} %, peak {peak:.0f} MB); after everyone left: {samples[-1][1]:.0f} MB"
    )
    row, _ = level_row(records[0], None)
    print("\nthe level itself:\n")
    print_table([row], TABLE_HEADER)
    print_failures(records[0].first_loads + records[0].actions)


if __name__ == "__main__":
    sys.exit(main())
