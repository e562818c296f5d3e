"""One app worker: ``streamlit run app.py`` with ``make run``'s settings, made for serving.

``python -m deploy.worker [--port 8501] [--host 0.0.0.0] [--demo]`` replaces itself with that process (what a
container runs: one worker each, behind compose's front or a Kubernetes ingress); ``deploy.serve`` starts N of them.

Two settings differ from ``make run``:

* ``--server.fileWatcherType none``. The project's ``poll`` watcher (reload on save, for development) submits one
  task per watched module to a 4-thread pool; each sleeps 0.2 s, looks at its file and submits itself again. At
  exit Python joins that pool, which first drains its queue: a server with five pages open printed "Stopping..."
  and lived 16 to 19 s after SIGTERM, 3.3 s with ``none``. It also costs each worker a stat of every module five
  times a second.
* ``server.cookieSecret`` shared by every worker (``STREAMLIT_SERVER_COOKIE_SECRET``): a session that fails over
  to another worker keeps a valid XSRF token for its uploads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
APP = "app.py"
DEMO_ENV = "ATTENTION_EXPLORER_DEMO"
SECRET_ENV = "STREAMLIT_SERVER_COOKIE_SECRET"
#: glibc's malloc arenas for a worker (``MALLOC_ARENA_MAX``, unless set): Streamlit runs every script run in a
#: thread of its own, and glibc gives threads arenas of their own (up to 8 per core), each keeping what it freed.
#: Two: a churned room's worker kept 742 MB after everyone left instead of 842 MB (with ``serving.memory``'s trim both).
MALLOC_ARENAS = "2"


#: What a worker imports before Streamlit starts (``python -c``): torch and the model code, 4 s that the first
#: session's run paid otherwise. That run is also a failed-over visitor's: the old page stays on screen while it
#: runs, and a Next clicked before it reached the page's fragment was dropped by Streamlit (the fragment did not
#: exist yet in the new session).
PRELOAD = "import model.checkpoint, decoding.decoded, ui.state"
_STREAMLIT = f"import runpy; {PRELOAD}; runpy.run_module('streamlit', run_name='__main__')"


def command(port: int, host: str = "127.0.0.1", app: str = APP) -> list[str]:
    """The worker's command line (``streamlit run app`` after :data:`PRELOAD`), run from the repository root (where
    ``.streamlit/config.toml`` is read)."""
    return [
        sys.executable,
        "-c",
        _STREAMLIT,
        "run",
        app,
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--browser.gatherUsageStats",
        "false",
    ]


def environment(
    base: Mapping[str, str], demo: bool = False, threads: int | None = None, cookie_secret: str | None = None
) -> dict[str, str]:
    """``base`` with hosted-demo mode on when ``demo`` (``ATTENTION_EXPLORER_DEMO=1``, see ``ui/state.py``; left as
    ``base`` has it otherwise), torch's threads capped at ``threads`` unless ``OMP_NUM_THREADS`` is set already
    (N workers on N cores: more threads each would only fight over the cores), glibc's arenas at
    :data:`MALLOC_ARENAS` unless ``MALLOC_ARENA_MAX`` is set, and ``cookie_secret``."""
    env = dict(base)
    env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)
    if demo:
        env[DEMO_ENV] = "1"
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    if cookie_secret is not None:
        env[SECRET_ENV] = cookie_secret
    return env


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deploy.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8501, help="default: %(default)s")
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on (default: %(default)s)")
    parser.add_argument("--demo", action="store_true", help="hosted-demo mode (ATTENTION_EXPLORER_DEMO=1)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    cmd = command(args.port, args.host)
    # exec: the container's stop signal reaches Streamlit itself, with no parent in between
    os.execve(cmd[0], cmd, environment(os.environ, demo=args.demo))


if __name__ == "__main__":
    main()
