"""Hugging Face folders on disk, read by :func:`model.hf.loader.load_hf_model`: a ``pytorch_model.bin`` loaded with
``weights_only`` (and a pickle that would run code refused), the errors a user can meet, which folders count as
Hugging Face ones, ``config.json``'s defaults as ``transformers``' classes have them, and ``model/`` never importing
``transformers`` (the reference only, in the tests).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: the reference implementation

from test_hf_equivalence import SOURCES, _close, _targets

from model.checkpoint import CheckpointError, save_checkpoint
from model.hf.config import hf_to_model_config
from model.hf.loader import is_hf_model_dir, load_hf_model

ROOT = Path(__file__).resolve().parent.parent


def _copy_config(src: Path, dst: Path, **changes) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))


def _same_logits(a, b, cfg) -> None:
    tgt = _targets(cfg, 1, 5, seed=5)
    src = torch.tensor([SOURCES[0]]) if cfg.is_encoder_decoder else None
    with torch.no_grad():
        _close(a(src, tgt), b(src, tgt))


def test_pytorch_model_bin_loads_with_weights_only(hf_marian, hf_gpt2, tmp_path):
    # Marian: the full state dict, with tied copies and the stored positional tables, as old opus-mt files have.
    _copy_config(hf_marian.folder, tmp_path / "m")
    torch.save(hf_marian.reference.state_dict(), tmp_path / "m" / "pytorch_model.bin")
    model, cfg, info = load_hf_model(tmp_path / "m")
    assert info["weights_file"] == "pytorch_model.bin" and cfg == hf_marian.cfg
    _same_logits(model, hf_marian.model, cfg)
    # GPT-2: keys without "transformer." and with the causal-mask buffers, as the original hf_gpt2 file has.
    _copy_config(hf_gpt2.folder, tmp_path / "g")
    state = {k.removeprefix("transformer."): v for k, v in hf_gpt2.reference.state_dict().items()}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64, dtype=torch.bool))
    state["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, tmp_path / "g" / "pytorch_model.bin")
    model, cfg, _ = load_hf_model(tmp_path / "g")
    _same_logits(model, hf_gpt2.model, cfg)


_UNPICKLED = []


class _Payload:
    """Unpickling it would run code (append to a list); ``weights_only`` must refuse it."""

    def __reduce__(self):
        return _UNPICKLED.append, ("ran",)


def test_a_pickle_with_code_is_refused(hf_marian, tmp_path):
    _copy_config(hf_marian.folder, tmp_path)
    torch.save({"model.shared.weight": torch.zeros(2), "x": _Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_hf_model(tmp_path)
    assert _UNPICKLED == []


@pytest.mark.parametrize(
    "case,match",
    [
        ("corrupt", "corrupt or unreadable"),
        ("truncated", "corrupt or unreadable"),
        ("no weights", "no weights file"),
        ("no config", "config.json is missing"),
        ("bad config", "unreadable"),
        ("bert", "model_type 'bert' is not supported.*marian and gpt2"),
        ("own vocabularies", "separate source and target vocabularies"),
        ("decoder vocab", "separate source and target vocabularies"),
        ("heads differ", "encoder_attention_heads"),
        ("activation", "activation_function 'tanh'"),
        ("wrong shapes", "do not fit config.json"),
    ],
)
def test_errors_are_checkpoint_errors_with_plain_messages(hf_marian, tmp_path, case, match):
    folder = tmp_path / "model"
    changes = {
        "bert": {"model_type": "bert"},
        "own vocabularies": {"share_encoder_decoder_embeddings": False},
        "decoder vocab": {"decoder_vocab_size": 50},
        "heads differ": {"decoder_attention_heads": 2},
        "activation": {"activation_function": "tanh"},
        "wrong shapes": {"d_model": 32},
    }.get(case, {})
    _copy_config(hf_marian.folder, folder, **changes)
    weights = (hf_marian.folder / "model.safetensors").read_bytes()
    if case == "corrupt":
        weights = b"\x00\x01 not a safetensors file" * 10
    elif case == "truncated":
        weights = weights[: len(weights) // 2]
    if case != "no weights":
        (folder / "model.safetensors").write_bytes(weights)
    if case == "no config":
        (folder / "config.json").unlink()
    elif case == "bad config":
        (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=match):
        load_hf_model(folder)


def test_missing_folder_and_missing_tensor(hf_marian, hf_gpt2, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_hf_model(tmp_path / "nowhere")
    _copy_config(hf_gpt2.folder, tmp_path / "g")
    state = dict(hf_gpt2.reference.state_dict())
    del state["transformer.ln_f.bias"]
    torch.save(state, tmp_path / "g" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="ln_f.bias is missing"):
        load_hf_model(tmp_path / "g")


def test_is_hf_model_dir(hf_marian, hf_gpt2, tmp_path, make_model, tokenizer):
    assert is_hf_model_dir(hf_marian.folder) and is_hf_model_dir(hf_gpt2.folder)
    ours = save_checkpoint(tmp_path / "ours", make_model(), tokenizer)
    assert not is_hf_model_dir(ours)  # our own checkpoint: no model_type
    _copy_config(hf_marian.folder, tmp_path / "no-weights")
    assert not is_hf_model_dir(tmp_path / "no-weights") and not is_hf_model_dir(tmp_path / "nowhere")


def test_config_defaults_are_the_transformers_classes_defaults():
    """A config.json that leaves keys out gets MarianConfig's / GPT2Config's defaults."""
    from transformers import GPT2Config, MarianConfig

    marian = hf_to_model_config({"model_type": "marian"})
    ref = MarianConfig()
    assert (marian.vocab_size, marian.d_model, marian.n_heads, marian.d_ff) == (
        ref.vocab_size,
        ref.d_model,
        ref.encoder_attention_heads,
        ref.encoder_ffn_dim,
    )
    assert (marian.max_len, marian.pad_id, marian.eos_id, marian.activation) == (
        ref.max_position_embeddings,
        ref.pad_token_id,
        ref.eos_token_id,
        "gelu",
    )
    assert marian.scale_embeddings is ref.scale_embedding
    gpt = hf_to_model_config({"model_type": "gpt2"})
    ref = GPT2Config()
    assert (gpt.vocab_size, gpt.d_model, gpt.n_heads, gpt.n_decoder_layers, gpt.max_len, gpt.eos_id) == (
        ref.vocab_size,
        ref.n_embd,
        ref.n_head,
        ref.n_layer,
        ref.n_positions,
        ref.eos_token_id,
    )
    assert gpt.d_ff == 4 * ref.n_embd and gpt.norm_eps == ref.layer_norm_epsilon


def test_model_package_never_imports_transformers():
    """``transformers`` is a test dependency: the app runs Hugging Face models with our own code."""
    offenders = []
    for path in sorted((ROOT / "model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            offenders += [str(path.relative_to(ROOT)) for n in names if n.split(".")[0] == "transformers"]
    assert not offenders
