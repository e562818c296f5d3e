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
from tools.card_inputs import (
    CardError,
    beam_decoding,
    by_set,
    leg_rows,
    parameters,
    read_object,
    repeats_of,
    suite_fields,
)


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
    said = beam_decoding(beam)
    if said != card["beam"].get("decoding"):
        raise CardError(
            f"the beam report was decoded with {said}, the card's beam scores with "
            f"{card['beam'].get('decoding')}: score them the same way"
        )
    new = copy.deepcopy(card)
    added = []
    for strategy, report, scores, repeats in (
        ("greedy", greedy, new["suite"].setdefault("greedy", {}), "repeats"),
        ("beam", beam, new["beam"], "repeats_beam"),
    ):
        kept = new["suite"].get(repeats)
        per_set = isinstance(kept, dict) and strategy not in kept  # an older card keeps one summary per strategy
        found = repeats_of(report, strategy)
        for name, row in by_set(report, strategy).items():
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
    return [
        f"| {r['leg']} | {r.get('train_minutes', r.get('cpu_minutes'))} | {r['tokens_seen'] / 1e6:.1f}M | "
        f"{r['valid_loss']:.4f} | "
        f"{r['valid_chrf'] if r.get('valid_chrf') is not None else '–'} |"
        for r in rows
        if "valid_loss" in r
    ]


def card_pages(card_json: str | Path) -> tuple[Path, Path]:
    """``(model card, history)`` beside a checkpoint's ``card.json``: its ``README.md``, whose *Training procedure*
    holds the shipped lineage's curve table, and its ``HISTORY.md``, where each leg's commands, candidates and
    decisions go (neither need exist yet)."""
    folder = Path(card_json).parent
    return folder / "README.md", folder / "HISTORY.md"


def append_leg(
    card: dict,
    run: str | Path | Sequence[str | Path],
    leg: int,
    parent: str,
    valid: dict,
    greedy: dict,
    beam: dict,
    selected_by: str,
    cooldown_from: int | None = None,
    every: int = 1000,
    date: str | None = None,
    shipped_label: str | None = None,
    data_note: str = "",
    command: str = "",
    machine: str | None = None,
    own_valid: str | None = None,
) -> dict:
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
        CardError: see :mod:`tools.card_inputs` (`read_metrics`, `parameters`, `suite_fields`); or a card without step,
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
            {"leg": leg, "parameters": [card.get("parameters"), count], **depths}
        )
    new["parameters"] = count
    new["total"] = {"tokens_seen": total["tokens_seen"], "train_minutes": new["train_minutes"]}
    if apart:
        new["total"]["cpu_minutes"] = new["cpu_minutes"]
    if date:
        new["date"] = date
    new["valid"] = {
        "split": "mixture valid",
        **{k: valid[k] for k in ("bleu", "chrf", "loss", "perplexity") if k in valid},
        "sentences": valid.get("sentences"),
    }
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
    legs.append(
        {
            "leg": shipped_label or f"leg {leg} · shipped",
            minutes_key: total[minutes_key],
            "tokens_seen": total["tokens_seen"],
            "valid_chrf": None,
            "everyday_chrf": fields["everyday"]["chrf"],
            "test_chrf": fields["test"]["chrf"],
            "shipped": True,
        }
    )
    flores = fields["suite"]["greedy"].get(FLORES_NAME)
    if flores:  # the general domain beside the everyday set on the card's chart (charts.training.LEG_SCORES)
        legs[-1]["flores_chrf"] = flores["chrf"]
    new["legs"] = legs
    return new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.card", description=__doc__.split("\n\n")[0])
    p.add_argument("--card", required=True, help="card.json of the checkpoint the leg started from")
    p.add_argument(
        "--run",
        nargs="+",
        help="the leg's run folder (the cooled copy, when there is one); a leg that "
        "went on as new runs, each --init-from the one before's end: every folder, in order",
    )
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
    p.add_argument(
        "--machine",
        choices=("cpu", "gpu"),
        default=None,
        help="where the leg ran; cpu after a GPU-trained card counts its minutes apart, as cpu_minutes",
    )
    p.add_argument(
        "--own-valid",
        default=None,
        help="the name of the leg's own valid set, when its trainer scored "
        "another set than the card's curve: its rows go to leg_curves, not into the chart's legs",
    )
    p.add_argument("--out", required=True, help="the new card.json to write")
    p.add_argument(
        "--add-sets",
        action="store_true",
        help="no leg: add to --card the scores of the sets it has "
        "none for, from --greedy and --beam reports of the shipped checkpoint itself",
    )
    args = p.parse_args(argv)
    if args.add_sets:
        return _main_add_sets(args)
    needed = [
        f"--{k.replace('_', '-')}" for k in ("run", "leg", "parent", "valid", "selected_by") if getattr(args, k) is None
    ]
    if needed:
        p.error(f"a leg needs {', '.join(needed)} (or give --add-sets)")
    try:
        card = read_object(args.card, "card")
        valid, greedy, beam = (read_object(getattr(args, k), f"--{k} report") for k in ("valid", "greedy", "beam"))
        new = append_leg(
            card,
            args.run,
            args.leg,
            args.parent,
            valid,
            greedy,
            beam,
            selected_by=args.selected_by,
            cooldown_from=args.cooldown_from,
            every=args.every,
            date=args.date,
            shipped_label=args.shipped_label,
            data_note=args.data_note,
            command=args.command,
            machine=args.machine,
            own_valid=args.own_valid,
        )
    except CardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    atomic_write_json(out, new)
    readme, history = card_pages(args.card)
    unit = "GPU" if str(new.get("device", "")).startswith("cuda") else "CPU"  # as the pages read a card's minutes
    cpu = f" + {new['cpu_minutes']} CPU-min" if "cpu_minutes" in new else ""
    print(
        f"wrote {out}: step {new['step']:,}, {new['tokens_seen']:,} tokens, {new['train_minutes']} {unit}-min{cpu}, "
        f"{len(new['legs'])} curve rows; the leg's rows for the curve table under 'Training procedure' in "
        f"{readme} (what the leg tried and why goes to {history}):"
    )
    curve = (new.get("leg_curves") or {}).get(f"leg{args.leg}", {}).get("rows") if args.own_valid else None
    print("\n".join(markdown_rows(curve or new["legs"][len(card.get("legs", [])) :])))
    return 0


def _main_add_sets(args) -> int:
    """``--add-sets``: :func:`add_sets`, written to ``--out``; 2 with a message for a bad card or report."""
    try:
        card = read_object(args.card, "card")
        new, added = add_sets(card, *(read_object(getattr(args, k), f"--{k} report") for k in ("greedy", "beam")))
    except CardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_json(Path(args.out), new)
    print(
        f"wrote {args.out}: added {', '.join(added)}"
        if added
        else f"wrote {args.out}: the card already scores every set of the reports; nothing added"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
