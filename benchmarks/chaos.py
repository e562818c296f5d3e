"""A lecture hall that misbehaves: ``python -m benchmarks.chaos [--workers 2] [--visitors 24] [--double-clicks 1000]``.

Serves the app as ``make serve`` does (``--workers`` app processes behind nginx, :func:`deploy.serve.serving`; 0:
one ``streamlit run app.py`` and no kill), and sends it :mod:`benchmarks.chaos_visitors`: impatient double
clicks during heavy work (Translate with the attribution view or the logit lens on a sentence of its own, the
Attention page's ablation sweep), visitors who leave mid-computation, hostile links. ``--kill-after`` seconds in,
one worker is killed with SIGKILL (the supervisor starts it again); its visitors lose their sessions and start new
ones. The run ends once ``--double-clicks`` double clicks were sent (or after ``--minutes``); then every visitor
leaves, and each worker's gate (read from ``/_stcore/metrics``, :mod:`serving.metrics`) must go idle within
``--settle`` seconds and serve a new sentence to a fresh visitor.

Reported: double clicks sent and merged, departures mid-computation, hostile links, the kill and the restart,
errors seen by clients by kind (``exception``: a traceback drawn in a page), tracebacks in the workers' logs,
lost steps (``mismatch``: a surviving session whose page is not at the step its clicks lead to), and per worker
the gate's slots still busy after the settle (wedged), the line, the shared waits, the cache's bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

from benchmarks.app_server import ROOT, healthy, serve
from benchmarks.chaos_visitors import KINDS, Chaos, Tally
from benchmarks.load_client import Visitor
from benchmarks.load_stats import errors_cell, fmt, summary
from benchmarks.table import print_table
from serving.metrics import read as read_metrics

#: The workers' step log (:data:`ui.widgets.STEP_LOG`): every step callback and drawing of the step buttons, per
#: session, so that a lost step is shown with what the server did for that session.
STEP_LOG_ENV = "ATTENTION_EXPLORER_STEP_LOG"
STEP_LOG = ROOT / "test-artifacts" / "chaos-steps.jsonl"
#: Errors that end a session without being anyone's bug when its worker was killed.
CUT_OFF = ("disconnect", "timeout", "http")


def gate_stats(worker_url: str) -> dict[str, int] | None:
    """The gate's numbers of the app process at ``worker_url`` (``None``: it did not answer)."""
    try:
        with urllib.request.urlopen(f"{worker_url}/_stcore/metrics", timeout=5) as r:
            return read_metrics(r.read().decode())
    except OSError:
        return None


@contextmanager
def served(workers: int):
    """Yields ``(front URL, [(name, worker URL, pid getter, log path)], kill)``; ``kill()`` SIGKILLs one worker."""
    if workers <= 0:
        log = ROOT / "test-artifacts" / "streamlit-chaos.log"
        with serve(log) as url:
            yield url, [("app", url, lambda: None, log)], None
        return
    from deploy.serve import serving

    with serving(workers=workers, say=lambda line: print(f"  [serve] {line}", file=sys.stderr)) as cluster:
        children = cluster.workers
        ws = [(c.name, f"http://127.0.0.1:{c.port}", (lambda c=c: c.pid), c.log) for c in children]

        def kill() -> str:
            victim = children[0]
            os.kill(victim.pid, signal.SIGKILL)
            return victim.name

        yield cluster.url, ws, kill


