"""Whether a run's trainer process lives: what the trainer checks before it writes into a run folder (a second
trainer there would overwrite the first's files) and what the Training page shows (:mod:`launching.launch`).

Linux ``/proc`` is read where it helps (a zombie is dead; the ``--out`` a process trains); elsewhere the answers
fall back to ``os.kill(pid, 0)``. No Streamlit and nothing of the launcher here: the trainer imports this module.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: States in which a run's trainer process is alive: the page keeps polling them.
LIVE_STATES = ("starting", "running")

# The trainers this process started (the launcher's children), so that one that ended is reaped, not left a zombie.
_children: dict[int, subprocess.Popen] = {}


def track_child(proc: subprocess.Popen) -> None:
    """Remember a trainer this process started, so that :func:`pid_alive` reaps it once it has ended."""
    _children[proc.pid] = proc


def pid_alive(pid) -> bool:
    """Whether process ``pid`` exists (a finished child of this process is reaped first, so no zombie counts)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            _children.pop(pid, None)
            return False
    except ChildProcessError:
        pass  # not our child (or already reaped)
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # a zombie that is not ours to reap is dead all the same
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        pass
    return True


def effective_state(status: dict | None, pid=None) -> str:
    """The run's state as the page should show it.

    ``status.json`` says ``running`` until the trainer writes its last word; if the process is gone (killed,
    out of memory, machine rebooted) that is a ``failed`` run. No status yet: ``starting`` while ``pid`` lives.
    """
    if not isinstance(status, dict):
        return "starting" if pid is not None and pid_alive(pid) else "unknown"
    state = status.get("state")
    if state == "running":
        return "running" if pid_alive(status.get("pid")) else "failed"
    return state if state in ("finished", "stopped", "failed") else "unknown"


def trained_folder(pid) -> Path | None:
    """The ``--out`` folder on process ``pid``'s command line, resolved against its working directory (Linux
    ``/proc``); ``None`` where that cannot be read or it has no ``--out``."""
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = Path(os.readlink(f"/proc/{int(pid)}/cwd"))
    except (OSError, TypeError, ValueError):
        return None
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return (cwd / argv[i + 1]).resolve()
        if arg.startswith("--out="):
            return (cwd / arg.removeprefix("--out=")).resolve()
    return None
