"""``python -m deploy.serve --workers N --port 8501``: N app workers behind nginx, each session kept on one.

Starts the workers (:mod:`deploy.worker`) on free local ports, waits until each answers ``/_stcore/health``, renders
the front's config (:mod:`deploy.nginx`) into a private temporary prefix, runs nginx in the foreground from it and
prints the URL. Then it supervises: a child that dies is started again after a back-off (1 s, doubling to 30 s
while it keeps dying) while nginx routes around it. SIGTERM or SIGINT stops nginx and the workers together:
SIGTERM, up to :data:`deploy.procs.GRACE_S` seconds, then SIGKILL.

``--upstream HOST:PORT`` (repeated) runs the front only, before workers started elsewhere (compose's app
containers). :func:`serving` is the same as a context manager, for tests and scripts.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from deploy import DeployError, nginx, worker
from deploy.procs import ensure_port_free, free_port, spawn, stop_all, wait_healthy

#: How long the workers and the front may take to answer their health checks at start.
STARTUP_TIMEOUT_S = 90.0
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
#: A child that stayed up this long is healthy again: its next restart waits FIRST_BACKOFF_S.
STABLE_S = 60.0
WORKER_HEALTH = "/_stcore/health"
FRONT_HEALTH = "/_front/health"


@dataclass
class Child:
    """A supervised process: how to start it again, and the process now."""

    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    health_url: str = ""
    port: int | None = None
    proc: subprocess.Popen | None = None  # replaced on each restart
    started: float = 0.0
    backoff_s: float = FIRST_BACKOFF_S
    restart_at: float | None = None
    restarts: int = 0

    def start(self) -> None:
        """Raises: DeployError: the program could not be started."""
        self.proc = spawn(self.cmd, self.log, self.env, self.cwd)
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        """Raises: DeployError: the child was never started."""
        if self.proc is None:
            raise DeployError(f"{self.name} was never started")
        return self.proc.pid


@dataclass
class Cluster:
    """A running front and its local workers (none with ``--upstream``). ``url`` is the front's base URL."""

    url: str
    prefix: Path
    workers: list[Child]
    front: Child | None = None
    say: Callable[[str], None] = print
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def children(self) -> list[Child]:
        return ([self.front] if self.front else []) + self.workers

    def pids(self) -> list[int]:
        """The pids of every process started directly (each leads a process group of its own)."""
        with self._lock:
            return [c.pid for c in self.children if c.proc is not None]

    def supervise_once(self, now: float) -> None:
        """Notice children that exited and start again those whose back-off is over."""
        with self._lock:
            if self._stopping.is_set():
                return
            for child in self.children:
                proc = child.proc
                if proc is None:  # never started: nothing to watch
                    continue
                if child.restart_at is None and proc.poll() is not None:
                    if now - child.started > STABLE_S:
                        child.backoff_s = FIRST_BACKOFF_S
                    child.restart_at = now + child.backoff_s
                    self.say(
                        f"{child.name} exited with code {proc.returncode}; "
                        f"restarting in {child.backoff_s:.0f} s (log: {child.log})"
                    )
                    child.backoff_s = min(child.backoff_s * 2, MAX_BACKOFF_S)
                elif child.restart_at is not None and now >= child.restart_at:
                    child.restart_at = None
                    try:
                        child.start()
                    except DeployError as exc:
                        self.say(f"{child.name}: {exc}")
                        continue  # its exit is noticed again on the next pass, with a longer back-off
                    child.restarts += 1
                    self.say(f"{child.name} restarted (pid {child.pid})")

    def supervise(self) -> None:
        """Run :meth:`supervise_once` twice a second until :meth:`stop`."""
        while not self._stopping.wait(0.5):
            self.supervise_once(time.monotonic())

    def stop(self) -> None:
        """Stop supervising, then every child at once (SIGTERM, SIGKILL after the grace period). Idempotent."""
        self._stopping.set()
        with self._lock:
            stop_all([c.proc for c in self.children if c.proc is not None])


