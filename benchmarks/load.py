"""A lecture hall on one server: ``python -m benchmarks.load [--scenario lecture|demo|attention|lens|mixed|all]``
(and ``attribution``).

Simulated visitors (:mod:`benchmarks.load_client`: Streamlit's own websocket protocol, no browsers, so the
numbers are the server's) arrive in levels (``--levels 1,10,25,50,100,200``; each level adds visitors, spread
over ``--ramp`` seconds, and is held ``--hold`` seconds) and act every 1.5–4.5 s (``--think``):

* **lecture**: everyone opens Translate on the lecturer's sentence and steps through it (Next to the last step,
  then Back to step 0, and so on: the clicks never stop);
* **demo**: the same, each visitor with a sentence of its own (every first load decodes a new sentence);
* **attention**: the Attention page, changing layer, head, attention kind and tab;
* **lens**: the lecture with the logit lens on (``?lens=1``);
* **burst**: "everyone type your own sentence now": 100 visitors with sentences of their own arriving within 5 s
  (its default ``--levels 100 --ramp 5``);
* **attribution**: the lecture with the attribution view on (``?attr=1``: attention beside gradient attribution);
* **mixed**: a third of the visitors each of lecture, demo and attention.

Each action is timed from the BackMsg sent to its ``script_finished``; a first load from the first request to the
first run's end. Errors are counted by kind: ``exception`` (an exception element drawn), ``error status`` (a run
that ended with an error), ``disconnect``, ``timeout``, ``http`` (the page did not load), ``no widget`` (the button
or option was missing) and ``mismatch``: the step drawn (``Step k of N``) or, on the Attention page, the layer /
head / kind the server wrote into the link differs from what this visitor's own clicks make it, which is how a
session leaking into another would show. Per level: the server's CPU (user + sys of its process tree, in cores)
and resident memory, MB per added session, clicks served per second, and this client's own CPU (it shares the
machine). The app is served here (``streamlit run app.py``, ``--server-arg`` for more flags, ``--app-dir`` for
another checkout) or targeted at ``--url`` (127.0.0.1 / localhost only; ``--pids`` names the server processes
when they do not listen on that port themselves, e.g. behind nginx). ``--browser-check`` has one real Chromium
step a sentence at the peak level and compare what it shows with a decoding computed here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote_plus

from benchmarks.app_server import ROOT, ServerError, healthy, serve
from benchmarks.load_browser_check import browser_check
from benchmarks.load_client import NotLocalError, Outcome, Visitor, local_base
from benchmarks.load_scenarios import LECTURE_TEXT, SCENARIO_DEFAULTS, SCENARIOS, behaviour
from benchmarks.load_stats import TABLE_HEADER, ProcessProbe, level_row
from benchmarks.table import print_table

MAX_ACTIONS = 100_000  # per visitor: the hold time ends a run long before
MAX_RECONNECTS = 3  # per visitor, after a timeout or a disconnect


# --- a run: levels of visitors ------------------------------------------------------------------------------
@dataclass
class Options:
    """How a run goes: ``levels`` (cumulative visitors), ``ramp_s`` / ``hold_s`` per level (seconds), ``think_s``
    (uniform range between actions, seconds), ``actions`` (each visitor stops acting after that many; the level
    then ends early), ``timeout_s`` per action."""

    levels: list[int]
    hold_s: float = 60.0
    ramp_s: float = 20.0
    think_s: tuple[float, float] = (1.5, 4.5)
    actions: int | None = None
    timeout_s: float = 60.0
    seed: int = 0


@dataclass
class Record:
    """Everything measured at one level."""

    visitors: int
    first_loads: list[Outcome] = field(default_factory=list)
    actions: list[Outcome] = field(default_factory=list)
    window_s: float = 0.0
    server: dict = field(default_factory=dict)  # cpu_cores, rss_mb (ProcessProbe.sample deltas)
    client_cpu_cores: float | None = None
    browser_check: dict | None = None


async def visitor_task(
    index: int,
    scenario: str,
    url: str,
    opts: Options,
    records: list[Record],
    level: list[int],
    stop: asyncio.Event,
    done: asyncio.Event,
    delay_s: float,
) -> None:
    """One visitor from its arrival (``delay_s`` after its level starts) until ``stop``: open, act, think; a
    timeout or disconnect reconnects it (at most :data:`MAX_RECONNECTS` times)."""
    rng = random.Random(opts.seed * 7919 + index)
    if await _pause(stop, delay_s):
        done.set()
        return
    does = behaviour(scenario, index, opts.seed)
    cap = min(opts.actions or MAX_ACTIONS, MAX_ACTIONS)
    acted = 0
    for _ in range(MAX_RECONNECTS + 1):
        visitor = Visitor(url, opts.timeout_s)
        try:
            outcome = await visitor.open(does.page, does.query)
            does.opened(visitor, outcome)
            records[level[0]].first_loads.append(outcome)
            while not outcome.fatal and acted < cap and not stop.is_set():
                if await _pause(stop, rng.uniform(*opts.think_s)):
                    break
                at = level[0]
                outcome = await does.act(visitor)
                records[at].actions.append(outcome)
                acted += 1
            if not outcome.fatal:
                done.set()
                await stop.wait()  # the session stays open (and counts in the server's memory) until the end
                return
        finally:
            await visitor.close()
        if await _pause(stop, 1.0):
            break
    done.set()


async def _pause(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``stop`` is set first; True when stopped."""
    try:
        await asyncio.wait_for(stop.wait(), max(seconds, 0.0))
        return True
    except asyncio.TimeoutError:
        return stop.is_set()


