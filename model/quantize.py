"""int8 weights on disk: each weight matrix stored as int8 with one float32 scale per row, read back as float32.

The checkpoint file must stay small (a shipped model is at most 60 MB), and a larger vocabulary or a wider model
does not fit in float16. Symmetric per-row ("per-channel") round-to-nearest quantisation, as in LLM.int8()'s
vector-wise scheme (Dettmers et al. 2022, §3.1) without its outlier split:

    scale_i = max_j |W_ij| / 127,    q_ij = round(W_ij / scale_i) ∈ [-127, 127],    Ŵ_ij = q_ij · scale_i

so each weight is off by at most ``scale_i / 2``. Rows are output features of a linear map (``(d_out, d_in)``) and
pieces of an embedding (``(vocab_size, d_model)``), so one large weight spoils only its own row's precision.
Vectors (biases, LayerNorm gains) stay float16: they are few and some (the gains) are far from zero-mean.
Named matrices may stay float16 too (``keep``): the tied embedding, which is also the output projection, is the
largest matrix and the one every logit is read through, so it is where a rounding step costs most. A file that mixes
int8 and float16 matrices reads back like any other.

The model computes in float32 as before: this saves disk and download, not memory or time.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

import torch

#: Key of a quantised tensor's scales in the file: ``"<name>" + SCALE_SUFFIX``, shape ``(rows,)``.
SCALE_SUFFIX = ".int8_scale"
#: A matrix with narrower rows stays float16: a row's 4-byte scale then costs over a quarter of what int8 saves.
MIN_COLUMNS = 16


def quantize_state(state: dict[str, torch.Tensor], keep: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """``state`` with every floating 2-D tensor of at least :data:`MIN_COLUMNS` columns as int8 (same name) plus
    its float32 row scales (``name + SCALE_SUFFIX``); other floating tensors, and those named in ``keep`` (names or
    shell patterns, e.g. ``["embed.weight"]``, ``(vocab_size, d_model)``, or ``["*_attn.*"]``: 2 bytes a weight
    instead of 1), as float16; the rest unchanged.

    Raises:
        ValueError: a name or pattern in ``keep`` that matches no floating tensor of ``state``.
    """
    floating = [n for n, t in state.items() if t.is_floating_point()]
    kept = {n: [m for m in floating if fnmatchcase(m, n)] for n in keep}
    unknown = sorted(n for n, matched in kept.items() if not matched)
    if unknown:
        raise ValueError(f"no floating tensor to keep in float16 named {', '.join(map(repr, unknown))}")
    keep = {m for matched in kept.values() for m in matched}
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if not t.is_floating_point():
            out[name] = t
        elif t.dim() == 2 and t.shape[1] >= MIN_COLUMNS and name not in keep:
            w = t.detach().float()
            scale = w.abs().amax(dim=1) / 127.0
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row: any scale is exact
            out[name] = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
            out[name + SCALE_SUFFIX] = scale
        else:
            out[name] = t.to(torch.float16)
    return out


def is_quantized(state: dict[str, torch.Tensor]) -> bool:
    """Whether ``state`` (a weights file as read) holds int8 tensors of :func:`quantize_state`."""
    return any(name.endswith(SCALE_SUFFIX) for name in state)


def dequantize_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float32 tensors of a file written by :func:`quantize_state` (``Ŵ = q · scale`` row by row); a file without
    int8 tensors comes back unchanged.

    Raises:
        ValueError: a scale without its int8 tensor, an int8 tensor without its scale, or shapes that do not fit
            (one scale per row).
    """
    if not is_quantized(state):
        return state
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.endswith(SCALE_SUFFIX):
            if name[: -len(SCALE_SUFFIX)] not in state:
                raise ValueError(f"int8 scales {name!r} have no weights")
            continue
        if t.dtype == torch.int8:
            scale = state.get(name + SCALE_SUFFIX)
            if scale is None or t.dim() != 2 or scale.shape != (t.shape[0],):
                raise ValueError(f"int8 tensor {name!r} {tuple(t.shape)} has no scale per row")
            out[name] = t.float() * scale.float()[:, None]
        else:
            out[name] = t
    return out
