"""Every URL query parameter of the app is read and written here.

**Reading** (no Streamlit): small typed helpers over the query parameters (any ``name → str`` mapping, e.g.
``st.query_params``). Each returns ``(value, note)``: the value to use, always valid for the widget it feeds,
and ``None`` or one plain sentence saying what was wrong with the link's value and what is shown instead (the
page shows it with :func:`show_notes`). A missing parameter gives the default without a note; a bad one is
clamped into range or ignored, never raised.

**Writing** (Streamlit glue): :func:`init_widget` seeds a widget from the link the first time it is drawn, and
:func:`put` / :func:`put_text` write the value the page shows back into the link (a default is left out), so a
reload or a shared link restores the same view.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence, TypeVar, overload

import numpy as np

T = TypeVar("T")
Params = Mapping[str, Any]
Parsed = tuple[T, "str | None"]

#: Texts longer than this stay out of the link (a 2,000-character sentence makes an unwieldy URL): the page says so.
URL_TEXT_MAX = 500
#: How much of a bad value a note quotes.
_QUOTE = 30
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _quote(raw: Any) -> str:
    """A bad value as a note quotes it: cut, and a NUL or other control character written ``\\x00``, so that the
    note shows what the link held instead of an invisible character."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(raw)[: _QUOTE + 1])
    return text if len(text) <= _QUOTE else text[:_QUOTE] + "…"


def _raw(params: Params, name: str) -> str | None:
    """The parameter as a stripped string, or ``None`` when absent (a repeated parameter: its last value)."""
    if name not in params:
        return None
    value = params[name]
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    return str(value).strip()


def _fmt(value: float) -> str:
    return f"{value:g}"


def _label(name: str, what: str | None) -> str:
    """How a note names a parameter: its name in the link, and what it is when the name does not say."""
    return f"`{name}` ({what})" if what else f"`{name}`"


def _clamped(value, lo, hi, label: str, fmt: Callable[[Any], str]) -> Parsed[Any]:
    """``value`` within ``[lo, hi]``, with a note when it had to be moved there."""
    if lo <= value <= hi:
        return value, None
    fixed = min(max(value, lo), hi)
    return fixed, f"{label} = {_quote(fmt(value))} from the link is outside {fmt(lo)}–{fmt(hi)}; showing {fmt(fixed)}."


# --- reading ---------------------------------------------------------------------------------------------------
def int_param(params: Params, name: str, default: int, lo: int, hi: int, what: str | None = None) -> Parsed[int]:
    """``?name=`` as an integer in ``[lo, hi]``.

    Not a whole number (``abc``, ``1.5``, ``nan``, ``1e400``) → ``default`` with a note; out of range → clamped
    with a note. ``what``, if given, says in the note what the parameter is.
    """
    raw = _raw(params, name)
    if raw is None:
        return default, None
    what = _label(name, what)
    try:
        try:
            value = int(raw)  # exact, however many digits (up to Python's 4,300)
        except ValueError:
            number = float(raw)  # "7.0", "1e3"
            if not math.isfinite(number) or number != int(number):
                raise
            value = int(number)
    except (TypeError, ValueError, OverflowError):
        return default, f"Ignored {what} = “{_quote(raw)}” from the link (not a whole number); showing {default}."
    return _clamped(value, lo, hi, what, str)


def float_param(
    params: Params, name: str, default: float, lo: float, hi: float, what: str | None = None
) -> Parsed[float]:
    """``?name=`` as a finite float in ``[lo, hi]``; garbage or NaN/∞ → ``default`` with a note, out of range →
    clamped with a note."""
    raw = _raw(params, name)
    if raw is None:
        return default, None
    what = _label(name, what)
    try:
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
    except (TypeError, ValueError, OverflowError):
        return default, (
            f"Ignored {what} = “{_quote(raw)}” from the link (not a finite number); showing {_fmt(default)}."
        )
    return _clamped(value, lo, hi, what, _fmt)


@overload
def choice_param(
    params: Params, name: str, choices: Mapping[str, T], default: T, what: str | None = None
) -> Parsed[T]: ...
@overload
def choice_param(
    params: Params, name: str, choices: Sequence[str], default: str, what: str | None = None
) -> Parsed[str]: ...
def choice_param(
    params: Params, name: str, choices: Sequence[str] | Mapping[str, Any], default: Any, what: str | None = None
) -> Parsed[Any]:
    """``?name=`` as one of ``choices`` (exact, else case-insensitive). A mapping maps the URL spelling to the
    value (``{"1": 0, "2": 1}``). Unknown → ``default`` with a note that lists (a few of) the choices."""
    raw = _raw(params, name)
    if raw is None:
        return default, None
    table: dict[str, Any] = dict(choices) if isinstance(choices, Mapping) else {str(c): c for c in choices}
    if raw in table:
        return table[raw], None
    folded = {k.lower(): v for k, v in table.items()}
    if raw.lower() in folded:
        return folded[raw.lower()], None
    listed = ", ".join(list(table)[:8]) + (", …" if len(table) > 8 else "")
    return default, f"Ignored {_label(name, what)} = “{_quote(raw)}” from the link; it is one of: {listed}."