async def run_levels(url: str, scenario: str, opts: Options, probe: ProcessProbe | None, check=None) -> list[Record]:
    """Ramp ``opts.levels`` visitors against ``url`` and measure each level. ``check`` (a blocking callable
    returning a dict) runs in a thread at the peak level, after its ramp."""
    # The first visit of a page loads the model and imports the page's modules: not what a level measures.
    for page in sorted({behaviour(scenario, i, opts.seed).page for i in range(len(SCENARIOS))}):
        warm = Visitor(url, max(opts.timeout_s, 120))
        await warm.open(page, f"text={quote_plus(LECTURE_TEXT)}")
        await warm.close()
    await asyncio.sleep(1.0)
    records = [Record(n) for n in opts.levels]
    level, stop = [0], asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    dones: list[asyncio.Event] = []
    before = probe.sample() if probe else None
    for i, n in enumerate(opts.levels):
        level[0] = i
        t0, c0 = time.monotonic(), _own_cpu()
        new = range(len(tasks), n)
        for j in new:
            dones.append(asyncio.Event())
            delay = opts.ramp_s * (j - new.start) / max(len(new), 1)
            tasks.append(
                asyncio.create_task(visitor_task(j, scenario, url, opts, records, level, stop, dones[-1], delay))
            )
        checking = None
        if check and i == len(opts.levels) - 1:
            await asyncio.sleep(opts.ramp_s)
            checking = asyncio.create_task(asyncio.to_thread(check))
        end = t0 + opts.ramp_s + opts.hold_s
        while time.monotonic() < end and not (opts.actions and all(d.is_set() for d in dones)):
            await asyncio.sleep(0.2)
        if checking:
            records[i].browser_check = await checking
        records[i].window_s = time.monotonic() - t0
        records[i].client_cpu_cores = (_own_cpu() - c0) / records[i].window_s
        if probe is not None and before is not None:
            after = probe.sample()
            records[i].server = probe.delta(before, after)
            before = after
    stop.set()
    await asyncio.wait(tasks, timeout=opts.timeout_s + 10)
    return records


def _own_cpu() -> float:
    """This process's user + system CPU seconds (its threads included, not its child processes)."""
    t = os.times()
    return t.user + t.system


# --- the command ------------------------------------------------------------------------------------------------
def server_env(args: list[str]) -> dict[str, str]:
    """``--section.option=value`` flags for ``streamlit run`` as the environment variables Streamlit reads
    (``--runner.postScriptGC=false`` → ``STREAMLIT_RUNNER_POST_SCRIPT_GC=false``).

    Raises:
        SystemExit: a flag that is not ``--key=value`` or names no Streamlit option.
    """
    from streamlit import config

    env = {}
    for arg in args:
        key, eq, value = arg.lstrip("-").partition("=")
        option = config._config_options_template.get(key)
        if not eq or option is None:
            raise SystemExit(
                f"--server-arg {arg!r}: expected --section.option=value with a Streamlit option "
                "(streamlit config show lists them)"
            )
        env[option.env_var] = value
    return env


