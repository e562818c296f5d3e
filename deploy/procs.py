"""Child processes of the server: started in a process group of their own, stopped promptly, watched for health.

Each child gets its own session (a terminal's Ctrl-C reaches the supervisor only, which stops them in order) and,
on Linux, a parent-death signal: if the supervisor itself is killed, they get SIGTERM instead of living on.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Mapping, Sequence

from deploy import DeployError

#: How long a stopped process may take after SIGTERM before it gets SIGKILL (an orchestrator waits 30 s at most).
GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:  # runs in the child between fork and exec: no allocation, no imports
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``cmd`` in a new session, its stdout and stderr appended to ``log_path``.

    Raises:
        DeployError: the program could not be started (missing, not executable).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            return subprocess.Popen(
                list(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise DeployError(f"cannot start {cmd[0]}: {exc.strerror}") from exc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group: whatever the process started goes too
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(procs: Sequence[subprocess.Popen], grace_s: float = GRACE_S) -> None:
    """SIGTERM every process group of ``procs`` at once, wait up to ``grace_s`` seconds for all of them, then
    SIGKILL the groups of those still alive and reap them. Returns within about ``grace_s`` + 1 s; a process
    already stopped is left alone."""
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ensure_port_free(host: str, port: int) -> None:
    """Raises:
    DeployError: ``host:port`` cannot be listened on (in use, or a privileged port for a normal user)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx does: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DeployError(f"port {port} on {host} is in use; choose another with --port") from exc
            raise DeployError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url`` (a health endpoint) answers 200 ``ok`` within ``timeout_s`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except OSError:
        return False


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file, indented, for an error message ('' when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def wait_healthy(checks: Mapping[str, tuple[subprocess.Popen | None, str, Path | None]], timeout_s: float) -> None:
    """Wait until every check answers its health URL. ``checks`` maps a name to (its process, or None for one
    started elsewhere; the URL; its log, or None).

    Raises:
        DeployError: a process exited first, or a check did not pass within ``timeout_s`` seconds; the message
            names it and quotes the end of its log.
    """

    def failure(name: str, what: str) -> DeployError:
        log = checks[name][2]
        return DeployError(f"{name} {what}" + (f"; the end of {log}:\n{log_tail(log)}" if log else ""))

    pending = dict(checks)
    deadline = time.monotonic() + timeout_s
    while pending:
        for name, (proc, url, _) in list(pending.items()):
            if healthy(url, timeout_s=1.0):
                del pending[name]
            elif proc is not None and proc.poll() is not None:
                raise failure(name, f"exited with code {proc.returncode} before it answered {url}")
        if pending and time.monotonic() > deadline:
            name, (_, url, _) = next(iter(pending.items()))
            raise failure(name, f"did not answer {url} within {timeout_s:.0f} s")
        if pending:
            time.sleep(0.2)