def index_param(params: Params, name: str, n: int, default: int, what: str | None = None) -> Parsed[int]:
    """``?name=`` counted from 1, as the pages show layers and heads, → a 0-based index below ``n`` (clamped into
    ``1…n`` with a note; garbage → ``default`` with a note). ``default`` is 0-based."""
    value, note = int_param(params, name, default + 1, 1, n, what)
    return value - 1, note


def head_param(
    params: Params,
    name: str,
    n_heads: int,
    default: int | str,
    words: Sequence[str] = ("all", "mean"),
    what: str | None = None,
) -> Parsed[int | str]:
    """``?head=``: one of ``words`` (``all``, ``mean``) or a head counted from 1 → the head selectbox's value (the
    word, or the 0-based head). Anything else → ``default`` with a note."""
    table: dict[str, int | str] = {w: w for w in words}
    table.update({str(h + 1): h for h in range(n_heads)})
    return choice_param(params, name, table, default, what)


def format_head(head: int | str) -> str:
    """The head selectbox's value for the link: the word (``all``, ``mean``) or the head counted from 1."""
    return head if isinstance(head, str) else str(head + 1)


def bool_param(params: Params, name: str, default: bool, what: str | None = None) -> Parsed[bool]:
    """``?name=1/0/true/false/yes/no/on/off``; anything else → ``default`` with a note."""
    raw = _raw(params, name)
    if raw is None:
        return default, None
    if raw.lower() in _TRUE:
        return True, None
    if raw.lower() in _FALSE:
        return False, None
    return default, f"Ignored {_label(name, what)} = “{_quote(raw)}” from the link (use 1 or 0)."


def text_param(params: Params, name: str, default: str, max_chars: int, what: str | None = None) -> Parsed[str]:
    """``?name=`` as text of at most ``max_chars`` characters (a longer one is cut, with a note). Empty text is
    returned as it is: the page says what to do with it."""
    if name not in params:
        return default, None
    value = params[name]
    value = str(value[-1] if isinstance(value, (list, tuple)) and value else value)
    if len(value) > max_chars:
        return value[:max_chars], (
            f"The {_label(name, what)} in the link had {len(value):,} characters; "
            f"only the first {max_chars:,} are used."
        )
    return value, None


def int_list_param(
    params: Params, name: str, default: Sequence[int], lo: int, hi: int, max_items: int = 64, what: str | None = None
) -> Parsed[list[int]]:
    """``?name=0,1,4`` as a sorted list of distinct integers in ``[lo, hi]`` (at most ``max_items``). Entries that
    are not such integers are dropped with a note; an empty value gives an empty list."""
    raw = _raw(params, name)
    if raw is None:
        return list(default), None
    kept: list[int] = []
    bad: list[str] = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        value, note = int_param({name: part}, name, lo, lo, hi)
        if note:
            bad.append(part)
        else:
            kept.append(value)
    kept = sorted(set(kept))
    if len(kept) > max_items:
        bad.append(f"{len(kept) - max_items} more")
        kept = kept[:max_items]
    note = None
    if bad:
        note = (
            f"Ignored entries of {_label(name, what)} from the link that are not whole numbers in {lo}–{hi}: "
            + ", ".join(_quote(b) for b in bad[:5])
            + ("…" if len(bad) > 5 else "")
            + "."
        )
    return kept, note


def choices_param(
    params: Params,
    name: str,
    choices: Sequence[str],
    default: Sequence[str] = (),
    sep: str = ",",
    what: str | None = None,
) -> Parsed[list[str]]:
    """``?name=a,b`` (or the parameter repeated, ``?name=a&name=b``) as a list of distinct entries of ``choices``
    (in the order of ``choices``); unknown entries are dropped with a note."""
    every = params.get_all(name) if hasattr(params, "get_all") else []
    raw = sep.join(str(v) for v in every) if len(every) > 1 else _raw(params, name)
    if raw is None:
        return list(default), None
    wanted = [p.strip() for p in raw.split(sep) if p.strip()]
    bad = [p for p in wanted if p not in choices]
    picked = [c for c in choices if c in wanted]
    note = None
    if bad:
        note = (
            f"Ignored entries of {_label(name, what)} from the link that this model does not have: "
            + ", ".join(_quote(b) for b in bad[:5])
            + ("…" if len(bad) > 5 else "")
            + "."
        )
    return picked, note


