"""Hugging Face MarianMT / GPT-2 state dicts renamed (and reshaped) into this project's module names, once at load.

Marian (``MarianMTModel``): the attention projections keep their names (``q_proj`` … ``out_proj``; the decoder's
``encoder_attn`` is our ``cross_attn``), ``fc1`` / ``fc2`` are the FFN's ``linear1`` / ``linear2``, each sub-layer's
LayerNorm (``self_attn_layer_norm``, ``encoder_attn_layer_norm``, ``final_layer_norm``) is its residual's
``norm``, ``model.shared`` is the one embedding and ``final_logits_bias`` ``[1, vocab]`` the generator's bias.
GPT-2 (``GPT2LMHeadModel``): ``Conv1D`` stores weights as ``[in, out]`` (``y = x W + b``), so each is transposed
into ``nn.Linear``'s ``[out, in]``; ``attn.c_attn`` holds W_Q, W_K, W_V side by side and is split in three.

The positional tables in a file are not loaded: Marian's sinusoids are recomputed (and compared when a file has
them), GPT-2's causal-mask buffers (``attn.bias``, ``attn.masked_bias``) are masks, not weights.
"""

from __future__ import annotations

import re

import torch

from model.config import ModelConfig
from model.positional import sinusoidal_table


class WeightsError(ValueError):
    """A state dict that does not fit the config (the message names the tensors)."""


#: Marian layer sub-module names → ours, per stack.
MARIAN_ENCODER = {
    "self_attn": "self_attn",
    "self_attn_layer_norm": "res_attn.norm",
    "fc1": "ffn.linear1",
    "fc2": "ffn.linear2",
    "final_layer_norm": "res_ffn.norm",
}
MARIAN_DECODER = {
    "self_attn": "self_attn",
    "self_attn_layer_norm": "res_self.norm",
    "encoder_attn": "cross_attn",
    "encoder_attn_layer_norm": "res_cross.norm",
    "fc1": "ffn.linear1",
    "fc2": "ffn.linear2",
    "final_layer_norm": "res_ffn.norm",
}
#: GPT-2 block sub-module names → ours (``attn.c_attn`` is split separately).
GPT2_BLOCK = {
    "attn.c_proj": "self_attn.out_proj",
    "mlp.c_fc": "ffn.linear1",
    "mlp.c_proj": "ffn.linear2",
    "ln_1": "res_self.norm",
    "ln_2": "res_ffn.norm",
}
#: GPT-2 sub-modules that are ``Conv1D`` (weights stored ``[in, out]``).
GPT2_CONV1D = ("attn.c_proj", "mlp.c_fc", "mlp.c_proj")
#: Tolerance when a Marian file's own float32 sinusoidal table is compared with ours (:func:`table_atol`).
TABLE_ATOL = 1e-4

_LAYER = re.compile(r"^(encoder\.layers|decoder\.layers|h)\.(\d+)\.(.+)\.(weight|bias)$")


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Keys without a leading ``prefix`` (``"model."`` / ``"transformer."``), whether the file has it or not."""
    return {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in state.items()}


def marian_state(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict from a ``MarianMTModel`` (or ``MarianModel``) state dict.

    Raises:
        WeightsError: a tensor missing or unexpected, or the file's positional table is not the sinusoidal one.
    """
    hf = strip_prefix(hf, "model.")
    out: dict[str, torch.Tensor] = {}
    # The one embedding: shared, or one of its tied copies when a file was saved without it.
    for key in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        if key in hf:
            out["embed.weight"] = hf[key]
            break
    else:
        if "lm_head.weight" not in hf or not cfg.tie_embeddings:
            raise WeightsError("no token embedding (model.shared.weight) in the weights")
        out["embed.weight"] = hf["lm_head.weight"]
    if not cfg.tie_embeddings:
        if "lm_head.weight" not in hf:
            raise WeightsError("tie_word_embeddings is false but the weights hold no lm_head.weight")
        out["generator.weight"] = hf["lm_head.weight"]
    # A MarianModel without the LM head has no bias; MarianMTModel's starts at zeros too.
    out["generator.bias"] = hf.get("final_logits_bias", torch.zeros(1, cfg.vocab_size)).reshape(-1)
    ignored = {
        "shared.weight",
        "encoder.embed_tokens.weight",
        "decoder.embed_tokens.weight",
        "lm_head.weight",
        "final_logits_bias",
    }
    for stack in ("encoder", "decoder"):
        key = f"{stack}.embed_positions.weight"
        if key in hf:
            _check_table(hf[key], cfg)
            ignored.add(key)
    for key, tensor in hf.items():
        if key in ignored:
            continue
        match = _LAYER.match(key)
        if match is None or match[1] == "h":
            raise WeightsError(f"unexpected tensor {key!r} in a Marian model")
        stack, layer, module, kind = match.groups()
        names = MARIAN_ENCODER if stack == "encoder.layers" else MARIAN_DECODER
        head, _, proj = module.partition(".")  # "self_attn.q_proj" → "self_attn", "q_proj"
        if head not in names:
            raise WeightsError(f"unexpected tensor {key!r} in a Marian model")
        ours = names[head] + (f".{proj}" if proj else "")
        out[f"{stack.split('.')[0]}_layers.{layer}.{ours}.{kind}"] = tensor
    return out


