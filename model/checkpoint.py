"""Checkpoint folders: ``model.safetensors`` + ``config.json`` + ``tokenizer.json`` + ``card.json``.

Weights are read and written with ``safetensors`` only (never pickle). Every file is written to a temporary
name and renamed into place, so a reader never sees half a file. A tied output projection is not stored
twice: it is re-tied on load.

A Hugging Face MarianMT or GPT-2 folder (``hf download … --local-dir checkpoints/NAME``) is found and
loaded here too, into the same :class:`Checkpoint`: :mod:`model.hf` reads its config, weights and tokenizer, and
:mod:`model.hf.card` writes its card from its files. Such a folder is only read, never written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from model.config import ConfigError, ModelConfig
from model.errors import CheckpointError  # callers import it from here
from model.hf.card import hf_card
from model.hf.families import FAMILIES
from model.hf.generation import GenerationDefaults
from model.hf.loader import is_hf_model_dir, load_hf_model
from model.hf.tokenizers import load_hf_tokenizer
from model.quantize import dequantize_state, quantize_state
from model.tokenizer import TextTokenizer
from model.tokenizing import Tokenizer
from model.transformer import Transformer

REQUIRED_FILES = ("model.safetensors", "config.json", "tokenizer.json")


@dataclass
class Checkpoint:
    """A loaded model ready for inference (eval mode), with its tokenizer and card.

    ``generation``: what a Hugging Face folder's ``generation_config.json`` says about decoding (its length cap,
    beam width, length penalty), which the pages take as their defaults for it; ``None`` for our own checkpoints.
    """

    model: Transformer
    tokenizer: Tokenizer
    config: ModelConfig
    card: dict = field(default_factory=dict)
    path: Path | None = None
    generation: GenerationDefaults | None = None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """``safetensors`` file written atomically (contiguous CPU copies of ``tensors``)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def model_state(model: Transformer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The model's tensors without the tied output projection, optionally cast (e.g. ``torch.float16``), or with
    ``torch.int8`` its matrices quantised row by row (:func:`model.quantize.quantize_state`)."""
    state = {}
    for name, t in model.state_dict().items():
        if model.cfg.tie_embeddings and name == "generator.weight":
            continue
        state[name] = t.to(dtype) if dtype not in (None, torch.int8) and t.is_floating_point() else t
    return quantize_state(state) if dtype == torch.int8 else state


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a ``model.safetensors`` of ours as stored, int8 ones read back as float32
    (:func:`model.quantize.dequantize_state`).

    Raises:
        CheckpointError: the file is missing, corrupt, or its int8 tensors have no scales that fit.
    """
    try:
        return dequantize_state(load_file(str(path)))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path} is corrupt or unreadable: {exc}") from exc


def save_checkpoint(
    folder: str | Path,
    model: Transformer,
    tokenizer: TextTokenizer,
    card: dict | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write a checkpoint folder (created if needed). ``dtype`` stores weights in e.g. fp16 to halve the size, or
    ``torch.int8`` to quarter it (:mod:`model.quantize`; read back as float32 by :func:`load_checkpoint`)."""
    return write_checkpoint_files(folder, model.cfg.to_dict(), tokenizer.to_str(), model_state(model, dtype), card)


def write_checkpoint_files(
    folder: str | Path,
    config: dict,
    tokenizer_json: str,
    tensors: dict[str, torch.Tensor],
    card: dict | None = None,
) -> Path:
    """Write a checkpoint folder (created if needed) from its parts: what a model's weights become when they were
    computed rather than trained (a soup, a grown copy). Every file is written atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "config.json", config)
    atomic_write_bytes(folder / "tokenizer.json", tokenizer_json.encode("utf-8"))
    save_tensors(folder / "model.safetensors", tensors, {"format": "pt"})
    atomic_write_json(folder / "card.json", card or {})
    return folder


def is_own_checkpoint_dir(folder: str | Path) -> bool:
    """True when ``folder`` has the three files of a checkpoint of ours (it may still be corrupt)."""
    folder = Path(folder)
    return folder.is_dir() and all((folder / f).is_file() for f in REQUIRED_FILES) and not _hf_config(folder)


def is_checkpoint_dir(folder: str | Path) -> bool:
    """True when ``folder`` is a checkpoint of ours (:func:`is_own_checkpoint_dir`) or a Hugging Face model folder
    (:func:`model.hf.loader.is_hf_model_dir`); it may still be corrupt, or of an unsupported type."""
    return is_own_checkpoint_dir(folder) or is_hf_model_dir(folder)


