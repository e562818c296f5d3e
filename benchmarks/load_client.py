"""One simulated visitor of the app, speaking Streamlit's own websocket protocol (no browser), for
:mod:`benchmarks.load`.

A browser's tab talks to the server over ``ws://HOST:PORT/_stcore/stream``: it sends ``BackMsg`` protobufs (a
``rerun_script`` carrying a ``ClientState``: the query string, the page, every widget's current value, and for a
button click that button's id with ``trigger_value: true``) and receives ``ForwardMsg`` protobufs (``new_session``,
``delta`` elements and blocks, ``page_info_changed`` with the query string the script wrote, and
``script_finished`` at the end of every run). A :class:`~benchmarks.page_view.PageView` keeps what a browser would
keep of that stream; :class:`Visitor` connects, opens a page, clicks and selects, and times each action from the
``BackMsg`` sent to the ``script_finished`` received.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.typing import Subprotocol

from benchmarks.page_view import PageView, Widget

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
#: ``script_finished`` statuses (``ForwardMsg.ScriptFinishedStatus``).
FINISHED = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_SUCCESSFULLY")
COMPILE_ERROR = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_WITH_COMPILE_ERROR")
EARLY_FOR_RERUN = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_EARLY_FOR_RERUN")
FRAGMENT_FINISHED = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_FRAGMENT_RUN_SUCCESSFULLY")
MAX_RUNS_PER_ACTION = 10  # runs one action may chain (st.rerun) before it counts as an error


class NotLocalError(ValueError):
    """A target that is not this machine: the benchmark only ever sends traffic to 127.0.0.1 / localhost."""


def local_base(url: str) -> tuple[str, str, int]:
    """``(ws base URL, host, port)`` of an ``http(s)://`` URL on this machine, e.g. ``http://127.0.0.1:8501`` →
    ``("ws://127.0.0.1:8501", "127.0.0.1", 8501)``.

    Raises:
        NotLocalError: the host is not 127.0.0.1, localhost or ::1, or the URL is not http(s).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotLocalError(f"{url!r} is not an http:// URL such as http://127.0.0.1:8501")
    if parts.hostname not in LOCAL_HOSTS:
        raise NotLocalError(f"{url!r} is not on this machine: the load benchmark only targets {', '.join(LOCAL_HOSTS)}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}", parts.hostname, port


# --- one visitor -----------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """One timed action: ``seconds`` from the BackMsg (or the first request, for a page load) to its
    ``script_finished``; ``errors`` names what went wrong (``exception``, ``error status``, ``disconnect``,
    ``timeout``, ``mismatch``, ``no widget``, ``http``), empty when the action succeeded."""

    action: str
    seconds: float | None
    errors: list[str] = field(default_factory=list)
    detail: str = ""
    #: a double click whose two clicks Streamlit merged into one run (one run started, none cut short)
    merged: bool = False

    @property
    def fatal(self) -> bool:
        """The session can no longer be trusted (the visitor reconnects)."""
        return any(e in ("disconnect", "timeout", "http") for e in self.errors)


async def http_status(host: str, port: int, path: str, timeout_s: float) -> int:
    """The status code of a plain ``GET path`` to ``host:port`` (what the frontend asks before connecting).
    Raises OSError or asyncio.TimeoutError when the server does not answer."""

    async def get() -> int:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            while await reader.read(65536):
                pass
            return status
        finally:
            writer.close()

    return await asyncio.wait_for(get(), timeout_s)


class Visitor:
    """One browser tab's session, without the browser. ``timeout_s`` bounds every action (seconds)."""

    def __init__(self, base_url: str, timeout_s: float = 60.0):
        self.ws_base, self.host, self.port = local_base(base_url)
        self.timeout_s = timeout_s
        self.view = PageView()
        self._ws: ClientConnection | None = None

    def _socket(self) -> ClientConnection:
        if self._ws is None:  # an action before open(): say so rather than fail on None
            raise RuntimeError("the visitor has no websocket: open() a page first")
        return self._ws

    async def open(self, page: str = "", query: str = "") -> Outcome:
        """Load ``/page?query`` as a browser does: the health and host-config requests, the websocket, and the
        first run. Timed from the first request to the first ``script_finished``."""
        t0 = time.perf_counter()
        try:
            for path in ("/_stcore/health", "/_stcore/host-config"):
                if await http_status(self.host, self.port, path, self.timeout_s) != 200:
                    return Outcome("first load", None, ["http"], path)
            self._ws = await connect(
                f"{self.ws_base}/_stcore/stream",
                subprotocols=[Subprotocol("streamlit")],
                max_size=None,
                ping_interval=None,
                open_timeout=self.timeout_s,
            )
        except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI) as exc:
            return Outcome("first load", None, ["http"], f"{type(exc).__name__}: {exc}")
        self.view.query_string = query
        msg = BackMsg()
        msg.rerun_script.query_string, msg.rerun_script.page_name = query, page
        return await self._run("first load", msg, t0=t0)

    async def click(self, label: str) -> Outcome:
        """Click the button labelled ``label`` (a full rerun with its trigger)."""
        button = self.view.find(label, "button")
        if button is None:
            return Outcome(label, None, ["no widget"], f"no button {label!r}")
        return await self._run(
            label, self.view.rerun(trigger=button, fragment_id=button.fragment_id), fragment_id=button.fragment_id
        )

    async def choose(self, widget: Widget, option: str, action: str = "") -> Outcome:
        """Set ``widget`` (a selectbox, radio, tabs…) to ``option`` as a user would: a rerun of its fragment, or of
        the page."""
        action = action or f"{widget.label or widget.kind} → {option}"
        if option not in widget.options:
            return Outcome(action, None, ["no widget"], f"no option {option!r} in {widget.options}")
        self.view.values[widget.id] = (widget.field or "string_value", option)
        msg = self.view.rerun(fragment_id=widget.fragment_id)
        return await self._run(action, msg, fragment_id=widget.fragment_id)

    async def drain(self, fragment_id: str = "", wait_s: float = 0.01) -> int:
        """Read what the server sent since the last action ended: the late run a double click's second click
        started after :meth:`double_click` stopped waiting (a busy server can take that long). Returns the runs
        that finished meanwhile (0 almost always)."""
        runs = 0
        while self._ws is not None:
            try:
                raw = await asyncio.wait_for(self._ws.recv(), wait_s)
            except asyncio.TimeoutError:
                return runs
            msg = ForwardMsg()
            msg.ParseFromString(raw)
            status = self.view.apply(msg)
            if status is not None and status != EARLY_FOR_RERUN:
                runs += 1
                self.view.end_run(fragment_id)
                wait_s = 0.01
            elif status is None:
                wait_s = self.timeout_s  # inside a run: read it to its end
        return runs

    async def double_click(self, label: str, gap_s: float = 0.03, settle_s: float = 1.0) -> Outcome:
        """Click the button ``label`` twice, ``gap_s`` apart, as an impatient visitor does: the second click is
        sent on the same (not yet redrawn) page. Read until the last run either click started has finished: a
        run that finishes is followed by up to ``settle_s`` seconds of reading for one the second click starts.
        ``merged``: one run started for both clicks (Streamlit merges clicks on one button that arrive before
        their run starts), so the page moved one step, not two."""
        button = self.view.find(label, "button")
        if button is None:
            return Outcome(label, None, ["no widget"], f"no button {label!r}")
        t0 = time.perf_counter()
        msg = self.view.rerun(trigger=button, fragment_id=button.fragment_id)
        try:
            self.view.begin_run()
            await self._socket().send(msg.SerializeToString())
            await asyncio.sleep(gap_s)
            await self._socket().send(msg.SerializeToString())
            runs, early, status, shown, statuses = 0, 0, None, [], []
            while True:
                try:
                    status = await asyncio.wait_for(self._read_run(), self.timeout_s if status is None else settle_s)
                except asyncio.TimeoutError:
                    if status is None:
                        return Outcome(f"{label} ×2", None, ["timeout"], f"no script_finished in {self.timeout_s:g} s")
                    break  # no further run: the last one read was the last
                statuses.append(f"{status}@{time.perf_counter() - t0:.3f}s")
                if status == EARLY_FOR_RERUN:
                    early += 1
                    self.view.begin_run()
                    continue
                runs += 1
                self.view.end_run(button.fragment_id)
                shown += self.view.exceptions
                self.view.begin_run()
        except ConnectionClosed as exc:
            return Outcome(f"{label} ×2", None, ["disconnect"], str(exc))
        errors = (["error status"] if status == COMPILE_ERROR else []) + (["exception"] if shown else [])
        return Outcome(
            f"{label} ×2",
            time.perf_counter() - t0 - settle_s,
            errors,
            f"runs={runs} cut short={early} ({' '.join(statuses)}); " + "; ".join(shown)[:300],
            merged=runs == 1 and not early,
        )

    async def _run(self, action: str, msg: BackMsg, fragment_id: str = "", t0: float | None = None) -> Outcome:
        """Send ``msg`` and read until its run finishes; chained runs (``st.rerun``) are read through."""
        t0 = time.perf_counter() if t0 is None else t0
        errors: list[str] = []
        try:
            status = await asyncio.wait_for(self._send_and_read(msg), self.timeout_s)
        except asyncio.TimeoutError:
            return Outcome(action, None, ["timeout"], f"no script_finished within {self.timeout_s:g} s")
        except ConnectionClosed as exc:
            return Outcome(action, None, ["disconnect"], str(exc))
        seconds = time.perf_counter() - t0
        if status == COMPILE_ERROR:
            errors.append("error status")
        self.view.end_run(fragment_id)
        if self.view.exceptions:
            errors.append("exception")
        return Outcome(action, seconds, errors, "; ".join(self.view.exceptions)[:300])

    async def _send_and_read(self, msg: BackMsg) -> int:
        """The status of the last run ``msg`` starts (through up to :data:`MAX_RUNS_PER_ACTION` chained runs)."""
        self.view.begin_run()
        await self._socket().send(msg.SerializeToString())
        for _ in range(MAX_RUNS_PER_ACTION):
            status = await self._read_run()
            if status != EARLY_FOR_RERUN:
                return status
            self.view.begin_run()
        return COMPILE_ERROR

    async def _read_run(self) -> int:
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(await self._socket().recv())
            status = self.view.apply(msg)
            if status is not None:
                return status

    async def close(self) -> None:
        """Close the websocket (the server ends the session)."""
        if self._ws is not None:
            try:
                await asyncio.wait_for(self._ws.close(), 5)
            except (asyncio.TimeoutError, ConnectionClosed, OSError):
                pass
            self._ws = None
