"""How the Training page words a run: the launch form's labels and a run's progress line (no Streamlit here).

The launcher (:mod:`training.form`) names data sources and architectures by plain codes; the words for them live
here, with the page."""

from __future__ import annotations

from datetime import datetime

#: :data:`training.form.DATA_SOURCES` as the form's radio shows them.
DATA_LABELS = {
    "sentences": "sentences",
    "sentences+phrases": "sentences + phrases",
    "sentences+phrases+words": "sentences + phrases + words",
    "tsv": "uploaded TSV",
    "brown": "Brown corpus (English)",
}
#: :data:`model.config.ARCHITECTURES` as the form's picker shows them.
ARCH_LABELS = {"encoder-decoder": "encoder-decoder (English → German translator)",
               "decoder-only": "decoder-only (GPT-style language model)"}


def _time(iso) -> float | None:
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except (TypeError, ValueError):
        return None


def progress(status: dict, max_minutes: float | None = None, now: float | None = None,
             live: bool = True) -> tuple[float, str] | None:
    """``(fraction done, text)`` of a run by the limit that ends it first, or ``None`` when it has no limit to
    measure against.

    ``status`` is the run's ``status.json`` (``step``, ``max_steps``, ``started``, ``updated``, ``max_minutes``);
    ``max_minutes`` is used when the status lacks it (a trainer from before it was recorded); 0 = no time limit.
    The wall time counts from ``started`` (this process's start: a resumed run gets its ``--max-minutes`` again)
    to ``now`` (UNIX seconds; default: the current time) while ``live``, else to ``updated``. Of steps and minutes,
    the limit with the larger fraction done binds (it will be reached first at the present pace): a two-minute run
    with a 100,000-step limit reads ``"1.2 of 2 minutes · step 90"``, not ``"step 90 of 100000"``.
    """
    step = status.get("step") or 0
    max_steps = status.get("max_steps") or 0
    limit = status.get("max_minutes", max_minutes) or 0
    start = _time(status.get("started"))
    end = (now if now is not None else datetime.now().timestamp()) if live else _time(status.get("updated"))
    by_steps = step / max_steps if max_steps else None
    minutes = max(0.0, (end - start) / 60) if limit and start is not None and end is not None else None
    by_time = minutes / limit if minutes is not None else None
    if by_time is not None and (by_steps is None or by_time > by_steps):
        return min(1.0, by_time), f"{minutes:.1f} of {limit:g} minutes · step {step}"
    if by_steps is not None:
        return min(1.0, by_steps), f"step {step} of {max_steps}"
    return None