def _config(folder: Path) -> dict:
    """The folder's ``config.json`` as a dict; empty when it is missing, unreadable or not an object."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _hf_config(folder: Path) -> dict | None:
    """``config.json`` of a Hugging Face folder (it names a ``model_type``; ours never does), else ``None``."""
    data = _config(folder)
    return data if "model_type" in data else None


def checkpoint_arch(folder: str | Path) -> str:
    """``"encoder-decoder"`` or ``"decoder-only"``, read from the folder's ``config.json`` without loading the
    weights: ours names its ``arch``, a Hugging Face folder its ``model_type`` (its family's ``arch``,
    :data:`~model.hf.families.FAMILIES`). A folder that says neither counts as an encoder-decoder, as every early
    checkpoint was."""
    data = _config(Path(folder))
    model_type = data.get("model_type")
    known = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    arch = (known.arch if known else None) if "model_type" in data else data.get("arch")
    return arch if arch in ("encoder-decoder", "decoder-only") else "encoder-decoder"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint folders (ours and Hugging Face ones, :func:`is_checkpoint_dir`) directly below ``root`` (or
    ``root`` itself), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [root] if is_checkpoint_dir(root) else []
    found += sorted(p for p in root.iterdir() if is_checkpoint_dir(p))
    return found


def load_checkpoint(folder: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint folder for inference (eval mode, float32): one of ours, or a Hugging Face MarianMT or
    GPT-2 folder (its ``config.json`` names a ``model_type``; :func:`load_hf_checkpoint`).

    Raises:
        CheckpointError: the folder or a file is missing, the config or tokenizer is invalid, the weights file
            is corrupt, or the weights do not fit the config.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"Checkpoint folder not found: {folder}")
    if _hf_config(folder) is not None:
        return load_hf_checkpoint(folder, device)
    missing = [f for f in REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is not a checkpoint: missing {', '.join(missing)}")
    try:
        cfg = ModelConfig.from_json(folder / "config.json")
    except ConfigError as exc:
        raise CheckpointError(f"{folder}/config.json is invalid: {exc}") from exc
    try:
        tokenizer = TextTokenizer.from_file(folder / "tokenizer.json")
    except ValueError as exc:
        raise CheckpointError(f"{folder}/tokenizer.json is invalid: {exc}") from exc
    if tokenizer.vocab_size != cfg.vocab_size:
        raise CheckpointError(
            f"{folder}: tokenizer has {tokenizer.vocab_size} tokens but the config says {cfg.vocab_size}"
        )
    state = read_weights(folder / "model.safetensors")
    if any(k.startswith("transformer.") for k in state):
        raise CheckpointError(
            f"{folder} holds the torch.nn.Transformer baseline (trained with --impl torch), which the explorer "
            "cannot trace; score it with the training run's card, or open a checkpoint of this project's model"
        )
    model = Transformer(cfg)
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise CheckpointError(f"{folder}: weights do not fit the config: {exc}") from exc
    allowed_missing = {"generator.weight"} if cfg.tie_embeddings else set()
    if set(result.missing_keys) - allowed_missing or result.unexpected_keys:
        raise CheckpointError(
            f"{folder}: weights do not match the config "
            f"(missing {sorted(set(result.missing_keys) - allowed_missing)[:3]}, "
            f"unexpected {result.unexpected_keys[:3]})"
        )
    card = {}
    if (folder / "card.json").is_file():
        try:
            card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            card = {"warning": "card.json is unreadable"}
    model.to(device).eval()
    return Checkpoint(model, tokenizer, cfg, card, folder)


def load_hf_checkpoint(folder: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """A Hugging Face MarianMT or GPT-2 folder as a :class:`Checkpoint` (eval mode, float32): the weights by
    :func:`model.hf.loader.load_hf_model`, the tokenizer by :func:`model.hf.tokenizers.load_hf_tokenizer`, the card
    by :func:`model.hf.card.hf_card`, the decoding defaults by :func:`model.hf.loader.read_generation`.

    Raises:
        CheckpointError: what :func:`~model.hf.loader.load_hf_model` raises (missing or corrupt files, another
            ``model_type``, weights that do not fit), a tokenizer file missing or invalid, or a tokenizer with ids
            beyond the model's vocabulary.
    """
    folder = Path(folder)
    model, cfg, info = load_hf_model(folder, device)
    try:
        tokenizer = load_hf_tokenizer(folder, info["model_type"])
    except ValueError as exc:
        raise CheckpointError(f"the tokenizer of {folder} cannot be read: {exc}") from exc
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(
            f"{folder}: the tokenizer has {tokenizer.vocab_size} pieces but the model only "
            f"{cfg.vocab_size} (config.json's vocab_size)"
        )
    return Checkpoint(model, tokenizer, cfg, hf_card(folder, info), folder, info["generation"])
