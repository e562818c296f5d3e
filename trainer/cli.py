"""``python -m trainer.train --out runs/NAME [options]``: the command line of the trainer.

The recipe of Vaswani et al. (2017), §5, scaled down: Adam (β₁ 0.9, β₂ 0.98, ε 1e-9), the warmup +
inverse-square-root learning rate of eq. (3), label smoothing 0.1, dropout, batches bucketed by length under
a token budget, gradient clipping, a seed. The options are the fields of :class:`training.config.TrainConfig`.

The run folder (:mod:`training.runs`) holds ``config.json`` (model), ``train_args.json``, ``metrics.jsonl``, ``best/``
(the checkpoint with the best validation score) and ``last/`` (checkpoint + optimizer + trainer state, written by
:mod:`training.state`, for ``--resume``, which continues the run exactly with its saved options:
:mod:`trainer.resume`). SIGTERM/SIGINT stop gracefully after the current step, writing
``last/``. Under ``torchrun`` it trains data-parallel (:mod:`training.distributed`).

Decoder-only: ``--arch decoder-only`` trains a GPT-style causal language model on the same data instead. Each side
of every training pair (English and German) becomes its own sequence ``<bos> … <eos>``
(:func:`training.batches.encode_examples`), so the model learns to continue a prompt in either language. The loss
is the same next-token cross-entropy; validation reports loss and perplexity (``valid_ppl``) and no BLEU/chrF;
the probes continue the probe sentences (:func:`training.checkpoints.probe_record`). With ``--corpus brown`` a
decoder-only model reads English sentences of the Brown corpus instead (:mod:`corpora.brown`).

Exit codes: 0 done (or stopped by a signal), 2 bad options or data (``error: …`` on stderr, ``status.json``
says ``failed``); a crash writes ``failed`` too and propagates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from corpora.files import DataError
from model.config import ConfigError
from trainer.loop import train_loop
from trainer.options import parse_config
from trainer.resume import RunBusyError
from training.config import TrainConfig
from training.distributed import dist_from_env, process_group, setup_device
from training.runs import write_status


def run(config: TrainConfig, given: set[str] | None = None) -> int:
    """Train ``config``, as a single process or as one rank of a ``torchrun`` launch; ``given``: the options written
    on the command line (``None``: all)."""
    ctx = dist_from_env()
    device = setup_device(config.device, ctx)
    with process_group(ctx):
        return train_loop(config, ctx, device, given)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and train. Returns the exit code."""
    config, given = parse_config(argv)
    try:
        return run(config, given)
    except RunBusyError as exc:  # the live run's status.json is not ours to touch
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (DataError, ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if Path(config.out).is_dir() and dist_from_env().is_main:
            write_status(Path(config.out), state="failed", exit_code=2, error=str(exc))
        return 2
    except BaseException as exc:  # a crash: say so in status.json, then let it propagate
        if Path(config.out).is_dir() and dist_from_env().is_main:
            write_status(Path(config.out), state="failed", exit_code=1, error=f"{type(exc).__name__}: {exc}")
        raise