def app_dir_env(app_dir: Path, root: Path = ROOT) -> dict[str, str]:
    """Environment variables that make ``app_dir``'s app run with its own settings although :func:`serve` starts
    it from ``root``: Streamlit reads ``root``'s ``.streamlit/config.toml`` too (the working directory's), so each
    scalar option set there and not in ``app_dir``'s own file goes back to Streamlit's default."""
    import tomllib

    from streamlit import config

    def keys(folder: Path) -> set[str]:
        path = folder / ".streamlit" / "config.toml"
        data = tomllib.loads(path.read_text()) if path.is_file() else {}
        return {f"{section}.{k}" for section, opts in data.items() if isinstance(opts, dict) for k in opts}

    if app_dir.resolve() == root.resolve():
        return {}
    env = {}
    for key in sorted(keys(root) - keys(app_dir)):
        option = config._config_options_template.get(key)
        default = option.default_val if option else None
        if option is not None and isinstance(default, (bool, int, float, str)):  # lists, unset: nothing to put back
            env[option.env_var] = str(default).lower() if isinstance(default, bool) else str(default)
    return env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--scenario",
        default="lecture",
        help="lecture, demo, attention, lens (the lecture with the logit lens on), attribution (with the "
        "attribution view on), burst, mixed, a comma list, or all",
    )
    p.add_argument(
        "--levels", default=None, help="visitors at each level, cumulative (default 1,10,25,50,100,200; burst: 100)"
    )
    p.add_argument("--hold", type=float, default=60.0, help="seconds each level is held after its ramp")
    p.add_argument(
        "--ramp",
        type=float,
        default=None,
        help="seconds over which a level's new visitors arrive (default 20; burst: 5)",
    )
    p.add_argument("--think", default="1.5,4.5", help="seconds between a visitor's actions: MIN,MAX (uniform)")
    p.add_argument("--actions", type=int, default=None, help="each visitor stops acting after this many")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds an action may take before it is an error")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--url", help="a running server or front (127.0.0.1/localhost only) instead of serving app.py")
    p.add_argument("--pids", help="server process ids to measure (comma list; default: whoever listens on the port)")
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="--SECTION.OPTION=VALUE",
        help="a streamlit flag for the served app, e.g. --server-arg=--runner.postScriptGC=false",
    )
    p.add_argument("--app-dir", type=Path, default=ROOT, help="serve app.py from this checkout (e.g. a worktree)")
    p.add_argument("--browser-check", action="store_true", help="one real Chromium steps a sentence at the peak")
    p.add_argument("--json", type=Path, help="also write every number to this file")
    args = p.parse_args(argv)
    try:
        args.levels = None if args.levels is None else [int(n) for n in args.levels.split(",")]
        args.think = tuple(float(s) for s in args.think.split(","))
    except ValueError:
        p.error("--levels takes whole numbers (1,10,25), --think MIN,MAX in seconds")
    if (
        len(args.think) != 2
        or not 0 <= args.think[0] <= args.think[1]
        or args.levels is not None
        and (args.levels != sorted(args.levels) or args.levels[0] < 1)
    ):
        p.error("--levels must rise from at least 1; --think is MIN,MAX with 0 <= MIN <= MAX")
    names = SCENARIOS + ("mixed",) if args.scenario == "all" else tuple(args.scenario.split(","))
    if bad := [s for s in names if s not in SCENARIOS + ("mixed",)]:
        p.error(f"unknown scenario {bad}: choose from {', '.join(SCENARIOS + ('mixed', 'all'))}")
    args.scenarios = names
    if args.url:
        try:
            local_base(args.url)
        except NotLocalError as exc:
            p.error(str(exc))
    args.env = server_env(args.server_arg)
    if not (args.app_dir / "app.py").is_file():
        p.error(f"--app-dir {args.app_dir}: no app.py there")
    return args


def options(args: argparse.Namespace, scenario: str) -> Options:
    """The run's :class:`Options` for ``scenario``: the command line's, else the scenario's own levels and ramp
    (:data:`~benchmarks.load_scenarios.SCENARIO_DEFAULTS`), else 1,10,25,50,100,200 over 20 s."""
    own = SCENARIO_DEFAULTS.get(scenario, {})
    levels = args.levels or own.get("levels", [1, 10, 25, 50, 100, 200])
    ramp_s = args.ramp if args.ramp is not None else own.get("ramp_s", 20.0)
    return Options(levels, args.hold, ramp_s, args.think, args.actions, args.timeout, args.seed)


def measure(args: argparse.Namespace, url: str, scenario: str, check) -> list[Record]:
    pids = [int(p) for p in args.pids.split(",")] if args.pids else None
    probe = ProcessProbe(pids=pids, port=local_base(url)[2])
    return asyncio.run(run_levels(url, scenario, options(args, scenario), probe if probe.pids else None, check))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.url and not healthy(args.url.rstrip("/")):
        print(f"nothing answers Streamlit's health check at {args.url}", file=sys.stderr)
        return 2
    check = None
    if args.browser_check:
        check = browser_check(args.app_dir)  # loads torch and the model: only when asked for
    results = {}
    for scenario in args.scenarios:
        try:
            if args.url:
                records = measure(args, args.url.rstrip("/"), scenario, check and (lambda: check(args.url)))
            else:
                log = ROOT / "test-artifacts" / f"streamlit-load-{scenario}.log"
                env = app_dir_env(args.app_dir) | args.env
                with serve(log, env, script=str(args.app_dir.resolve() / "app.py")) as url:
                    records = measure(args, url, scenario, check and (lambda u=url: check(u)))
        except ServerError as exc:
            print(f"the app did not start: {exc}", file=sys.stderr)
            return 2
        results[scenario] = records
        target = args.url or " ".join(
            [
                "streamlit run",
                str(args.app_dir / "app.py"),
                *args.server_arg,
                *(f"{k}={v}" for k, v in app_dir_env(args.app_dir).items()),
            ]
        )
        ramp_s = options(args, scenario).ramp_s
        print(
            f"\n### {scenario}: {target}, ramp {ramp_s:g} s, hold {args.hold:g} s, think "
            f"{args.think[0]:g}–{args.think[1]:g} s, {os.cpu_count()} CPUs shared with this client\n"
        )
        rows = [level_row(r, records[i - 1] if i else None) for i, r in enumerate(records)]
        print_table([row for row, _ in rows], TABLE_HEADER)
        for r in records:
            if r.browser_check:
                print(f"\nbrowser check at {r.visitors} visitors: {r.browser_check}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {s: [level_row(r, rs[i - 1] if i else None)[1] for i, r in enumerate(rs)] for s, rs in results.items()},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
