"""What a model card is made from, read and checked: a training leg's run folders (its curve rows, the lineage's
totals after it, the weights it trained) and the evaluation suite's reports (each set's scores, its repeated words,
how the beam decoded). :mod:`tools.card` writes the card from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from model.config import ConfigError, ModelConfig
from model.transformer import Transformer
from training import runs


class CardError(ValueError):
    """A card, run folder or report that cannot make a card (missing, unreadable, or of the wrong shape)."""


def read_object(path: str | Path, what: str) -> dict:
    """The JSON object in ``path`` (:func:`training.runs.read_json`); raises :class:`CardError` otherwise."""
    if not Path(path).is_file():
        raise CardError(f"{what} {path} does not exist")
    obj = runs.read_json(Path(path))
    if not isinstance(obj, dict):
        raise CardError(f"{what} {path} is not readable JSON (an object)")
    return obj


def read_metrics(run: str | Path) -> tuple[list[dict], list[dict]]:
    """The run's training rows (with ``tokens_seen``) and its evaluation rows (with ``valid_loss``, one per step,
    the last written kept: a resumed leg may evaluate a step again).

    Raises:
        CardError: the run has no ``metrics.jsonl``, or no evaluation in it.
    """
    path = Path(run) / runs.METRICS
    if not path.is_file():
        raise CardError(f"{run} has no {runs.METRICS}: is it a run folder?")
    rows = runs.read_metrics(Path(run))  # a line cut short by a kill is skipped, the rest still counts
    train = [r for r in rows if "tokens_seen" in r]
    valid = sorted({r["step"]: r for r in rows if "valid_loss" in r}.values(), key=lambda r: r["step"])
    if not valid:
        raise CardError(f"{path} holds no evaluation yet")
    return train, valid


def run_folders(run: str | Path | Sequence[str | Path]) -> list[str | Path]:
    """The leg's run folders in order (``run`` alone, or the runs it went through); :class:`CardError` if none."""
    folders = [run] if isinstance(run, (str, Path)) else list(run)
    if not folders:
        raise CardError("no run folder given")
    return folders


def chain_metrics(run: str | Path | Sequence[str | Path]) -> tuple[list[dict], list[dict]]:
    """:func:`read_metrics` of runs that continue one another (each ``--init-from`` the one before's end) as one
    run, each later run's steps, ``tokens_seen`` and ``time_s`` counted on from where the one before it stopped: a
    leg that went on over sessions as new runs (fresh Adam moments, steps from 0) is still one leg of the lineage.
    Raises :class:`CardError` (:func:`read_metrics`, :func:`run_folders`)."""
    train, valid = [], []
    step = tokens = seconds = 0
    for folder in run_folders(run):
        t, v = read_metrics(folder)
        train += [
            dict(r, step=step + r["step"], tokens_seen=tokens + r["tokens_seen"], time_s=seconds + r.get("time_s", 0))
            for r in t
        ]
        valid += [dict(r, step=step + r["step"], time_s=seconds + r.get("time_s", 0)) for r in v]
        step += max(r["step"] for r in t + v)  # the next run starts from this one's last/, its last step
        tokens += max((r["tokens_seen"] for r in t), default=0)
        seconds += max(r.get("time_s", 0) for r in t + v)
    return train, valid


def tokens_at(train_rows: list[dict], step: int) -> int:
    """Tokens seen by ``step``: the last training row at or before it (0 before the first)."""
    seen = 0
    for r in train_rows:
        if r["step"] <= step:
            seen = max(seen, r["tokens_seen"])
    return seen


def leg_rows(
    run: str | Path | Sequence[str | Path],
    start: dict,
    leg: int,
    parent: str,
    cooldown_from: int | None = None,
    every: int = 1000,
    minutes_key: str = "train_minutes",
) -> tuple[list[dict], dict]:
    """The card's curve rows for one leg, and the leg's totals.

    Args:
        run: the leg's run folder (the cooled copy when it was cooled down), or the run folders it went through in
            order, each started from the one before's end (:func:`chain_metrics`).
        start: the lineage before this leg: ``step``, ``tokens_seen`` and ``train_minutes`` (CPU-minutes of wall
            time on the card's hardware).
        leg: the leg's number, ``parent``: where it started, e.g. ``"leg 7 soup"``.
        cooldown_from: the run's step where the learning rate began its linear decay, to mark those rows (over
            several runs: counted from the first run's start).
        every: keep an evaluation row every this many run steps (and always the last).
        minutes_key: the key of ``start``'s minutes and of the rows' and total's: ``"cpu_minutes"`` for a leg on
            the CPU after a lineage's GPU run, whose minutes are counted apart.

    Returns:
        ``(rows, total)``: rows as the card's ``legs`` holds them (``valid_loss``, ``valid_chrf``, lineage step in
        the label), and the lineage's ``step``, ``tokens_seen`` and minutes (``minutes_key``) after the leg.
    """
    train, valid = chain_metrics(run)
    last = valid[-1]["step"]
    rows = []
    for r in valid:
        s = r["step"]
        if s % every and s != last:
            continue
        where = " (cooldown)" if cooldown_from is not None and s > cooldown_from else ""
        rows.append(
            {
                "leg": f"leg {leg}, from {parent}{where} · step {start['step'] + s:,}",
                minutes_key: round(start[minutes_key] + r.get("time_s", 0) / 60, 1),
                "tokens_seen": start["tokens_seen"] + tokens_at(train, s),
                "valid_loss": r["valid_loss"],
                "valid_chrf": r.get("valid_chrf"),
                "shipped": False,
            }
        )
    seconds = max(r.get("time_s", 0) for r in train + valid)
    total = {
        "step": start["step"] + last,
        "tokens_seen": start["tokens_seen"] + max(r["tokens_seen"] for r in train),
        minutes_key: round(start[minutes_key] + seconds / 60, 1),
    }
    return rows, total