def _url(host: str, port: int) -> str:
    """The URL to reach ``host:port`` from this machine (a wildcard address through loopback)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{_hostport(host, port)}"


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _local_workers(n: int, prefix: Path, app: str, demo: bool) -> list[Child]:
    # one secret for all: a session that fails over keeps a valid XSRF token (deploy.worker says more)
    env = worker.environment(
        os.environ,
        demo=demo,
        threads=max(1, _cpus() // n),
        cookie_secret=os.environ.get(worker.SECRET_ENV) or secrets.token_hex(32),
    )
    children = []
    for i in range(1, n + 1):
        port = free_port()
        children.append(
            Child(
                f"w{i}",
                worker.command(port, "127.0.0.1", app),
                prefix / "logs" / f"w{i}.log",
                env,
                worker.ROOT,
                _url("127.0.0.1", port) + WORKER_HEALTH,
                port,
            )
        )
    return children


def _start(cluster: Cluster, nginx_bin: str, listen: str, upstreams: Sequence[str]) -> None:
    """Start the workers (unless ``upstreams``), wait for them, then the front. Raises DeployError."""
    if upstreams:
        names = [(f"w{i}", nginx.resolve(a)) for i, a in enumerate(upstreams, 1)]
        wait_healthy({n: (None, f"http://{a}{WORKER_HEALTH}", None) for n, a in names}, STARTUP_TIMEOUT_S)
    else:
        names = [(c.name, f"127.0.0.1:{c.port}") for c in cluster.workers]
        for child in cluster.workers:
            child.start()
        wait_healthy({c.name: (c.proc, c.health_url, c.log) for c in cluster.workers}, STARTUP_TIMEOUT_S)
    nginx.prepare_prefix(cluster.prefix, nginx.render([nginx.Upstream(n, a) for n, a in names], listen))
    nginx.check(nginx_bin, cluster.prefix)
    front = Child(
        "nginx",
        nginx.command(nginx_bin, cluster.prefix),
        cluster.prefix / "logs" / "nginx.log",
        health_url=cluster.url + FRONT_HEALTH,
    )
    with cluster._lock:
        front.start()
        cluster.front = front
    wait_healthy({"nginx": (front.proc, front.health_url, cluster.prefix / nginx.ERROR_LOG)}, STARTUP_TIMEOUT_S)


@contextmanager
def serving(
    workers: int = 2,
    port: int | None = None,
    host: str = "127.0.0.1",
    upstreams: Sequence[str] = (),
    demo: bool = False,
    nginx_path: str | None = None,
    app: str = worker.APP,
    say: Callable[[str], None] = print,
) -> Iterator[Cluster]:
    """Start ``workers`` app workers (or use ``upstreams``, ``HOST:PORT`` each, started elsewhere) behind nginx
    listening on ``host:port`` (a free port when ``port`` is None); supervise them until the block ends, then stop
    everything (within about 6 s). ``say`` receives the restart notices.

    Yields the :class:`Cluster`. Its private prefix (the config, ``logs/``) is removed at the end, and kept after
    a DeployError that left logs there, which its message points into.

    Raises:
        DeployError: nginx is missing, the port is taken, an upstream does not resolve, or a worker or nginx
            did not start in :data:`STARTUP_TIMEOUT_S` seconds (the message quotes its log).
    """
    nginx_bin = nginx.find_nginx(nginx_path)
    if workers < 1 and not upstreams:
        raise DeployError("--workers must be at least 1")
    port = port or free_port(host)
    ensure_port_free(host, port)
    prefix = Path(tempfile.mkdtemp(prefix="attention-explorer-"))
    cluster = Cluster(
        _url(host, port), prefix, [] if upstreams else _local_workers(workers, prefix, app, demo), say=say
    )
    failed = False
    try:
        _start(cluster, nginx_bin, _hostport(host, port), upstreams)
        threading.Thread(target=cluster.supervise, name="deploy-supervisor", daemon=True).start()
        yield cluster
    except DeployError:
        failed = True  # the message points into the prefix's logs/
        raise
    finally:
        cluster.stop()
        if not (failed and any(prefix.glob("logs/*.log"))):
            shutil.rmtree(prefix, ignore_errors=True)


class _Stop(Exception):
    """SIGTERM or SIGINT arrived: leave the serving block (and stop everything) from wherever we are."""


def _on_signal(signum: int, frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the stopping
        signal.signal(sig, lambda *_: None)
    raise _Stop(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=_cpus(), help="app processes (default: the CPUs, %(default)s)")
    parser.add_argument("--port", type=int, default=8501, help="the front's port (default: %(default)s)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="the front's address (default: %(default)s; 0.0.0.0 in a container)"
    )
    parser.add_argument(
        "--demo", action="store_true", help="hosted-demo mode for the workers (ATTENTION_EXPLORER_DEMO=1)"
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="serve workers started elsewhere (repeat for each); --workers is then ignored",
    )
    parser.add_argument("--nginx", help="the nginx binary (default: $NGINX, nginx on the PATH, /usr/sbin/nginx)")
    parser.add_argument("--app", default=worker.APP, help=argparse.SUPPRESS)  # tests: an app that fails to start
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"deploy.serve: {message}", file=sys.stderr, flush=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    try:
        with serving(
            args.workers, args.port, args.host, args.upstream, args.demo, args.nginx, args.app, say
        ) as cluster:
            count = f"{len(args.upstream)} upstreams" if args.upstream else f"{args.workers} workers"
            say(f"{count} behind nginx (pids {' '.join(map(str, cluster.pids()))}; logs in {cluster.prefix}/logs)")
            print(f"Attention Explorer: {cluster.url}", flush=True)
            while True:
                time.sleep(3600)
    except _Stop as stop:
        say(f"{stop}: stopped")
        return 0
    except DeployError as exc:
        say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