async def run(url: str, workers: list, kill, args) -> dict:
    tally, outcomes, stop = Tally(), [], asyncio.Event()
    killed: dict = {}

    def record(outcome) -> None:
        outcome.at = time.monotonic()
        outcomes.append(outcome)

    async def visitor_loop(index: int) -> None:
        does = Chaos(KINDS[index % len(KINDS)], index, args.seed, tally)
        await asyncio.sleep(args.ramp * index / args.visitors)
        while not stop.is_set():
            if not await does.visit(url, args.timeout, stop, record):
                await asyncio.sleep(1.0)  # a lost session: come back as a new visitor
            await asyncio.sleep(does.rng.uniform(*args.think))  # between two visits

    async def killer() -> None:
        if kill is None or args.kill_after < 0:
            return
        await asyncio.sleep(args.kill_after)
        t0 = time.monotonic()
        killed.update(worker=kill(), at=t0)
        _, worker_url, _, _ = next(w for w in workers if w[0] == killed["worker"])
        while not stop.is_set():
            await asyncio.sleep(0.5)
            if await asyncio.to_thread(healthy, worker_url):
                killed["back_s"] = time.monotonic() - t0
                return

    # the first visit loads the model and imports the pages: not what this measures
    for _, worker_url, _, _ in workers:
        warm = Visitor(worker_url, 180)
        await warm.open("", urlencode({"text": "My brother lives in Berlin.", "attr": 1}))
        await warm.close()
    start = time.monotonic()
    tasks = [asyncio.create_task(visitor_loop(i)) for i in range(args.visitors)] + [asyncio.create_task(killer())]
    while time.monotonic() - start < args.minutes * 60 and tally.double_clicks < args.double_clicks:
        await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait(tasks, timeout=args.timeout + 15)
    for task in tasks:
        task.cancel()
    window = time.monotonic() - start
    # everyone has left: each gate must go idle and serve a new sentence
    settled, idle_s = {}, {}
    t0 = time.monotonic()
    for name, worker_url, _, _ in workers:
        while True:
            stats = await asyncio.to_thread(gate_stats, worker_url)
            busy = stats is None or any(stats.get(k, 0) for k in ("busy", "running", "waiting", "sharing"))
            if not busy or time.monotonic() - t0 > args.settle:
                break
            await asyncio.sleep(1.0)
        settled[name], idle_s[name] = stats, (None if busy else time.monotonic() - t0)
    probes = {}
    for name, worker_url, _, _ in workers:
        probe = Visitor(worker_url, 120)
        outcome = await probe.open("", urlencode({"text": f"The probe number {int(time.time()) % 997} is here."}))
        await probe.close()
        probes[name] = outcome
        if not settled[name]:  # restarted and never visited since: its gate is published by its first run
            settled[name] = await asyncio.to_thread(gate_stats, worker_url)
    return {
        "tally": tally,
        "outcomes": outcomes,
        "window_s": window,
        "killed": killed,
        "settled": settled,
        "idle_s": idle_s,
        "probes": probes,
    }


def log_tracebacks(path: Path) -> int:
    try:
        return path.read_text(errors="replace").count("Traceback (most recent call last)")
    except OSError:
        return 0


