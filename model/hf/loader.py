"""Open a Hugging Face model folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``) as our
:class:`~model.transformer.Transformer`.

The folder is what ``huggingface-cli download Helsinki-NLP/opus-mt-en-de`` (or ``gpt2``, ``distilgpt2``) writes.
``transformers`` is not needed: the config is translated by :mod:`model.hf.config`, the tensors are renamed by
:mod:`model.hf.weights`, and ``pytorch_model.bin`` is read with ``torch.load(weights_only=True)``, which refuses
anything but tensors and plain containers (no arbitrary pickled code runs).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from model.config import ConfigError, ModelConfig
from model.errors import CheckpointError
from model.hf.config import hf_to_model_config, model_type
from model.hf.generation import FILE as GENERATION_FILE
from model.hf.generation import GenerationDefaults, parse_generation
from model.hf.weights import WeightsError, to_our_state
from model.transformer import Transformer

#: Weight files, in the order they are looked for (safetensors first: it cannot hold code).
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def weights_path(folder: str | Path) -> Path | None:
    """The folder's weights file (:data:`WEIGHT_FILES`, first found), or ``None``."""
    return next((Path(folder) / name for name in WEIGHT_FILES if (Path(folder) / name).is_file()), None)


def read_json(path: Path) -> dict:
    """A JSON object from ``path``. Raises :class:`CheckpointError` when unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def is_hf_model_dir(folder: str | Path) -> bool:
    """True when ``folder`` has a ``config.json`` with a ``model_type`` key and a weights file (it may still be of
    an unsupported type, or corrupt: :func:`load_hf_model` says so). This project's own checkpoints have no
    ``model_type``."""
    folder = Path(folder)
    if not folder.is_dir() or weights_path(folder) is None:
        return False
    try:
        return "model_type" in read_json(folder / "config.json")
    except CheckpointError:
        return False


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file, or of a ``pytorch_model.bin`` read with ``weights_only=True``.

    Raises:
        CheckpointError: the file is corrupt, truncated, or holds something other than named tensors.
    """
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path))
        else:
            state = torch.load(path, weights_only=True, map_location="cpu")
    except (SafetensorError, OSError, EOFError, ValueError, RuntimeError, pickle.UnpicklingError) as exc:
        raise CheckpointError(f"{path} is corrupt or unreadable: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a dictionary of named tensors")
    return state


def marian_unk_id(folder: Path) -> int | None:
    """``<unk>``'s id in the folder's ``vocab.json`` (Marian's token → id map), or ``None`` without one."""
    try:
        unk = read_json(folder / "vocab.json").get("<unk>")
    except CheckpointError:
        return None
    return unk if isinstance(unk, int) and not isinstance(unk, bool) else None


def read_generation(folder: str | Path, config: dict) -> GenerationDefaults:
    """The decoding settings of a Hugging Face folder (:mod:`model.hf.generation`): its ``generation_config.json``
    or, without one, the same keys of ``config`` (its parsed ``config.json``), as ``transformers``' ``generate``
    reads them.

    Raises:
        CheckpointError: ``generation_config.json`` is unreadable or not an object, or a key has a value of the
            wrong type.
    """
    path = Path(folder) / GENERATION_FILE
    if path.is_file():
        return parse_generation(read_json(path), GENERATION_FILE, folder)
    return parse_generation(config, "config.json", folder)


def with_banned(cfg: ModelConfig, banned: tuple[int, ...]) -> ModelConfig:
    """``cfg`` whose ``suppress_ids`` also hold ``banned`` (a generation config's one-token bad words), ``<eos>``
    left out as :mod:`model.hf.config` leaves it out. Raises :class:`ConfigError` for an id outside the
    vocabulary."""
    extra = set(banned) - set(cfg.suppress_ids) - {cfg.eos_id}
    return dataclasses.replace(cfg, suppress_ids=sorted({*cfg.suppress_ids, *extra})) if extra else cfg


def load_hf_model(folder: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, ModelConfig, dict]:
    """Our Transformer (eval mode, float32) with the weights of a MarianMT or GPT-2 folder.

    Returns:
        ``(model, config, info)``; ``info`` has ``model_type``, ``parameters`` (count, tied weights once),
        ``file_bytes`` (size of the weights file), ``weights_file`` (its name), ``generation`` (the folder's
        decoding settings, :func:`read_generation`; its one-token bad words are in ``config.suppress_ids``) and
        ``name_or_path`` (the config's ``_name_or_path``, when it has one).

    Raises:
        CheckpointError: the folder, ``config.json`` or the weights file is missing or unreadable, the model type
            or one of its options is not supported, ``generation_config.json`` is invalid, or the weights do not
            fit the config.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"Model folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not a Hugging Face model: config.json is missing")
    hf_cfg = read_json(folder / "config.json")
    try:
        kind = model_type(hf_cfg)
        cfg = hf_to_model_config(hf_cfg, marian_unk_id(folder) if kind == "marian" else None)
    except ConfigError as exc:
        raise CheckpointError(f"{folder}: {exc}") from exc
    generation = read_generation(folder, hf_cfg)
    try:
        cfg = with_banned(cfg, generation.bad_words_ids)
    except ConfigError as exc:
        raise CheckpointError(f"{folder}: bad_words_ids of {generation.source}: {exc}") from exc
    forced = generation.forced_eos_token_id
    if forced is not None and forced >= cfg.vocab_size:
        raise CheckpointError(
            f"{folder}: forced_eos_token_id {forced} of {generation.source} lies outside the "
            f"vocabulary of {cfg.vocab_size} tokens"
        )
    path = weights_path(folder)
    if path is None:
        sharded = any(folder.glob("*.index.json"))
        raise CheckpointError(
            f"{folder} has no weights file ({' or '.join(WEIGHT_FILES)})"
            + ("; weights split into shards are not supported" if sharded else "")
        )
    try:
        state = to_our_state(kind, read_state(path), cfg)
    except WeightsError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc
    model = Transformer(cfg)
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape that does not fit the config
        raise CheckpointError(f"{path}: weights do not fit config.json: {exc}") from exc
    missing = set(result.missing_keys) - ({"generator.weight"} if cfg.tie_embeddings else set())
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{path}: weights do not match config.json (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(result.unexpected_keys)[:3]})"
        )
    model.to(device).eval()
    info = {
        "model_type": kind,
        "parameters": model.num_parameters(),
        "file_bytes": path.stat().st_size,
        "weights_file": path.name,
        "generation": generation,
    }
    if isinstance(hf_cfg.get("_name_or_path"), str):
        info["name_or_path"] = hf_cfg["_name_or_path"]
    return model, cfg, info
