"""A soak: many visitors for many minutes, the server's memory read every ``--every`` seconds, and what is left
after they have all gone.

``python -m benchmarks.soak [--visitors 50] [--minutes 10] [--scenario demo]`` serves the app with
``server.disconnectedSessionTTL`` set to ``--ttl`` seconds (Streamlit keeps a disconnected session that long, for
a reconnect), runs one level of :mod:`benchmarks.load` visitors for the whole time, closes them, waits for the TTL
to pass, and prints the server's resident memory and CPU over time: the goal is memory within 10 % from the end
of the ramp to the end of the soak, and back near the start once everyone has left (a visitor who disconnects
leaves nothing behind). ``--url`` soaks a running server instead (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from .app_server import ROOT, serve
from .load import Options, run_levels
from .load_client import local_base
from .load_scenarios import SCENARIOS
from .load_stats import TABLE_HEADER, ProcessProbe, level_row
from .table import print_table


async def soak(url: str, scenario: str, visitors: int, minutes: float, every_s: float, ramp_s: float,
               linger_s: float) -> tuple[list[tuple[float, float, float]], list]:
    """``(samples, records)``: ``samples`` are ``(minutes since start, RSS MB, server CPU cores)`` every
    ``every_s`` seconds during the soak and once more ``linger_s`` seconds after every visitor left."""
    probe = ProcessProbe(port=local_base(url)[2])
    samples: list[tuple[float, float, float]] = []
    start = time.monotonic()
    opts = Options([visitors], hold_s=minutes * 60 - ramp_s, ramp_s=ramp_s)

    async def sampler(stop: asyncio.Event) -> None:
        before = probe.sample()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except asyncio.TimeoutError:
                pass
            after = probe.sample()
            delta = probe.delta(before, after)
            samples.append(((after["t"] - start) / 60, delta["rss_mb"], delta["cpu_cores"]))
            before = after

    stop = asyncio.Event()
    watching = asyncio.create_task(sampler(stop))
    records = await run_levels(url, scenario, opts, probe)  # closes every visitor at the end
    stop.set()
    await watching
    left = probe.sample()
    await asyncio.sleep(linger_s)
    after = probe.sample()
    samples.append(((after["t"] - start) / 60, probe.delta(left, after)["rss_mb"],
                    probe.delta(left, after)["cpu_cores"]))
    return samples, records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--visitors", type=int, default=50)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--scenario", default="demo", choices=SCENARIOS + ("mixed",))
    p.add_argument("--every", type=float, default=60.0, help="seconds between memory readings")
    p.add_argument("--ramp", type=float, default=20.0)
    p.add_argument("--ttl", type=int, default=30, help="server.disconnectedSessionTTL of the served app (s)")
    p.add_argument("--url", help="a running server (127.0.0.1/localhost only)")
    args = p.parse_args(argv)
    linger = args.ttl + 15  # the TTL, then a moment for the sessions' cleanup

    def run(url: str):
        return asyncio.run(soak(url, args.scenario, args.visitors, args.minutes, args.every, args.ramp, linger))

    if args.url:
        local_base(args.url)
        samples, records = run(args.url.rstrip("/"))
    else:
        env = {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(args.ttl)}
        with serve(ROOT / "test-artifacts" / "streamlit-soak.log", env) as url:
            samples, records = run(url)
    during = samples[:-1]
    ramped = next((s for s in during if s[0] * 60 >= args.ramp), during[0])
    peak = max(s[1] for s in during)
    growth = 100 * (during[-1][1] - ramped[1]) / ramped[1]
    print(f"\n### soak: {args.visitors} visitors, {args.scenario}, {args.minutes:g} min "
          f"({args.url or 'streamlit run app.py'}, disconnectedSessionTTL {args.ttl} s)\n")
    print_table([(f"{m:.1f}", f"{rss:.0f}", f"{cpu:.2f}") for m, rss, cpu in during]
                + [(f"{samples[-1][0]:.1f} (all left {linger} s ago)", f"{samples[-1][1]:.0f}",
                    f"{samples[-1][2]:.2f}")],
                ("minute", "server RSS MB", "server CPU (cores)"))
    print(f"\nmemory from the end of the ramp to the end: {ramped[1]:.0f} → {during[-1][1]:.0f} MB "
          f"({growth:+.1f} %, peak {peak:.0f} MB); after everyone left: {samples[-1][1]:.0f} MB")
    row, _ = level_row(records[0], None)
    print("\nthe level itself:\n")
    print_table([row], TABLE_HEADER)
    failed = {f"{o.action}: {', '.join(o.errors)}: {o.detail}"[:300] for o in records[0].first_loads
              + records[0].actions if o.errors}
    for line in sorted(failed)[:5]:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