def parameters(run: str | Path | Sequence[str | Path]) -> tuple[int, dict]:
    """The number of weights of the leg's model (tied embeddings once) and its depths, from ``run/config.json``
    (of the last run, when the leg went through several).

    A leg may change the model (``python -m tools.grow``), so the card counts what the run trained rather than
    carrying the count of the card it started from.

    Raises:
        CardError: the run has no readable ``config.json``.
    """
    folders = run_folders(run)
    try:
        cfg = ModelConfig.from_json(Path(folders[-1]) / "config.json")
    except ConfigError as exc:
        raise CardError(f"{folders[-1]}: {exc}") from None
    return Transformer.count_parameters(cfg), {
        "n_encoder_layers": cfg.n_encoder_layers,
        "n_decoder_layers": cfg.n_decoder_layers,
    }


def by_set(report: dict, strategy: str) -> dict:
    """``{set name: {"sentences", "bleu", "chrf"}}``: each set's scores by ``strategy`` in a suite report.

    Raises:
        CardError: a report without the strategy's scores.
    """
    try:
        return {
            r["name"]: {"sentences": r["sentences"], **{k: r["scores"][strategy][k] for k in ("bleu", "chrf")}}
            for r in report["sets"]
        }
    except (KeyError, TypeError):
        raise CardError(
            f"the suite report has no {strategy} scores: write it with --suite-strategies {strategy} --json FILE"
        ) from None


def repeats_of(report: dict, strategy: str) -> dict:
    """``{set name: {"checked", "longest", "repeating", "looping"}}``: each set's words repeated in a row
    (:func:`evaluation.suite.repeat_check`) of a suite report; a set scored before the check has none."""
    return {r["name"]: r["repeats"][strategy] for r in report["sets"] if strategy in r.get("repeats", {})}


def suite_fields(greedy: dict, beam: dict, checkpoint: str = "checkpoints/en-de") -> dict:
    """The card's score fields from two ``--suite --json`` reports (one greedy, one beam): ``test``,
    ``everyday``, ``ding_test`` (greedy, as the app's quality line quotes them), ``suite`` and ``beam``.

    Raises:
        CardError: a report without the strategy's scores, or without the Multi30K, everyday or Ding set, or a beam
            report that does not say its width and alpha.
    """
    gs, bs = by_set(greedy, "greedy"), by_set(beam, "beam")
    fields = {}
    for key, name, split in (
        ("test", "multi30k test2016", "Multi30K test2016"),
        ("everyday", "everyday", "assets/eval/everyday.tsv"),
        ("ding_test", "ding test", "Ding test sentences"),
    ):
        if name not in gs:
            raise CardError(f"the greedy report has no '{name}' set (was ../shared/data there?)")
        fields[key] = {"split": split, **gs[name], "decoding": "greedy"}
    fields["suite"] = {
        "greedy": gs,
        "goal": {s: {"greedy": o["greedy"]} for s, o in greedy["goal"].items()},
        "repeats": repeats_of(greedy, "greedy"),
        "command": f"python -m evaluation.evaluate --suite --checkpoint {checkpoint}",
        "goal_beam": {s: {"beam": o["beam"]} for s, o in beam["goal"].items()},
        "repeats_beam": repeats_of(beam, "beam"),
    }
    fields["beam"] = {"decoding": beam_decoding(beam), **bs, "limit": 0}
    return fields


def beam_decoding(beam: dict) -> str:
    """How a beam report decoded, in the card's words ("beam 8, length penalty alpha 1.0").

    Raises:
        CardError: a report that does not say its width and alpha.
    """
    decoding = beam.get("decoding") or {}
    if not {"beam", "alpha"} <= decoding.keys():
        raise CardError(
            "the beam report does not say its beam width and alpha (under 'decoding'): write it with "
            "python -m evaluation.evaluate --suite --json FILE"
        )
    return f"beam {decoding['beam']}, length penalty alpha {decoding['alpha']}"
