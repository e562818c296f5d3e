"""How the Training page words a run: the launch form's labels and a run's progress line (no Streamlit here).

The launcher (:mod:`launching.form`) names data sources and architectures by plain codes; the words for them live
here, with the page."""

from __future__ import annotations

from datetime import datetime, timezone

#: :data:`launching.form.DATA_SOURCES` as the form's radio shows them.
DATA_LABELS = {
    "sentences": "sentences",
    "sentences+phrases": "sentences + phrases",
    "sentences+phrases+words": "sentences + phrases + words",
    "mixture": "real pairs mixture (shares below)",
    "tsv": "uploaded TSV",
    "brown": "Brown corpus (English)",
}
#: :data:`model.config.ARCHITECTURES` as the form's picker shows them.
ARCH_LABELS = {
    "encoder-decoder": "encoder-decoder (English → German translator)",
    "decoder-only": "decoder-only (GPT-style language model)",
}


def _time(iso) -> float | None:
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except (TypeError, ValueError):
        return None


def when(iso, seconds: bool = False) -> str | None:
    """An ISO time of ``status.json`` as ``"2026-01-01 12:00 UTC"`` (``seconds``: ``12:00:05``) for the page: the
    raw ``2026-01-01T12:00:05+00:00`` took a third of the runs table's width. ``None`` for a missing or bad time."""
    t = _time(iso)
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M" + (":%S" if seconds else "") + " UTC")


def table_row(row: dict) -> dict:
    """A row of :func:`launching.launch.list_runs` as the runs table shows it: times by :func:`when`, losses and
    scores to 3 decimals, without the folder path and error text."""
    out = {k: v for k, v in row.items() if k not in ("path", "error")}
    for k in ("started", "updated"):
        out[k] = when(out.get(k))
    for k in ("loss", "valid_loss", "bleu", "chrf"):
        if isinstance(out.get(k), float):
            out[k] = round(out[k], 3)
    return out


def progress(
    status: dict, max_minutes: float | None = None, now: float | None = None, live: bool = True
) -> tuple[float, str] | None:
    """``(fraction done, text)`` of a run by the limit that ends it first, or ``None`` when it has no limit to
    measure against.

    ``status`` is the run's ``status.json`` (``step``, ``max_steps``, ``started``, ``leg_started``,
    ``earlier_seconds``, ``updated``, ``max_minutes``); ``max_minutes`` is used when the status lacks it (a trainer
    from before it was recorded); 0 = no time limit. The minute limit counts per leg (process): a resumed run gets
    its ``--max-minutes`` again from ``leg_started`` (``started`` for a trainer that did not record legs) to ``now``
    (UNIX seconds; default: the current time) while ``live``, else to ``updated``. Of steps and minutes, the limit
    with the larger fraction done binds (it will be reached first at the present pace): a two-minute run with a
    100,000-step limit reads ``"1.2 of 2 minutes · step 90"``, not ``"step 90 of 100000"``. A resumed run says
    which minutes are this leg's and how many the run has trained in all: ``"this leg 1.2 of 2 minutes · total
    3.2 minutes · step 90"``, not a budget that seems to have started again.
    """
    step = status.get("step") or 0
    max_steps = status.get("max_steps") or 0
    limit = status.get("max_minutes", max_minutes) or 0
    start = _time(status.get("leg_started") or status.get("started"))
    end = (now if now is not None else datetime.now().timestamp()) if live else _time(status.get("updated"))
    leg = max(0.0, (end - start) / 60) if start is not None and end is not None else None
    earlier = _minutes(status.get("earlier_seconds"))
    total = f"total {earlier + leg:.1f} minutes" if earlier and leg is not None else None
    by_steps = step / max_steps if max_steps else None
    by_time = leg / limit if limit and leg is not None else None
    if by_time is not None and (by_steps is None or by_time > by_steps):
        minutes = f"{leg:.1f} of {limit:g} minutes"
        return min(1.0, by_time), (f"this leg {minutes} · {total}" if total else minutes) + f" · step {step}"
    if by_steps is not None:
        return min(1.0, by_steps), f"step {step} of {max_steps}" + (f" · {total}" if total else "")
    return None


def _minutes(seconds) -> float:
    try:
        return max(0.0, float(seconds or 0)) / 60
    except (TypeError, ValueError):
        return 0.0
