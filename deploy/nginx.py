"""The front: find nginx, render ``deploy/nginx.conf`` for a set of workers, lay out and check its private prefix.

Also ``python -m deploy.nginx --upstream HOST:PORT ... [--listen ADDR]`` prints the rendered config (to read it,
or to run nginx by hand).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from deploy import DeployError

TEMPLATE = Path(__file__).with_name("nginx.conf")
INSTALL_HINT = "apt-get install -y nginx"
#: One refused connection (or 502/503) takes a worker out of rotation for 5 s; then nginx tries it again.
FAILS = "max_fails=1 fail_timeout=5s"
CONF_NAME = "nginx.conf"
ERROR_LOG = "logs/error.log"
FIELD = re.compile(r"\{\{ (\w+) \}\}")


@dataclass(frozen=True)
class Upstream:
    """One app worker as the front sees it: ``name`` is the affinity cookie's value (``w1``), ``address`` is
    ``IP:PORT`` exactly as nginx reports it in ``$upstream_addr`` (use :func:`resolve` for a host name)."""

    name: str
    address: str


def find_nginx(explicit: str | None = None) -> str:
    """The nginx binary: ``explicit``, else ``$NGINX``, else ``nginx`` on the PATH, else Debian's ``/usr/sbin/nginx``
    (not on a normal user's PATH).

    Raises:
        DeployError: none of them is an executable file; the message says how to install nginx.
    """
    if explicit or os.environ.get("NGINX"):
        path = explicit or os.environ["NGINX"]
        if os.access(path, os.X_OK) and Path(path).is_file():
            return path
        raise DeployError(f"nginx not found at {path} (install it: {INSTALL_HINT})")
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise DeployError(f"nginx is not installed; install it ({INSTALL_HINT}) or pass --nginx PATH")


def resolve(address: str) -> str:
    """``HOST:PORT`` → ``IP:PORT`` (an IPv6 address in brackets), as nginx resolves a server name at start.

    Raises:
        DeployError: not ``HOST:PORT`` with a numeric port, or the host does not resolve.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DeployError(f"upstream {address!r} is not HOST:PORT")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DeployError(f"upstream host {host!r} does not resolve ({exc.strerror})") from exc
    family, *_, sockaddr = min(infos, key=lambda info: info[0] != socket.AF_INET)  # IPv4 first
    ip = sockaddr[0]
    return f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"


def render(upstreams: Sequence[Upstream], listen: str) -> str:
    """The front's config for ``upstreams`` (at least one), listening on ``listen`` (``127.0.0.1:8501``,
    ``0.0.0.0:8501``, ``8501``). Each worker gets an upstream of its own (``ae_<name>``) with every other worker
    as its backup, and ``ae_any`` holds them all for first visits.

    Raises:
        ValueError: no upstreams, or two with one name.
    """
    if not upstreams:
        raise ValueError("the front needs at least one upstream")
    if len({u.name for u in upstreams}) != len(upstreams):
        raise ValueError(f"upstream names must differ: {[u.name for u in upstreams]}")
    blocks = []
    for u in upstreams:
        backups = [f"        server {o.address} {FAILS} backup;" for o in upstreams if o is not u]
        blocks.append(
            "\n".join([f"    upstream ae_{u.name} {{", f"        server {u.address} {FAILS};", *backups, "    }"])
        )
    fields = {
        "listen": listen,
        "routes": "\n".join(f"        {u.name} ae_{u.name};" for u in upstreams),
        "answered": "\n".join(f'        "~(^| ){re.escape(u.address)}$" {u.name};' for u in upstreams),
        "any_servers": "\n".join(f"        server {u.address} {FAILS};" for u in upstreams),
        "worker_upstreams": "\n\n".join(blocks),
    }
    return FIELD.sub(lambda m: fields[m.group(1)], TEMPLATE.read_text(encoding="utf-8"))


def prepare_prefix(prefix: Path, conf: str) -> Path:
    """Write ``conf`` as ``prefix/nginx.conf`` with the ``logs/`` and ``tmp/`` folders it names. Returns its path.

    The prefix is made world-readable: nginx started as root runs its worker process as ``nobody``, which must
    reach ``tmp/`` (nothing secret is kept there).
    """
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    prefix.chmod(0o755)
    path = prefix / CONF_NAME
    path.write_text(conf, encoding="utf-8")
    return path


def command(nginx: str, prefix: Path) -> list[str]:
    """The command that runs the front of ``prefix`` in the foreground, its errors in ``prefix/logs/error.log``."""
    return [nginx, "-p", f"{prefix}/", "-c", CONF_NAME, "-e", str(prefix / ERROR_LOG), "-g", "daemon off;"]


def check(nginx: str, prefix: Path) -> None:
    """``nginx -t`` on the config of ``prefix`` (see :func:`prepare_prefix`).

    Raises:
        DeployError: nginx rejects it; the message quotes nginx.
    """
    done = subprocess.run([*command(nginx, prefix), "-t"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise DeployError(f"nginx rejected {prefix / CONF_NAME}:\n{(done.stderr or done.stdout).strip()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.nginx", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="an app worker (repeat for each); a host name is resolved now, as nginx would",
    )
    parser.add_argument("--listen", default="8501", help="nginx's listen address (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        upstreams = [Upstream(f"w{i}", resolve(a)) for i, a in enumerate(args.upstream, 1)]
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(upstreams, args.listen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
