"""What a run saves and starts from besides ``best/``: the exact resume state in ``last/``, log-spaced snapshots,
the kept evaluations of ``--keep-last``, and a warm start from another checkpoint (``--init-from``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from corpora.files import DataError
from model.baseline import build_model, load_baseline
from model.checkpoint import (Checkpoint, atomic_write_json, is_checkpoint_dir, is_own_checkpoint_dir, load_checkpoint,
                              save_checkpoint, save_tensors)
from model.config import ModelConfig
from model.tokenizer import TextTokenizer
from .runs import append_probes, probe_record

EVALS_DIR = "evals"
#: Model options that only act in training, so a warm start (``--init-from``) may change them.
WARM_START_KNOBS = ("dropout", "attention_dropout", "activation_dropout", "decoder_layerdrop")


def save_last(folder: Path, model, tok, opt, state: dict, rng_states: list[torch.Tensor] | None = None) -> None:
    """The resume state: model, optimizer moments, trainer state and the CPU RNG state of every rank
    (``rng_states[r]``; default: this process's), rank 0's as ``rng.torch`` and rank r's as ``rng.torch.r``."""
    save_checkpoint(folder, model, tok, card={"kind": "resume state", **{k: state[k] for k in ("step", "epoch")}})
    rng_states = rng_states or [torch.get_rng_state()]
    tensors = {"rng.torch": rng_states[0], **{f"rng.torch.{r}": t for r, t in enumerate(rng_states) if r}}
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            for key, val in opt.state.get(p, {}).items():
                tensors[f"opt.{i}.{j}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
    save_tensors(folder / "optimizer.safetensors", tensors)
    atomic_write_json(folder / "trainer_state.json", state)


def read_trainer_state(folder: Path) -> dict:
    """``trainer_state.json`` of a ``last/`` folder (step, epoch, batch, tokens_seen, best_…, world_size)."""
    return json.loads((Path(folder) / "trainer_state.json").read_text())


def load_last(folder: Path, model, opt, rank: int = 0) -> dict:
    """Restore what :func:`save_last` wrote into ``opt`` and the RNG (``rank``'s); returns the trainer state."""
    tensors = load_file(str(folder / "optimizer.safetensors"))
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            # Adam's step count stays on the CPU, as torch's own load_state_dict leaves it: on a GPU every
            # parameter's bias correction would read it back, one wait for the device per parameter and step.
            st = {k.split(".")[-1]: v if k.endswith(".step") else v.to(p.device)
                  for k, v in tensors.items() if k.startswith(f"opt.{i}.{j}.")}
            if st:
                opt.state[p] = st
    torch.set_rng_state(tensors[f"rng.torch.{rank}" if rank else "rng.torch"])
    return read_trainer_state(folder)


def load_any(folder: Path, impl: str, device) -> Checkpoint:
    """A checkpoint of either implementation (``impl`` ``ours`` or ``torch``)."""
    if impl == "ours":
        return load_checkpoint(folder, device)
    model = load_baseline(folder, device)
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    return Checkpoint(model, TextTokenizer.from_file(folder / "tokenizer.json"), model.cfg, card, folder)


def snapshot(model, tok, out: Path, step: int) -> None:
    """Checkpoint ``checkpoints/step-N/`` (fp16) and the probe sentences' attention in ``probes.jsonl``."""
    save_checkpoint(out / "checkpoints" / f"step-{step}", model, tok, {"step": step, "kind": "snapshot"},
                    dtype=torch.float16)
    append_probes(out, probe_record(model, tok, step))


def keep_evaluation(model, tok, out: Path, step: int, keep: int) -> Path:
    """Save the weights at evaluation ``step`` as ``evals/step-N`` (fp32, for :mod:`training.average`) and delete all
    but the last ``keep`` of them. Returns the new folder."""
    folder = save_checkpoint(out / EVALS_DIR / f"step-{step}", model, tok, {"step": step, "kind": "evaluation"})
    kept = sorted((p for p in (out / EVALS_DIR).iterdir() if p.name.startswith("step-")),
                  key=lambda p: int(p.name.split("-")[1]))
    for old in kept[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def schedule_position(card: dict) -> int:
    """Where a checkpoint left the learning-rate schedule: its card's ``step`` plus the ``lr_step_offset`` its own
    run started at (``recipe_extra``; 0 when it was not warm-started), so that a chain of warm starts continues
    the schedule instead of restarting it at the last run's step count."""
    offset = (card.get("recipe_extra") or {}).get("lr_step_offset") or 0
    return int(card.get("step") or 0) + int(offset)


def hf_refusal(folder: str | Path) -> str | None:
    """Why a run cannot start from ``folder``, or ``None``: a Hugging Face model folder is refused, because the
    trainer writes checkpoints of ours (``tokenizer.json`` of our BPE, our tensor names), which a MarianMT's
    SentencePiece or GPT-2's byte-level tokenizer and its weights are not; the explorer's pages open such a folder
    directly."""
    if is_checkpoint_dir(folder) and not is_own_checkpoint_dir(folder):
        return (f"{folder} is a Hugging Face model folder; a run starts only from a checkpoint of this project "
                "(checkpoints/en-de, checkpoints/brown-lm or a run's best/). Open it on the other pages instead.")
    return None


def warm_start(args, device, given=frozenset()):
    """``(model, tokenizer, config)`` of ``--init-from``: its weights, tokenizer and architecture, in training mode.

    Only the training-time knobs typed on the command line (``given``: dropout, attention dropout) replace the
    checkpoint's;
    the other model options are ignored (its architecture is kept). ``--lr-step-offset`` defaults to the
    checkpoint's :func:`schedule_position`, so the schedule continues where it left off. Records the origin in
    ``args.init_card`` for the new card (with the checkpoint card's ``legs`` history, when it has one) and sets
    ``args``' model options to the checkpoint's. Raises ``DataError`` when the folder is not a loadable checkpoint
    of ours.
    """
    if reason := hf_refusal(args.init_from):
        raise DataError(f"--init-from: {reason}")
    try:
        ckpt = load_checkpoint(args.init_from, device)
    except Exception as exc:  # CheckpointError and friends: a clear message, exit code 2
        raise DataError(f"--init-from: {exc}") from exc
    cfg = ckpt.config
    changes = {k: getattr(args, k) for k in WARM_START_KNOBS if k in given}
    if changes:
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **changes})
        model = build_model(cfg, "ours").to(device)
        model.load_state_dict(ckpt.model.state_dict())
    else:
        model = ckpt.model
    model.train()
    card = ckpt.card or {}
    if args.lr_step_offset is None:
        args.lr_step_offset = schedule_position(card)
    prior = card.get("init_from", {})
    args.init_card = {  # what the checkpoint had seen, totals over every warm start before it included
        "checkpoint": str(args.init_from), "step": card.get("step"),
        "tokens_seen": (card.get("tokens_seen") or 0) + (prior.get("tokens_seen") or 0),
        "train_minutes": round((card.get("train_minutes") or 0) + (prior.get("train_minutes") or 0), 1),
    }
    if isinstance(card.get("legs"), list):  # the lineage's scores leg by leg, carried into the new card
        args.init_card["legs"] = card["legs"]
    # The model options this run has in fact, so that train_args.json and the card tell the truth.
    args.arch, args.impl, args.layers = cfg.arch, "ours", cfg.n_decoder_layers
    for k in ("d_model", "n_heads", "d_ff", "pos_encoding", "norm_first", "max_len", *WARM_START_KNOBS):
        setattr(args, k, getattr(cfg, k))
    args.encoder_layers, args.decoder_layers = cfg.n_encoder_layers, cfg.n_decoder_layers
    args.vocab_size = cfg.vocab_size
    return model, ckpt.tokenizer, cfg


def read_tokenizer(path: str | Path) -> TextTokenizer:
    """The tokenizer of ``--tokenizer``: a ``tokenizer.json`` file, or a checkpoint folder holding one. Raises
    ``DataError`` when there is none or it cannot be read."""
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise DataError(f"--tokenizer {path}: no tokenizer.json there")
    try:
        return TextTokenizer.from_file(file)
    except ValueError as exc:
        raise DataError(f"--tokenizer: {exc}") from exc
