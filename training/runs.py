"""Run-folder records written by the trainer: ``status.json``, log-spaced snapshots and ``probes.jsonl``.

A run folder ``runs/<id>/`` holds:

* ``status.json`` — ``state`` (``running`` / ``finished`` / ``stopped`` / ``failed``), ``pid``, ``started``,
  ``updated`` (ISO times, UTC), ``step``, ``max_steps``, ``reason``, ``exit_code``, ``error``; replaced atomically,
  so a reader (the training page) never sees half a file;
* ``checkpoints/step-N/`` — checkpoints at the log-spaced steps of :func:`snapshot_steps`;
* ``probes.jsonl`` — one JSON object per snapshot: the probe sentences' greedy translations (a decoder-only
  model: their greedy continuations) and their attention ``{kind: [layers][heads][q][k]}`` (rounded to 4
  decimals), to replay how heads form.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import torch

from model.checkpoint import atomic_write_json
from model.decoding import Stepper, default_max_new_tokens, input_limit, prepare_source
from model.tokenizer import TextTokenizer
from model.trace import trace_pair
from model.transformer import Transformer

PROBE_SENTENCES = [
    "Bobby likes blackberries.",
    "The cat sat on the mat.",
    "Let us think logically.",
    "He played the piano beautifully.",
]
#: A decoder-only run's probes: openings to continue (a finished sentence is mostly followed by ``<eos>``).
LM_PROBE_PROMPTS = [
    "Bobby likes",
    "The animal didn't cross the street because it",
    "The jury said that",
    "She looked at him and",
]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def snapshot_steps(max_steps: int) -> list[int]:
    """Log-spaced snapshot steps ``0, 10, 30, 100, 300, 1000, …`` up to ``max_steps``, which is always included."""
    steps, k = {0, max_steps}, 10
    while k <= max_steps:
        steps.add(k)
        if 3 * k <= max_steps:
            steps.add(3 * k)
        k *= 10
    return sorted(s for s in steps if s <= max_steps)


def write_status(folder: Path, **fields) -> dict:
    """Merge ``fields`` into ``status.json`` (with ``updated`` set to now) and replace the file atomically."""
    path = Path(folder) / "status.json"
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        status = {}
    status.update(fields, updated=now_iso())
    status.setdefault("pid", os.getpid())
    atomic_write_json(path, status)
    return status


def read_status(folder: Path) -> dict | None:
    """``status.json`` of a run, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads((Path(folder) / "status.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a ``.jsonl`` file, one a line; a half-written last line and garbage lines are skipped,
    and a missing file gives ``[]`` (a run folder may vanish while it is read)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _rounded(attention: torch.Tensor) -> list:
    """``[layers, heads, q, k]`` as nested lists rounded to 4 decimals (JSON-friendly)."""
    return [[[[round(x, 4) for x in row] for row in head] for head in layer] for layer in attention.tolist()]


@torch.inference_mode()
def probe_record(model: Transformer, tokenizer: TextTokenizer, step: int,
                 sentences: list[str] | None = None) -> dict:
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
            probe = {"source": text}
            if cfg.is_encoder_decoder:
                probe["translation"] = output
            else:
                probe.update(continuation=output, prompt_tokens=len(stepper.prefix))
            probe.update(src_tokens=trace.src_tokens, tgt_tokens=trace.tgt_tokens,
                         attention={k: _rounded(v) for k, v in trace.attention.items()})
            probes.append(probe)
    finally:
        model.train(was_training)
    return {"step": step, "probes": probes}
