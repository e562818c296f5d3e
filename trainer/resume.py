"""The options a run trains with (:func:`resolve_config`): the command line's for a new run, the run folder's saved
ones for ``--resume`` (with the limits typed now), and never in a folder that a live trainer is writing."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from corpora.files import DataError
from trainer.options import RESUME_OVERRIDABLE, check_args
from training.config import TrainConfig, flag_of
from training.distributed import Dist
from training.liveness import effective_state, trained_folder
from training.runs import TRAIN_ARGS, has_resume_state, read_status, read_train_args, write_train_args
from training.state import read_state


class RunBusyError(DataError):
    """``--out`` is the folder of a run that a live process is training: nothing may be written there."""


def refuse_busy_folder(out: Path) -> None:
    """Raise :class:`RunBusyError` when another live process trains in ``out`` (its ``status.json`` says running and
    its pid lives): two trainers in one folder would overwrite each other's files. The message says whether ``out``
    is that run's own folder or a copy taken while it trained (``cp -a``)."""
    status = read_status(out) or {}
    if status.get("pid") == os.getpid() or effective_state(status) != "running":
        return
    owner = trained_folder(status["pid"])
    if owner is not None and owner != out.resolve():
        raise RunBusyError(
            f"{out} is a copy of {owner}, taken while process {status['pid']} was still training it "
            f"(the copied status.json says running): wait until that run stops, then copy it again"
        )
    raise RunBusyError(
        f"{out} is being trained by process {status['pid']} right now: stop it first "
        f"(kill -TERM {status['pid']} saves last/), or choose another --out"
    )


def saved_config(out: Path) -> tuple[TrainConfig, dict]:
    """``(config, ignored)``: the run's saved options (``train_args.json``) as a :class:`TrainConfig`, and the saved
    keys that are no option of this trainer with their values. An option the file lacks (the run is older than the
    option) gets its default; an unknown key (a newer trainer's option) is ignored: :func:`resolve_config` names it
    in a warning and keeps it in the file, so that the trainer that wrote it still finds it. Raises ``DataError``
    when there is nothing to resume or the file is missing or unreadable."""
    if not has_resume_state(out):
        raise DataError(f"nothing to resume in {out} (no last/trainer_state.json)")
    saved = read_train_args(out)
    if not saved:
        raise DataError(f"cannot resume {out}: its {TRAIN_ARGS} is missing or unreadable")
    config, ignored = TrainConfig.from_saved(saved)
    return config, {k: saved[k] for k in ignored}


def resolve_config(config: TrainConfig, ctx: Dist, given: set[str] | None) -> TrainConfig:
    """The options this run trains with. ``--resume``: the saved run's (:func:`saved_config`), except the
    :data:`~trainer.options.RESUME_OVERRIDABLE` limits written on the command line (``given``; ``None`` = every
    option counts as given), which rank 0 saves back so that a later bare ``--resume`` keeps them.

    Raises ``DataError`` when there is nothing to resume, :class:`RunBusyError` when another live process trains in
    ``--out`` (checked for a single process, not for the ranks of a ``torchrun`` launch), and ``ValueError`` for
    options that do not go together."""
    out = Path(config.out)
    if not ctx.enabled:
        refuse_busy_folder(out)
    if config.resume:
        saved, ignored = saved_config(out)
        typed = {k: getattr(config, k) for k in RESUME_OVERRIDABLE if given is None or k in given}
        # out: the folder it is in now (it may have been moved or copied)
        config = replace(saved, **typed, resume=True, out=config.out)
        if ctx.is_main:
            if ignored:
                print(
                    f"warning: {out / TRAIN_ARGS} has {', '.join(ignored)}, which this trainer does not know: ignored",
                    file=sys.stderr,
                )
            write_train_args(out, {**ignored, **config.to_saved()})
            print(resume_limits(out, config, given))
    check_args(config)
    if config.impl != "ours":
        config = replace(config, snapshots=False)  # probes need our traced attention
    return config


def resume_limits(out: Path, config: TrainConfig, given: set[str] | None) -> str:
    """The line a resumed leg starts with: the step it resumes at and where it will stop. A limit kept from the saved
    run (not in ``given``) is named as such, because a copy resumed with only a larger ``--max-steps`` otherwise
    stops quietly at the earlier leg's ``--max-minutes``, long before the steps it was given."""
    step = read_state(out / "last").step
    stop = f"step {config.max_steps:,}"
    if config.max_minutes:
        stop += f" or after {config.max_minutes:g} minutes, whichever comes first"
    kept = [
        f"{flag_of(k)} {getattr(config, k):g}"
        for k in ("max_steps", "max_minutes", "cooldown_steps")
        if getattr(config, k) and given is not None and k not in given
    ]
    line = f"resuming {out} at step {step:,}: this leg stops at {stop}"
    if kept:
        line += f" ({', '.join(kept)} kept from the saved run; type an option to change it)"
    return line