def table_atol(dtype: torch.dtype) -> float:
    """How far a stored sinusoidal table of ``dtype`` may lie from ours: :data:`TABLE_ATOL`, or the type's machine
    epsilon when larger. Storing a value of magnitude ≤ 1 rounds it by at most half a unit in the last place at 1,
    ``eps / 2`` (float16: 4.9e-4, bfloat16: 3.9e-3), so a float16 or bfloat16 file's exact table is off by more
    than 1e-4, while a table that is not Marian's is off by far more than ``eps`` somewhere (its values span
    -1…1)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    return max(TABLE_ATOL, eps)


def _check_table(table: torch.Tensor, cfg: ModelConfig) -> None:
    """A Marian file that stores its positional table must store the one we compute (within :func:`table_atol`
    of its dtype)."""
    ours = sinusoidal_table(cfg.max_len, cfg.d_model, layout=cfg.pos_layout)
    atol = table_atol(table.dtype)
    if table.shape != ours.shape or not torch.allclose(table.float(), ours, atol=atol, rtol=0):
        raise WeightsError(
            f"the positional table in the weights ({tuple(table.shape)}) is not Marian's sinusoidal "
            f"table for max_len {cfg.max_len}, d_model {cfg.d_model}"
        )


def gpt2_state(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict from a ``GPT2LMHeadModel`` (or ``GPT2Model``) state dict.

    Raises:
        WeightsError: a tensor missing, unexpected or of the wrong rank.
    """
    hf = strip_prefix(hf, "transformer.")
    out: dict[str, torch.Tensor] = {}
    for theirs, ours in (
        ("wte.weight", "embed.weight"),
        ("wpe.weight", "pos.table"),
        ("ln_f.weight", "decoder_norm.weight"),
        ("ln_f.bias", "decoder_norm.bias"),
    ):
        if theirs not in hf:
            raise WeightsError(f"{theirs} is missing from the GPT-2 weights")
        out[ours] = hf[theirs]
    ignored = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"}
    if not cfg.tie_embeddings:
        if "lm_head.weight" not in hf:
            raise WeightsError("tie_word_embeddings is false but the weights hold no lm_head.weight")
        out["generator.weight"] = hf["lm_head.weight"]
    for key, tensor in hf.items():
        if key in ignored or key.endswith((".attn.bias", ".attn.masked_bias")):  # the causal-mask buffers
            continue
        match = _LAYER.match(key)
        if match is None or match[1] != "h":
            raise WeightsError(f"unexpected tensor {key!r} in a GPT-2 model")
        _, layer, module, kind = match.groups()
        prefix = f"decoder_layers.{layer}"
        if module == "attn.c_attn":
            tensor = tensor.t() if kind == "weight" else tensor  # [d, 3d] → [3d, d]
            q, k, v = tensor.chunk(3, dim=0)
            for name, part in zip(("q_proj", "k_proj", "v_proj"), (q, k, v), strict=True):
                out[f"{prefix}.self_attn.{name}.{kind}"] = part
            continue
        if module not in GPT2_BLOCK:
            raise WeightsError(f"unexpected tensor {key!r} in a GPT-2 model")
        if kind == "weight" and module in GPT2_CONV1D:
            if tensor.dim() != 2:
                raise WeightsError(f"{key} should be a matrix, has shape {tuple(tensor.shape)}")
            tensor = tensor.t()
        out[f"{prefix}.{GPT2_BLOCK[module]}.{kind}"] = tensor
    return out


#: ``model_type`` → its state-dict translation (one for each of :data:`model.hf.families.FAMILIES`).
TRANSLATE = {"marian": marian_state, "gpt2": gpt2_state}


def to_our_state(model_type: str, hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Dispatch on ``model_type`` (:data:`TRANSLATE`); float tensors become contiguous float32."""
    state = TRANSLATE[model_type](hf, cfg)
    return {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in state.items()}
