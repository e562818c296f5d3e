"""What a run saves and starts from besides ``best/`` and ``last/`` (:mod:`training.state`): log-spaced snapshots
with the probe sentences' translations and attention, the kept evaluations of ``--keep-last``, and a warm start
from another checkpoint (``--init-from``)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from corpora.files import DataError
from decoding.stepping import Stepper, input_limit, prepare_source
from model.baseline import build_model, load_baseline
from model.checkpoint import Checkpoint, is_checkpoint_dir, is_own_checkpoint_dir, load_checkpoint, save_checkpoint
from model.config import ModelConfig, default_max_new_tokens
from model.tokenizer import TextTokenizer
from model.transformer import Transformer
from reading.trace import trace_pair
from training.config import TrainConfig
from training.runs import append_probes

EVALS_DIR = "evals"
#: Model options that only act in training, so a warm start (``--init-from``) may change them.
WARM_START_KNOBS = ("dropout", "attention_dropout", "activation_dropout", "decoder_layerdrop")
#: A translator's probes: sentences whose attention a snapshot records, to replay how the heads form.
PROBE_SENTENCES = [
    "Bobby likes blackberries.",
    "The cat sat on the mat.",
    "Let us think logically.",
    "He played the piano beautifully.",
]
#: A German → English run's probes (``--reverse``): the German of the first three above.
GERMAN_PROBE_SENTENCES = [
    "Bobby mag Brombeeren.",
    "Die Katze saß auf der Matte.",
    "Lass uns logisch denken.",
]
#: A decoder-only run's probes: openings to continue (a finished sentence is mostly followed by ``<eos>``).
LM_PROBE_PROMPTS = [
    "Bobby likes",
    "The animal didn't cross the street because it",
    "The jury said that",
    "She looked at him and",
]


@dataclass
class Trainable:
    """A run's checkpoint as training reads it back (``last/``, ``best/``): the model of either implementation (our
    Transformer or the ``nn.Transformer`` baseline, which a :class:`model.checkpoint.Checkpoint` does not hold), our
    BPE tokenizer, the model config and the card."""

    model: torch.nn.Module
    tokenizer: TextTokenizer
    config: ModelConfig
    card: dict


def own_tokenizer(ckpt: Checkpoint) -> TextTokenizer:
    """``ckpt``'s tokenizer, which training needs as our own BPE (BPE-dropout copies it, checkpoints save it).
    Raises ``DataError`` for a checkpoint with another kind (a Hugging Face folder's)."""
    if not isinstance(ckpt.tokenizer, TextTokenizer):
        raise DataError(
            f"{ckpt.path}: its tokenizer is not this project's BPE; a run starts only from a checkpoint of this project"
        )
    return ckpt.tokenizer


def load_any(folder: Path, impl: str, device) -> Trainable:
    """A checkpoint of either implementation (``impl`` ``ours`` or ``torch``). Raises ``CheckpointError`` when it
    does not load, ``DataError`` when its tokenizer is not ours."""
    if impl == "ours":
        ckpt = load_checkpoint(folder, device)
        return Trainable(ckpt.model, own_tokenizer(ckpt), ckpt.config, ckpt.card)
    model = load_baseline(folder, device)
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    return Trainable(model, TextTokenizer.from_file(folder / "tokenizer.json"), model.cfg, card)


def _rounded(attention: torch.Tensor) -> list:
    """``[layers, heads, q, k]`` as nested lists rounded to 4 decimals (JSON-friendly)."""
    return [[[[round(x, 4) for x in row] for row in head] for head in layer] for layer in attention.tolist()]


@torch.inference_mode()
def probe_record(model: Transformer, tokenizer: TextTokenizer, step: int, sentences: list[str] | None = None) -> dict:
    """The probe sentences at ``step``, greedily decoded with their attention (the model is left in its mode).

    ``sentences`` defaults to :data:`PROBE_SENTENCES` for a translator and :data:`LM_PROBE_PROMPTS` for a
    decoder-only model.

    Encoder-decoder: each probe is translated; it records ``translation``, ``src_tokens``, ``tgt_tokens`` (the
    decoder inputs) and ``attention`` of kinds ``encoder``, ``decoder`` and ``cross``. Decoder-only: the probe
    sentence is the prompt after ``<bos>`` and the model continues it; it records ``continuation`` (the generated
    text), ``prompt_tokens`` (their number, ``<bos>`` included), ``src_tokens`` ``[]``, ``tgt_tokens`` (prompt +
    continuation, without a final ``<eos>``) and ``attention`` of the single kind ``self``. Attention is
    ``{kind: [layers][heads][q][k]}``, rounded to 4 decimals.
    """
    was_training = model.training
    model.eval()
    cfg = model.cfg
    if sentences is None:
        sentences = PROBE_SENTENCES if cfg.is_encoder_decoder else LM_PROBE_PROMPTS
    probes = []
    try:
        for text in sentences:
            src = prepare_source(tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
            limit = default_max_new_tokens(cfg, len(src.ids))
            stepper = Stepper(model, src.ids, max_new_tokens=limit)  # a decoder-only model continues src.ids
            stepper.run_to_end()
            trace = trace_pair(model, tokenizer, src.ids if cfg.is_encoder_decoder else None, stepper.decoder_inputs())
            output = tokenizer.decode(stepper.output_ids())
            probe: dict[str, object] = {"source": text}
            if cfg.is_encoder_decoder:
                probe["translation"] = output
            else:
                probe.update(continuation=output, prompt_tokens=len(stepper.prefix))
            probe.update(
                src_tokens=trace.src_tokens,
                tgt_tokens=trace.tgt_tokens,
                attention={k: _rounded(v) for k, v in trace.attention.items()},
            )
            probes.append(probe)
    finally:
        model.train(was_training)
    return {"step": step, "probes": probes}


def snapshot(model, tok, out: Path, step: int, sentences: list[str] | None = None) -> None:
    """Checkpoint ``checkpoints/step-N/`` (fp16) and the probe sentences' attention in ``probes.jsonl``
    (``sentences``: :func:`probe_record`'s default for the model, else these)."""
    save_checkpoint(
        out / "checkpoints" / f"step-{step}", model, tok, {"step": step, "kind": "snapshot"}, dtype=torch.float16
    )
    append_probes(out, probe_record(model, tok, step, sentences))


def keep_evaluation(model, tok, out: Path, step: int, keep: int) -> Path:
    """Save the weights at evaluation ``step`` as ``evals/step-N`` (fp32, for :mod:`tools.average`) and delete all
    but the last ``keep`` of them. Returns the new folder."""
    folder = save_checkpoint(out / EVALS_DIR / f"step-{step}", model, tok, {"step": step, "kind": "evaluation"})
    kept = sorted(
        (p for p in (out / EVALS_DIR).iterdir() if p.name.startswith("step-")), key=lambda p: int(p.name.split("-")[1])
    )
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
        return (
            f"{folder} is a Hugging Face model folder; a run starts only from a checkpoint of this project "
            "(checkpoints/en-de, checkpoints/brown-lm or a run's best/). Open it on the other pages instead."
        )
    return None


def warm_start(
    config: TrainConfig, device, given=frozenset()
) -> tuple[torch.nn.Module, TextTokenizer, ModelConfig, TrainConfig]:
    """``(model, tokenizer, model config, config)`` of ``--init-from``: the checkpoint's weights, tokenizer and
    architecture, the model in training mode, and ``config`` as this run has it in fact.

    Only the training-time knobs typed on the command line (``given``: dropout, attention dropout, …) replace the
    checkpoint's; the other model options are ignored (its architecture is kept). The returned config has the
    checkpoint's model options (so that ``train_args.json`` and the card tell the truth), ``lr_step_offset``
    defaulting to the checkpoint's :func:`schedule_position` (so the schedule continues where it left off) and
    ``init_card``, the origin for the new card (with the checkpoint card's ``legs`` history, when it has one).
    Raises ``DataError`` when the folder is not a loadable checkpoint of ours.
    """
    if config.init_from is None:
        raise DataError("--init-from: no checkpoint named")
    if reason := hf_refusal(config.init_from):
        raise DataError(f"--init-from: {reason}")
    try:
        ckpt = load_checkpoint(config.init_from, device)
    except Exception as exc:  # CheckpointError and friends: a clear message, exit code 2
        raise DataError(f"--init-from: {exc}") from exc
    cfg = ckpt.config
    changes = {k: getattr(config, k) for k in WARM_START_KNOBS if k in given}
    if changes:
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **changes})
        model = build_model(cfg, "ours").to(device)
        model.load_state_dict(ckpt.model.state_dict())
    else:
        model = ckpt.model
    model.train()
    card = ckpt.card or {}
    prior = card.get("init_from", {})
    init_card = {  # what the checkpoint had seen, totals over every warm start before it included
        "checkpoint": str(config.init_from),
        "step": card.get("step"),
        "tokens_seen": (card.get("tokens_seen") or 0) + (prior.get("tokens_seen") or 0),
        "train_minutes": round((card.get("train_minutes") or 0) + (prior.get("train_minutes") or 0), 1),
    }
    if isinstance(card.get("legs"), list):  # the lineage's scores leg by leg, carried into the new card
        init_card["legs"] = card["legs"]
    config = replace(
        config,
        init_card=init_card,
        arch=cfg.arch,
        impl="ours",
        layers=cfg.n_decoder_layers,
        encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers,
        vocab_size=cfg.vocab_size,
        lr_step_offset=schedule_position(card) if config.lr_step_offset is None else config.lr_step_offset,
        **{
            k: getattr(cfg, k)
            for k in ("d_model", "n_heads", "d_ff", "pos_encoding", "norm_first", "max_len", *WARM_START_KNOBS)
        },
    )
    return model, own_tokenizer(ckpt), cfg, config


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
