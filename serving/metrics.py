"""The heavy-work gate and the shared caches on Streamlit's own metrics endpoint, ``/_stcore/metrics``.

A served app answers ``GET /_stcore/metrics`` in the OpenMetrics text format (Streamlit's sessions and its
``st.cache_*`` memory). :func:`publish` adds one gauge family, :data:`FAMILY`, with a sample per figure of
:meth:`serving.heavy.Gate.stats` and the bytes of the shared figures (:mod:`serving.figures`)::

    attention_explorer_gate{what="busy"} 0
    attention_explorer_gate{what="bytes"} 18874368
    attention_explorer_gate{what="figure_bytes"} 2097152

so that a load benchmark, or a watchdog, can tell a wedged slot (``busy`` above 0 with no visitor left) and what
the caches hold without a page of its own. :func:`read` parses such a text back.
"""

from __future__ import annotations

import re
import threading

from serving import figures, heavy

#: The metric family's name (a gauge; its ``what`` label names the figure).
FAMILY = "attention_explorer_gate"
_SAMPLE = re.compile(rf'^{FAMILY}\{{what="(\w+)"\}} (-?\d+)$', re.M)
_lock = threading.Lock()
_published = False


def snapshot() -> dict[str, int]:
    """The gate's :meth:`~serving.heavy.Gate.stats` and ``figure_bytes``/``figures`` (the shared figures' bytes and
    count) of this process now."""
    with figures._lock:
        shown = {"figure_bytes": figures._figures.total, "figures": len(figures._figures)}
    return heavy.GATE.stats() | shown


class _Provider:
    """A Streamlit ``StatsProvider`` for :data:`FAMILY`."""

    stats_families = (FAMILY,)

    def get_stats(self, family_names=None):
        from streamlit.runtime.stats import GaugeStat

        return {
            FAMILY: [
                GaugeStat(
                    FAMILY,
                    int(value),
                    {"what": what},
                    help="Attention Explorer's heavy-work gate (slots, line, shared waits) and shared caches (bytes)",
                )
                for what, value in snapshot().items()
            ]
        }


def publish() -> bool:
    """Register :data:`FAMILY` with the running Streamlit server, once per process (later calls do nothing).
    Returns whether it is registered (``False`` outside a server, e.g. in an ``AppTest``)."""
    global _published
    from streamlit.runtime import Runtime

    with _lock:
        if not _published and Runtime.exists():
            Runtime.instance().stats_mgr.register_provider(_Provider())
            _published = True
        return _published


def read(text: str) -> dict[str, int]:
    """The :data:`FAMILY` samples of a ``/_stcore/metrics`` text, ``{what: value}`` (empty when absent)."""
    return {what: int(value) for what, value in _SAMPLE.findall(text)}