def format_matrix(matrix: np.ndarray) -> str:
    """``[[1, 0.5], [0, 2]]`` → ``"1,0.5;0,2"`` (rows by ``;``, cells by ``,``, ``%g``)."""
    return ";".join(",".join(f"{float(x):g}" for x in row) for row in np.atleast_2d(matrix))


def matrix_param(params: Params, name: str, default: np.ndarray, what: str | None = None) -> Parsed[np.ndarray]:
    """``?name=1,0;0,1`` (:func:`format_matrix`) as a float matrix of ``default``'s shape. A wrong shape or a cell
    that is not a finite number → ``default`` with a note."""
    raw = _raw(params, name)
    if raw is None:
        return default, None
    what = _label(name, what)
    if len(raw) > 40 * default.size:  # far more text than the cells need
        return default, f"Ignored {what} from the link (too long); showing the example matrix."
    try:
        rows = [[float(cell) for cell in row.split(",")] for row in raw.split(";")]
        matrix = np.array(rows, dtype=float)
    except (TypeError, ValueError, OverflowError):
        return default, (
            f"Ignored {what} = “{_quote(raw)}” from the link (not a matrix of numbers); showing the example."
        )
    if matrix.shape != default.shape or not np.isfinite(matrix).all():
        return default, (
            f"Ignored {what} from the link: it needs {default.shape[0]}×{default.shape[1]} finite "
            "numbers; showing the example."
        )
    return matrix, None


# --- the Decoding lab's forced tokens --------------------------------------------------------------------------
def format_forced(forced: Mapping[int, int]) -> str:
    """``{3: 1234, 5: 88}`` → ``"3:1234,5:88"``."""
    return ",".join(f"{s}:{t}" for s, t in sorted(forced.items()))


def forced_param(params: Params, name: str, vocab_size: int, max_steps: int) -> Parsed[dict[int, int]]:
    """``?forced=3:1234,5:88`` → ``{3: 1234, 5: 88}`` (1-based step → token id); malformed or out-of-range
    entries are dropped with a note."""
    raw = _raw(params, name)
    forced: dict[int, int] = {}
    bad: list[str] = []
    for part in (raw or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            s, t = (int(x) for x in part.split(":"))
        except ValueError:
            bad.append(part)
            continue
        if 1 <= s <= max_steps and 0 <= t < vocab_size:
            forced[s] = t
        else:
            bad.append(part)
    note = None
    if bad:
        note = (
            f"Ignored entries of `{name}` (forced tokens) from the link that are not step:token_id within range: "
            + ", ".join(_quote(b) for b in bad[:5])
            + "."
        )
    return forced, note


# --- writing (Streamlit) ---------------------------------------------------------------------------------------
def show_notes(*notes: str | None) -> None:
    """Show what the link's values needed (one ``st.info`` per note; ``None`` is skipped)."""
    import streamlit as st

    for note in notes:
        if note:
            st.info(note, icon=":material/link:")


def init_widget(key: str, parse: Callable[[Params], Parsed[Any]], valid: Callable[[Any], bool] | None = None) -> None:
    """Seed the widget ``key`` from the link the first time it is drawn in this session: ``parse(params)`` gives
    ``(value, note)`` and the note is shown. Later runs leave the user's choice alone, unless ``valid(value)`` says
    it no longer fits (another model or sentence): then it silently becomes the default, ``parse({})``."""
    import streamlit as st

    if key not in st.session_state:
        value, note = parse(st.query_params)
        st.session_state[key] = value
        show_notes(note)
    elif valid is not None and not valid(st.session_state[key]):
        st.session_state[key] = parse({})[0]
    else:
        # Assigned again on purpose: a run that stopped before drawing the widget (an empty sentence, say) made
        # the browser forget it, and a widget the browser no longer knows is drawn at its own default (the first
        # option) unless its value was set through the session state in this run; the page would then compute
        # with one value and show another.
        st.session_state[key] = st.session_state[key]


def put(name: str, value: Any, default: Any = None) -> None:
    """Write ``value`` into the link as ``?name=`` (floats as ``%g``, bools as 1/0, lists comma-joined); a value
    equal to ``default`` is left out, so links stay short."""
    import streamlit as st

    if value == default or value is None:
        st.query_params.pop(name, None)
        return
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif isinstance(value, float):
        text = _fmt(value)
    elif isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    if st.query_params.get(name) != text:
        st.query_params[name] = text


def put_text(name: str, text: str, default: str | None = None) -> str | None:
    """Write a typed text into the link, unless it is longer than :data:`URL_TEXT_MAX` characters: then it is
    left out and a sentence saying so is returned (for a caption); otherwise ``None``."""
    if len(text) > URL_TEXT_MAX:
        put(name, None)
        return (
            f"This text has {len(text):,} characters, more than the {URL_TEXT_MAX} a link keeps: the link "
            "(and a reload) leaves it out."
        )
    put(name, text, default)
    return None
