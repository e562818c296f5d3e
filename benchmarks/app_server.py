"""Serve the app as ``make run`` does, for the browser benchmark, the screenshots and the browser tests.

:func:`serve` starts ``streamlit run app.py`` on a free local port in its own process group and stops it at the
end; :data:`CHROMIUM` is Debian's Chromium (``/usr/bin/chromium``, ``$CHROMIUM``, or ``chromium`` on the PATH),
which Playwright drives through ``executable_path`` (never ``playwright install``: it downloads);
:func:`chromium` launches it, :func:`open_page` opens a page in a fresh session, and :func:`served_page` gives a
served app with one page open in it;
:func:`settled` waits in such a browser until a page's script run is over and drawn.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # playwright is a dev requirement: the app itself never imports it
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file() and shutil.which("chromium"):
    CHROMIUM = shutil.which("chromium") or CHROMIUM
START_TIMEOUT_S = 60
#: Variables that would make a served app differ from the one ``make run`` starts.
APP_ENV = ("ATTENTION_EXPLORER_CHECKPOINTS", "ATTENTION_EXPLORER_DEMO")
SETTLE_TIMEOUT_MS = 120_000  # one script run (model load + decode) on a busy 2-core machine

#: In-page check that the rerun is over: nothing stale, no running icon, and ``pattern`` (if any) in the text.
SETTLED_JS = """(pattern) => {
  if (document.querySelector('[data-stale="true"]')) return false;
  if (document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')) return false;
  if (document.querySelector('[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningManIcon"]')) {
    return false;
  }
  return !pattern || new RegExp(pattern).test(document.body.innerText);
}"""
TWO_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


class ServerError(RuntimeError):
    """The app did not come up: streamlit exited, or was not healthy within :data:`START_TIMEOUT_S` seconds."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    """True when ``url`` answers Streamlit's health check with ``ok``."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except OSError:
        return False


@contextmanager
def serve(
    log_path: Path, env_overrides: dict[str, str] | None = None, script: str = "app.py", root: Path = ROOT
) -> Iterator[str]:
    """``streamlit run app.py`` (or another ``script``, relative to ``root``: this repository, or another checkout of
    it, e.g. a worktree of an older commit to compare with) on a free port, its output in ``log_path``. Yields the
    base URL.

    Raises:
        ServerError: streamlit exited early or was not healthy after :data:`START_TIMEOUT_S` seconds.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in APP_ENV}
    env.update(env_overrides or {})
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                script,
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--browser.gatherUsageStats",
                "false",
                "--server.fileWatcherType",
                "none",
            ],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not healthy(url):
                if proc.poll() is not None:
                    raise ServerError(f"streamlit exited with {proc.returncode}; see {log_path}")
                if time.monotonic() > deadline:
                    raise ServerError(f"streamlit not healthy after {START_TIMEOUT_S} s; see {log_path}")
                time.sleep(0.3)
            yield url
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@contextmanager
def chromium() -> Iterator["Browser"]:
    """Debian's Chromium (:data:`CHROMIUM`) driven by Playwright, headless, closed at the end. Yields the Browser.

    ``--no-sandbox`` because containers and CI run as root, where Chromium's sandbox refuses to start.

    Raises:
        ImportError: the playwright package is missing.
        playwright.sync_api.Error: Chromium would not start.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def served_page(
    log_path: Path,
    env_overrides: dict[str, str] | None = None,
    viewport: tuple[int, int] = (1280, 720),
    timeout_ms: int = SETTLE_TIMEOUT_MS,
) -> Iterator[tuple[str, "Page"]]:
    """The app served (:func:`serve`) and one fresh Chromium page (:func:`open_page`). Yields ``(base URL, page)``.

    Raises:
        ServerError: as :func:`serve`; ImportError and playwright's Error: as :func:`chromium`.
    """
    with serve(log_path, env_overrides) as url, chromium() as browser:
        yield url, open_page(browser, viewport, timeout_ms)


def open_page(
    browser: "Browser", viewport: tuple[int, int] = (1280, 720), timeout_ms: int = SETTLE_TIMEOUT_MS
) -> "Page":
    """A page in a fresh browser context (its own cookies and Streamlit session) at ``viewport`` (width, height in
    CSS pixels, device scale 1), whose Playwright waits time out after ``timeout_ms``. ``page.context.close()``
    ends it."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, device_scale_factor=1)
    context.set_default_timeout(timeout_ms)
    return context.new_page()


def settled(page, pattern: str | None = None, min_ms: int = 0, timeout_ms: int = SETTLE_TIMEOUT_MS) -> None:
    """Wait in a Playwright ``page`` until the rerun is over (see :data:`SETTLED_JS`), at least ``min_ms`` after
    the call; then two animation frames, as Plotly draws in the next frame."""
    if min_ms:
        page.wait_for_timeout(min_ms)
    page.wait_for_function(SETTLED_JS, arg=pattern, timeout=timeout_ms, polling=15)
    page.evaluate(TWO_FRAMES_JS)
