"""Query-parameter helpers for the teaching pages: read a number from the URL, ignore garbage, report range
problems as a message (never an exception)."""

from __future__ import annotations

import streamlit as st


def param_int(name: str, default: int) -> int:
    """``?name=`` as an int; a missing or unparsable value gives ``default``."""
    try:
        return int(float(st.query_params.get(name, default)))
    except (TypeError, ValueError, OverflowError):
        return default


def param_bool(name: str, default: bool) -> bool:
    """``?name=1/0/true/false``; anything else gives ``default``."""
    raw = str(st.query_params.get(name, "")).lower()
    return {"1": True, "true": True, "0": False, "false": False}.get(raw, default)


def init_state(key: str, value) -> None:
    """Set ``st.session_state[key]`` once (the widget's first value), never overwriting the user's choice."""
    if key not in st.session_state:
        st.session_state[key] = value


def clamp(value: int, lo: int, hi: int, what: str) -> tuple[int, str | None]:
    """``value`` clamped to ``[lo, hi]`` and a warning text when it had to be changed."""
    if value < lo or value > hi:
        fixed = min(max(value, lo), hi)
        return fixed, f"{what} must be between {lo} and {hi}; got {value}, showing {fixed}."
    return value, None
