"""The load benchmark's numbers (:mod:`benchmarks.load`): the server's CPU and memory read from ``/proc``, the
percentiles of the timings, and one table row per level.

CPU is user + system time (``/proc/<pid>/stat``, clock ticks) summed over the server's processes and their
descendants, as cores (CPU seconds per second of wall time); memory is ``VmRSS`` summed the same way, in MB
(10^6 bytes). Linux only; elsewhere :class:`ProcessProbe` finds no process and the columns read "—".
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

PROC = Path("/proc")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
TABLE_HEADER = (
    "visitors",
    "first load p50 / p95 s",
    "action p50 / p95 / max s",
    "errors",
    "server CPU (cores)",
    "server RSS MB",
    "MB per session",
    "clicks/s served",
    "client CPU (cores)",
)


def _stat(pid: int) -> tuple[int, float] | None:
    """``(parent pid, user + system CPU seconds)`` of ``pid``, or ``None`` when it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) * TICK_S


def _rss_bytes(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def listening_pids(port: int) -> list[int]:
    """The processes holding a listening TCP socket on ``port`` (through ``/proc/net/tcp*`` and each process's
    open files); empty when none is visible to this user."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    pids = []
    for proc in PROC.glob("[0-9]*"):
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return sorted(pids)


class ProcessProbe:
    """The server's processes: ``pids`` given, else those listening on ``port``; each sample adds their
    descendants (a worker a front started)."""

    def __init__(self, pids: list[int] | None = None, port: int | None = None):
        self.pids = pids or (listening_pids(port) if port else [])

    def tree(self) -> dict[int, float]:
        """pid → CPU seconds, for :attr:`pids` and every descendant alive now."""
        stats = {int(p.name): s for p in PROC.glob("[0-9]*") if (s := _stat(int(p.name)))}
        wanted, frontier = set(), [p for p in self.pids if p in stats]
        while frontier:
            pid = frontier.pop()
            wanted.add(pid)
            frontier += [c for c, (ppid, _) in stats.items() if ppid == pid and c not in wanted]
        return {pid: stats[pid][1] for pid in wanted}

    def sample(self) -> dict:
        """``{"t": monotonic s, "cpu_s": CPU seconds, "rss_bytes": resident bytes, "processes": n}`` now."""
        tree = self.tree()
        return {
            "t": time.monotonic(),
            "cpu_s": sum(tree.values()),
            "rss_bytes": sum(map(_rss_bytes, tree)),
            "processes": len(tree),
        }

    def reset_peak(self) -> bool:
        """Start the kernel's high-water mark of resident memory (``VmHWM``) again from now, for every process of
        the tree (``/proc/PID/clear_refs``, Linux ≥ 4.0; the server's own user or root). Returns whether it could."""
        try:
            for pid in self.tree():
                (PROC / str(pid) / "clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def peak_bytes(self) -> int:
        """The largest resident memory each process of the tree reached since it started or :meth:`reset_peak`
        (``VmHWM``, which the kernel updates on every page it maps: nothing between two samples is missed), summed."""
        return sum(_rss_bytes(pid, "VmHWM") for pid in self.tree())

    @staticmethod
    def delta(before: dict, after: dict) -> dict:
        """``{"cpu_cores", "rss_mb"}`` between two samples: CPU seconds per wall second, RSS at ``after``.
        (A process that exited in between takes its CPU time with it.)"""
        wall = max(after["t"] - before["t"], 1e-9)
        return {
            "cpu_cores": max(after["cpu_s"] - before["cpu_s"], 0.0) / wall,
            "rss_mb": after["rss_bytes"] / 1e6,
            "rss_mb_before": before["rss_bytes"] / 1e6,
        }


def percentile(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile (0–100) of ``values``, interpolated linearly between ranks (NumPy's default);
    ``None`` for no values."""
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * p / 100
    lo = int(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def summary(seconds: list[float]) -> dict:
    """``{"n", "p50", "p95", "max"}`` of timings in seconds (``None`` where there are none)."""
    return {
        "n": len(seconds),
        "p50": percentile(seconds, 50),
        "p95": percentile(seconds, 95),
        "max": max(seconds) if seconds else None,
    }


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def errors_cell(counts: Counter) -> str:
    """``"0"`` or ``"3 (2 timeout, 1 mismatch)"``."""
    total = sum(counts.values())
    detail = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    return f"{total} ({detail})" if total else "0"


def level_row(record, previous=None) -> tuple[tuple[str, ...], dict]:
    """One level's table row (:data:`TABLE_HEADER`) and every number behind it as a dict, from a
    :class:`benchmarks.load.Record` (``previous``: the level before, for MB per added session)."""
    loads = summary([o.seconds for o in record.first_loads if o.seconds is not None and not o.errors])
    acts = summary([o.seconds for o in record.actions if o.seconds is not None and not o.errors])
    by_action = {
        name: summary(
            [o.seconds for o in record.actions if o.action == name and o.seconds is not None and not o.errors]
        )
        for name in sorted({o.action for o in record.actions})
    }
    counts = Counter(e for o in record.first_loads + record.actions for e in o.errors)
    samples = [
        f"{o.action}: {', '.join(o.errors)}: {o.detail}" for o in record.first_loads + record.actions if o.errors
    ][:5]
    server = record.server or {}
    added = record.visitors - (previous.visitors if previous else 0)
    rss_before = (previous.server or {}).get("rss_mb") if previous else server.get("rss_mb_before")
    per_session = (server["rss_mb"] - rss_before) / added if server and rss_before is not None and added else None
    served = acts["n"] / record.window_s if record.window_s else None
    numbers = {
        "visitors": record.visitors,
        "window_s": record.window_s,
        "first_load_s": loads,
        "action_s": acts,
        "by_action_s": by_action,
        "errors": dict(counts),
        "error_samples": samples,
        "server_cpu_cores": server.get("cpu_cores"),
        "server_rss_mb": server.get("rss_mb"),
        "mb_per_session": per_session,
        "clicks_per_s": served,
        "client_cpu_cores": record.client_cpu_cores,
        "browser_check": record.browser_check,
    }
    row = (
        str(record.visitors),
        f"{fmt(loads['p50'])} / {fmt(loads['p95'])}",
        f"{fmt(acts['p50'])} / {fmt(acts['p95'])} / {fmt(acts['max'])}",
        errors_cell(counts),
        fmt(server.get("cpu_cores")),
        fmt(server.get("rss_mb"), 0),
        fmt(per_session, 1),
        fmt(served, 1),
        fmt(record.client_cpu_cores),
    )
    return row, numbers
