"""Carry a shipped checkpoint's card across one more training leg: ``python -m tools.card``.

A lineage trained over many sessions (``--init-from`` / ``--resume``, then a soup from :mod:`tools.average`)
ships one ``card.json`` whose numbers must add up: the lineage's step, tokens and CPU-minutes, the valid curve of
every leg, the scores on every evaluation set. This command takes the card of the checkpoint a leg started from,
the leg's run folder (its ``metrics.jsonl``; a cooled copy made with ``cp -a`` holds the rows of the run it was
copied from) and the reports of ``python -m evaluation.evaluate`` on the candidate that ships, and writes the new
card: the numbers computed, the prose (why this candidate, what the leg changed) given by the person who ran it.
It prints the leg's rows for the curve table under *Training procedure* in the model card (``README.md`` beside
``card.json``); the leg's story, its candidates and decisions go to the ``HISTORY.md`` beside it.

    python -m tools.card --card checkpoints/en-de/card.json --run runs/en-de-mix8-cool --leg 8 \\
        --parent "leg 7 soup" --cooldown-from 6000 --valid valid.json --greedy greedy.json --beam beam.json \\
        --selected-by "…" --out /tmp/card.json

With ``--add-sets`` it adds no leg: a set the suite gained after a checkpoint shipped (FLORES-200) is scored on the
shipped checkpoint and its scores added to the card, nothing else changed:

    python -m tools.card --card checkpoints/en-de/card.json --add-sets --greedy greedy.json --beam beam.json \
        --out checkpoints/en-de/card.json
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path

from corpora.extra import FLORES_NAME
from model.checkpoint import atomic_write_json
from model.config import ConfigError, ModelConfig
from model.transformer import Transformer
from training import runs


class CardError(ValueError):
    """A card, run folder or report that cannot make a card (missing, unreadable, or of the wrong shape)."""


def _read_json(path: str | Path, what: str) -> dict:
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
        train += [dict(r, step=step + r["step"], tokens_seen=tokens + r["tokens_seen"],
                       time_s=seconds + r.get("time_s", 0)) for r in t]
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


def leg_rows(run: str | Path | Sequence[str | Path], start: dict, leg: int, parent: str,
             cooldown_from: int | None = None, every: int = 1000,
             minutes_key: str = "train_minutes") -> tuple[list[dict], dict]:
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
        rows.append({"leg": f"leg {leg}, from {parent}{where} · step {start['step'] + s:,}",
                     minutes_key: round(start[minutes_key] + r.get("time_s", 0) / 60, 1),
                     "tokens_seen": start["tokens_seen"] + tokens_at(train, s),
                     "valid_loss": r["valid_loss"], "valid_chrf": r.get("valid_chrf"), "shipped": False})
    seconds = max(r.get("time_s", 0) for r in train + valid)
    total = {"step": start["step"] + last, "tokens_seen": start["tokens_seen"] + max(r["tokens_seen"] for r in train),
             minutes_key: round(start[minutes_key] + seconds / 60, 1)}
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
        "n_encoder_layers": cfg.n_encoder_layers, "n_decoder_layers": cfg.n_decoder_layers}


def _by_set(report: dict, strategy: str) -> dict:
    try:
        return {r["name"]: {"sentences": r["sentences"], **{k: r["scores"][strategy][k] for k in ("bleu", "chrf")}}
                for r in report["sets"]}
    except (KeyError, TypeError):
        raise CardError(f"the suite report has no {strategy} scores: write it with --suite-strategies "
                        f"{strategy} --json FILE") from None


def _repeats(report: dict, strategy: str) -> dict:
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
    gs, bs = _by_set(greedy, "greedy"), _by_set(beam, "beam")
    fields = {}
    for key, name, split in (("test", "multi30k test2016", "Multi30K test2016"),
                             ("everyday", "everyday", "assets/eval/everyday.tsv"),
                             ("ding_test", "ding test", "Ding test sentences")):
        if name not in gs:
            raise CardError(f"the greedy report has no '{name}' set (was ../shared/data there?)")
        fields[key] = {"split": split, **gs[name], "decoding": "greedy"}
    fields["suite"] = {"greedy": gs, "goal": {s: {"greedy": o["greedy"]} for s, o in greedy["goal"].items()},
                       "repeats": _repeats(greedy, "greedy"),
                       "command": f"python -m evaluation.evaluate --suite --checkpoint {checkpoint}",
                       "goal_beam": {s: {"beam": o["beam"]} for s, o in beam["goal"].items()},
                       "repeats_beam": _repeats(beam, "beam")}
    fields["beam"] = {"decoding": _beam_decoding(beam), **bs, "limit": 0}
    return fields


def _beam_decoding(beam: dict) -> str:
    """How a beam report decoded, in the card's words ("beam 8, length penalty alpha 1.0").

    Raises:
        CardError: a report that does not say its width and alpha.
    """
    decoding = beam.get("decoding") or {}
    if not {"beam", "alpha"} <= decoding.keys():
        raise CardError("the beam report does not say its beam width and alpha (under 'decoding'): write it with "
                        "python -m evaluation.evaluate --suite --json FILE")
    return f"beam {decoding['beam']}, length penalty alpha {decoding['alpha']}"


def add_sets(card: dict, greedy: dict, beam: dict) -> tuple[dict, list[str]]:
    """``card`` with the scores of the sets it has none for, from two ``--suite --json`` reports of the shipped
    checkpoint itself (a set the suite gained after the checkpoint shipped, such as FLORES-200): ``(new card,
    names added)``, ``card`` untouched. No leg is added and nothing the card already scores changes; each added
    set's repeated words go beside the others when the card keeps them per set.

    Raises:
        CardError: a card without suite scores, a report without the strategy's scores, or a beam report decoded
            with another width or alpha than the card's beam scores.
    """
    if not isinstance(card.get("suite"), dict) or not isinstance(card.get("beam"), dict):
        raise CardError("the card has no suite scores to add to (no 'suite' and 'beam'): carry it across a leg")
    said = _beam_decoding(beam)
    if said != card["beam"].get("decoding"):
        raise CardError(f"the beam report was decoded with {said}, the card's beam scores with "
                        f"{card['beam'].get('decoding')}: score them the same way")
    new = copy.deepcopy(card)
    added = []
    for strategy, report, scores, repeats in (("greedy", greedy, new["suite"].setdefault("greedy", {}), "repeats"),
                                              ("beam", beam, new["beam"], "repeats_beam")):
        kept = new["suite"].get(repeats)
        per_set = isinstance(kept, dict) and strategy not in kept  # an older card keeps one summary per strategy
        found = _repeats(report, strategy)
        for name, row in _by_set(report, strategy).items():
            if name in scores:
                continue
            scores[name] = row
            added.append(f"{name} ({strategy})")
            if per_set and name in found:
                kept[name] = found[name]
    return new, added


def markdown_rows(rows: list[dict]) -> list[str]:
    """``rows`` (the card's ``legs`` entries that have a valid loss) as rows of the curve table under *Training
    procedure* in the model card (:func:`card_pages`): label, minutes, tokens (millions), valid loss (nats/token),
    valid chrF."""
    return [f"| {r['leg']} | {r.get('train_minutes', r.get('cpu_minutes'))} | {r['tokens_seen'] / 1e6:.1f}M | "
            f"{r['valid_loss']:.4f} | "
            f"{r['valid_chrf'] if r.get('valid_chrf') is not None else '–'} |" for r in rows if "valid_loss" in r]


def card_pages(card_json: str | Path) -> tuple[Path, Path]:
    """``(model card, history)`` beside a checkpoint's ``card.json``: its ``README.md``, whose *Training procedure*
    holds the shipped lineage's curve table, and its ``HISTORY.md``, where each leg's commands, candidates and
    decisions go (neither need exist yet)."""
    folder = Path(card_json).parent
    return folder / "README.md", folder / "HISTORY.md"


def append_leg(card: dict, run: str | Path | Sequence[str | Path], leg: int, parent: str, valid: dict, greedy: dict,
               beam: dict, selected_by: str, cooldown_from: int | None = None, every: int = 1000,
               date: str | None = None, shipped_label: str | None = None, data_note: str = "", command: str = "",
               machine: str | None = None, own_valid: str | None = None) -> dict:
    """``card`` (the card the leg started from) carried across one more leg: a new dict, ``card`` untouched.

    ``valid`` is the ``--loss`` report of ``python -m evaluation.evaluate --tsv`` on the shipped candidate; the old
    rows of ``legs`` stay, no longer marked shipped; ``data_note`` and ``command`` go under ``data.legN`` and
    ``recipe_extra.legN``.

    ``machine="cpu"`` after a GPU-trained card (its ``device`` is ``cuda…``): the leg's minutes are CPU-minutes,
    ~100 times slower than the GPU's, so they go to the card's ``cpu_minutes`` and the GPU's ``train_minutes``
    stay as they were (never one sum of the two). ``own_valid`` names the valid set of a leg whose trainer scored
    another set than the card's curve (a new mixture's): its rows go to ``leg_curves["legN"]`` under that name
    instead of beside the earlier legs' points, where one line would join two sets' scores.

    Raises:
        CardError: see :func:`read_metrics`, :func:`parameters` and :func:`suite_fields`; or a card without step,
            tokens or minutes.
    """
    try:
        start = {k: card[k] for k in ("step", "tokens_seen", "train_minutes")}
    except KeyError as exc:
        raise CardError(f"the card has no {exc.args[0]}: it is not a trained checkpoint's card") from None
    apart = machine == "cpu" and str(card.get("device", "")).startswith("cuda")
    minutes_key = "cpu_minutes" if apart else "train_minutes"
    start.setdefault(minutes_key, card.get(minutes_key) or 0.0)
    rows, total = leg_rows(run, start, leg, parent, cooldown_from, every, minutes_key)
    count, depths = parameters(run)
    new = copy.deepcopy(card)
    new.update(total)
    if card.get("parameters") not in (None, count):  # grown (or otherwise changed) in this leg: say from what
        new.setdefault("architecture_changes", []).append(
            {"leg": leg, "parameters": [card.get("parameters"), count], **depths})
    new["parameters"] = count
    new["total"] = {"tokens_seen": total["tokens_seen"], "train_minutes": new["train_minutes"]}
    if apart:
        new["total"]["cpu_minutes"] = new["cpu_minutes"]
    if date:
        new["date"] = date
    new["valid"] = {"split": "mixture valid", **{k: valid[k] for k in ("bleu", "chrf", "loss", "perplexity")
                                                if k in valid}, "sentences": valid.get("sentences")}
    fields = suite_fields(greedy, beam)
    new.update(fields)
    new["selected_by"] = selected_by
    if data_note:
        new.setdefault("data", {})[f"leg{leg}"] = data_note
    if command:
        new.setdefault("recipe_extra", {})[f"leg{leg}"] = command
    new.pop("averaged", None)  # the soup's own inputs are named in selected_by, in words
    legs = [dict(r, shipped=False) for r in card.get("legs", [])]
    if own_valid:
        new.setdefault("leg_curves", {})[f"leg{leg}"] = {"valid_set": own_valid, "rows": rows}
    else:
        legs += rows
    legs.append({"leg": shipped_label or f"leg {leg} · shipped", minutes_key: total[minutes_key],
                 "tokens_seen": total["tokens_seen"], "valid_chrf": None,
                 "everyday_chrf": fields["everyday"]["chrf"], "test_chrf": fields["test"]["chrf"], "shipped": True})
    flores = fields["suite"]["greedy"].get(FLORES_NAME)
    if flores:  # the general domain beside the everyday set on the card's chart (viz.training.LEG_SCORES)
        legs[-1]["flores_chrf"] = flores["chrf"]
    new["legs"] = legs
    return new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.card", description=__doc__.split("\n\n")[0])
    p.add_argument("--card", required=True, help="card.json of the checkpoint the leg started from")
    p.add_argument("--run", nargs="+", help="the leg's run folder (the cooled copy, when there is one); a leg that "
                   "went on as new runs, each --init-from the one before's end: every folder, in order")
    p.add_argument("--leg", type=int, default=None, help="the leg's number in the lineage")
    p.add_argument("--parent", help='where the leg started, e.g. "leg 7 soup"')
    p.add_argument("--cooldown-from", type=int, default=None, help="run step where the cooldown began")
    p.add_argument("--every", type=int, default=1000, help="keep an evaluation row every N run steps")
    p.add_argument("--valid", help="JSON of python -m evaluation.evaluate --tsv … --loss")
    p.add_argument("--greedy", required=True, help="JSON of --suite --suite-strategies greedy --json")
    p.add_argument("--beam", required=True, help="JSON of --suite --suite-strategies beam --json")
    p.add_argument("--selected-by", help="why this candidate ships, in words")
    p.add_argument("--shipped-label", default=None, help="the shipped row's label")
    p.add_argument("--data-note", default="", help="what the leg changed in the data")
    p.add_argument("--command", default="", help="the leg's training command(s)")
    p.add_argument("--date", default=None, help="the card's date (YYYY-MM-DD)")
    p.add_argument("--machine", choices=("cpu", "gpu"), default=None, help="where the leg ran; cpu after a "
                   "GPU-trained card counts its minutes apart, as cpu_minutes")
    p.add_argument("--own-valid", default=None, help="the name of the leg's own valid set, when its trainer scored "
                   "another set than the card's curve: its rows go to leg_curves, not into the chart's legs")
    p.add_argument("--out", required=True, help="the new card.json to write")
    p.add_argument("--add-sets", action="store_true", help="no leg: add to --card the scores of the sets it has "
                   "none for, from --greedy and --beam reports of the shipped checkpoint itself")
    args = p.parse_args(argv)
    if args.add_sets:
        return _main_add_sets(args)
    needed = [f"--{k.replace('_', '-')}" for k in ("run", "leg", "parent", "valid", "selected_by")
              if getattr(args, k) is None]
    if needed:
        p.error(f"a leg needs {', '.join(needed)} (or give --add-sets)")
    try:
        card = _read_json(args.card, "card")
        valid, greedy, beam = (_read_json(getattr(args, k), f"--{k} report") for k in ("valid", "greedy", "beam"))
        new = append_leg(card, args.run, args.leg, args.parent, valid, greedy, beam, selected_by=args.selected_by,
                         cooldown_from=args.cooldown_from, every=args.every, date=args.date,
                         shipped_label=args.shipped_label, data_note=args.data_note, command=args.command,
                         machine=args.machine, own_valid=args.own_valid)
    except CardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    atomic_write_json(out, new)
    readme, history = card_pages(args.card)
    unit = "GPU" if str(new.get("device", "")).startswith("cuda") else "CPU"  # as the pages read a card's minutes
    cpu = f" + {new['cpu_minutes']} CPU-min" if "cpu_minutes" in new else ""
    print(f"wrote {out}: step {new['step']:,}, {new['tokens_seen']:,} tokens, {new['train_minutes']} {unit}-min{cpu}, "
          f"{len(new['legs'])} curve rows; the leg's rows for the curve table under 'Training procedure' in "
          f"{readme} (what the leg tried and why goes to {history}):")
    curve = (new.get("leg_curves") or {}).get(f"leg{args.leg}", {}).get("rows") if args.own_valid else None
    print("\n".join(markdown_rows(curve or new["legs"][len(card.get("legs", [])):])))
    return 0


def _main_add_sets(args) -> int:
    """``--add-sets``: :func:`add_sets`, written to ``--out``; 2 with a message for a bad card or report."""
    try:
        card = _read_json(args.card, "card")
        new, added = add_sets(card, *(_read_json(getattr(args, k), f"--{k} report") for k in ("greedy", "beam")))
    except CardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_json(Path(args.out), new)
    print(f"wrote {args.out}: added {', '.join(added)}" if added else
          f"wrote {args.out}: the card already scores every set of the reports; nothing added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