def report(result: dict, workers: list, args) -> int:
    tally, outcomes, killed = result["tally"], result["outcomes"], result["killed"]
    kill_at = killed.get("at")
    back = kill_at + (killed.get("back_s") or 0) + 5 if kill_at else None
    during_kill = lambda o: kill_at is not None and kill_at - 1 <= o.at <= back  # noqa: E731
    survivors = [o for o in outcomes if not (during_kill(o) and set(o.errors) & set(CUT_OFF))]
    counts = Counter(e for o in survivors for e in o.errors)
    cut = sum(1 for o in outcomes if o not in survivors)
    doubles = summary([o.seconds for o in outcomes if o.action.endswith("×2") and o.seconds is not None])
    wedged = sum((s or {}).get("busy", 0) + (s or {}).get("running", 0) for s in result["settled"].values())
    tracebacks = result["tracebacks"]
    print(
        f"\n### chaos: {len(workers)} worker(s), {args.visitors} visitors "
        f"({', '.join(f'{n} {k}' for k, n in Counter(KINDS[i % len(KINDS)] for i in range(args.visitors)).items())}),"
        f" {result['window_s']:.0f} s, {os.cpu_count()} CPUs shared with this client, load average "
        f"{os.getloadavg()[0]:.1f} at the end\n"
    )
    rows = [
        ("double clicks during heavy work (sweeps among them)", f"{tally.double_clicks} ({tally.sweeps})"),
        ("… merged by Streamlit into one run", str(tally.merged)),
        ("… their second run read late (after the click's wait)", str(tally.late)),
        ("double click p50 / p95 s", f"{fmt(doubles['p50'])} / {fmt(doubles['p95'])}"),
        ("visitors who left mid-computation", str(tally.left)),
        ("hostile links opened", str(tally.hostile)),
        (
            "worker killed (SIGKILL)",
            f"{killed.get('worker', '—')} at {args.kill_after:g} s, back in {fmt(killed.get('back_s'), 1)} s"
            if kill_at
            else "—",
        ),
        ("sessions cut off by the kill", str(cut)),
        ("errors seen by surviving sessions", errors_cell(counts)),
        ("tracebacks drawn in pages", str(counts.get("exception", 0))),
        ("tracebacks in the workers' logs", str(tracebacks)),
        ("lost steps (a surviving session off its own step)", str(counts.get("mismatch", 0))),
        ("wedged slots after the settle", str(wedged)),
    ]
    for name, stats in result["settled"].items():
        s = stats or {}
        probe = result["probes"][name]
        rows.append(
            (
                f"{name}: idle after / gate / probe",
                f"{fmt(result['idle_s'][name], 0)} s; busy {s.get('busy')}, "
                f"waiting {s.get('waiting')}, sharing {s.get('sharing')}, {s.get('entries')} results "
                f"{(s.get('bytes') or 0) / 2**20:.1f} MiB of {(s.get('budget') or 0) / 2**20:.0f}, "
                f"{s.get('evicted')} evicted; a new sentence in {fmt(probe.seconds)} s"
                f"{' ' + ','.join(probe.errors) if probe.errors else ''}",
            )
        )
    print_table(rows)
    for line in sorted({f"{o.action}: {', '.join(o.errors)}: {o.detail}"[:300] for o in survivors if o.errors})[:8]:
        print(f"- {line}")
    for o in survivors:
        if "mismatch" in o.errors and (m := re.search(r"session ([0-9a-f-]{36})", o.detail)):
            print(f"  the server's step log of session {m.group(1)} (the last 12 events):")
            for event in session_steps(Path(os.environ.get(STEP_LOG_ENV, STEP_LOG)), m.group(1))[-12:]:
                print(f"    {event}")
    ok = (
        not wedged
        and not counts.get("exception")
        and not counts.get("mismatch")
        and not tracebacks
        and all(not p.errors for p in result["probes"].values())
    )
    return 0 if ok else 1


def session_steps(path: Path, session: str) -> list[str]:
    """The step log's events of one session, one line each (time, worker pid, event and its fields)."""
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        event = json.loads(raw)
        if event.get("session") == session:
            fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("t", "pid", "session", "event"))
            lines.append(f"{event['t']:.3f} pid {event['pid']} {event['event']} {fields}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="app processes behind nginx (0: one, no nginx, no kill)")
    p.add_argument("--visitors", type=int, default=24)
    p.add_argument("--double-clicks", type=int, default=1000, help="the run ends after this many double clicks")
    p.add_argument("--minutes", type=float, default=15.0, help="... or after this long")
    p.add_argument("--kill-after", type=float, default=60.0, help="seconds before one worker is killed (-1: never)")
    p.add_argument("--ramp", type=float, default=10.0, help="seconds over which the visitors arrive")
    p.add_argument("--settle", type=float, default=120.0, help="seconds the gates may take to go idle at the end")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one action may take")
    p.add_argument(
        "--think",
        type=float,
        nargs=2,
        default=(2.0, 6.0),
        metavar=("MIN", "MAX"),
        help="seconds between one visitor's visits (a double clicker thinks 0.2-1.2 s between clicks)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if STEP_LOG_ENV not in os.environ:  # the workers inherit it
        STEP_LOG.parent.mkdir(parents=True, exist_ok=True)
        STEP_LOG.write_text("")
        os.environ[STEP_LOG_ENV] = str(STEP_LOG)
    with served(args.workers) as (url, workers, kill):
        result = asyncio.run(run(url, workers, kill, args))
        result["tracebacks"] = sum(log_tracebacks(w[3]) for w in workers)  # the logs go with the cluster
    return report(result, workers, args)


if __name__ == "__main__":
    sys.exit(main())
