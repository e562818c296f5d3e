"""The trainer's command line: one ``argparse`` option per :class:`~training.config.TrainConfig` field, which
options a command line wrote, which of them a ``--resume`` may change, and the combinations the trainer refuses."""

from __future__ import annotations

import argparse
import copy
from typing import Any

from training.config import FIELDS, TrainConfig, flag_of, value_type


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m trainer.train``, one option per :class:`TrainConfig` field."""
    p = argparse.ArgumentParser(prog="python -m trainer.train", description="Train an EN→DE Transformer.")
    groups: dict[str, argparse._ActionsContainer] = {"run": p}  # the parser holds the "run" options
    for name, f in FIELDS.items():
        meta = f.metadata
        group = groups.get(meta["group"]) or groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        kw: dict[str, Any] = {"dest": name, "help": meta["help"] or None}
        if isinstance(f.default, bool):
            kw["action"] = "store_false" if f.default else "store_true"
        else:
            kw.update(default=f.default, type=value_type(name))
            kw.update({k: meta[k] for k in ("choices", "metavar", "required") if k in meta})
            if meta.get("required"):
                del kw["default"]
        group.add_argument(flag_of(name), **kw)
    return p


def parse_config(argv: list[str] | None = None) -> tuple[TrainConfig, set[str]]:
    """``(config, given)`` of the command line ``argv`` (default ``sys.argv[1:]``): the :class:`TrainConfig` and the
    names of the options written in ``argv`` (:func:`given_options`). Exits with argparse's usage error (code 2)
    for an unknown flag or a bad value."""
    parser = build_parser()
    return TrainConfig(**vars(parser.parse_args(argv))), given_options(parser, argv)


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``dest`` names of the options actually written in ``argv`` (not filled in from defaults)."""
    probe = copy.deepcopy(parser)
    for action in probe._actions:  # argparse has no public switch for "no defaults"
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(probe.parse_args(argv)))


# What ``--resume`` may change: limits and the machine. An option left off the command line keeps the saved
# run's value (a resumed run is not silently cut to the default --max-steps, nor loses --test-at-end); the
# model and data options always come from the saved run.
RESUME_OVERRIDABLE = (
    "max_steps",
    "max_minutes",
    "no_progress",
    "threads",
    "device",
    "test_at_end",
    "snapshots",
    "compile",
    "peak_tflops",
    "precision",
    "patience",
    "cooldown_steps",
)


def check_args(args: TrainConfig) -> None:
    """Refuse combinations the trainer cannot run. Raises ``ValueError`` (``main`` exits with code 2)."""
    if args.impl != "ours" and args.arch != "encoder-decoder":
        raise ValueError(
            f"--impl {args.impl} (the torch.nn.Transformer baseline) is encoder-decoder only; "
            f"train --arch {args.arch} with --impl ours"
        )
    if args.cooldown_steps > args.max_steps:
        raise ValueError(
            f"--cooldown-steps {args.cooldown_steps} is longer than --max-steps {args.max_steps}: the "
            "decay ends at --max-steps"
        )
    if args.tokenizer and args.init_from:  # (a resumed run saved its own tokenizer in last/)
        raise ValueError("--tokenizer is for a new model; --init-from keeps its checkpoint's tokenizer")
    if args.mix and (args.train_tsv or args.corpus == "brown"):
        raise ValueError("--mix names the training data; leave out --train-tsv and --corpus brown")
    if args.reverse and (args.corpus == "brown" or args.arch != "encoder-decoder"):
        raise ValueError(
            "--reverse swaps the sides of translation pairs: it trains an encoder-decoder German → "
            "English translator, not a language model"
        )
    if args.corpus == "brown":
        if args.arch != "decoder-only":
            raise ValueError(
                "--corpus brown is English only: it trains a language model (--arch decoder-only), not a translator"
            )
        if args.train_tsv or args.valid_tsv:
            raise ValueError("--corpus brown and --train-tsv/--valid-tsv both name the training data; give one")
        if args.phrases_per_epoch or args.words_per_epoch or args.sentence_repeat != 1:
            raise ValueError(
                "--phrases-per-epoch, --words-per-epoch and --sentence-repeat are for the Ding pairs, "
                "not --corpus brown"
            )
