"""Make a trained translator deeper without changing what it computes:
``python -m tools.grow OUT CHECKPOINT --encoder-layers 6 --decoder-layers 6``.

Why: a small model whose validation loss has stopped falling is short of capacity, and training a bigger one from
scratch on two CPU cores costs many sessions. A deeper copy that starts *exactly* where the small one stands keeps
everything it learned and gives the new layers all the training time (Net2DeeperNet: Chen, Goodfellow & Shlens
2016, §3.2, "initialise the new layer as the identity"; progressive stacking: Gong et al. 2019).

How: each new layer is a copy of the old layer it follows, with the projections that write into the residual
stream (the attention ``out_proj`` weights and biases, the feed-forward ``linear2``) set to zero. In a pre-norm
block, ``x + sublayer(LayerNorm(x))``, a zero output projection makes the block the identity, so the grown model's
logits equal the original's (tested); its other weights being a trained layer's, the gradient reaches the zeroed
projections at once and the new layer starts from useful features rather than noise. Post-norm blocks
(``LayerNorm(x + sublayer(x))``) are not identities with a zero branch, so they are refused.

Old layer ``i`` of ``n_old`` keeps its place among ``n_new`` as the first new index ``j`` with
``j · n_old // n_new == i``; the new layers that follow it copy it. 3 → 6 gives ``0, 0′, 1, 1′, 2, 2′``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from model.checkpoint import CheckpointError, load_checkpoint, model_state, write_checkpoint_files
from model.hf.loader import is_hf_model_dir

#: Suffixes of the tensors that write a sublayer's output into the residual stream (zeroed in a new layer).
RESIDUAL_WRITERS = ("out_proj.weight", "out_proj.bias", "linear2.weight", "linear2.bias")
#: The config key of each stack's depth, and the tensor-name prefix of its layers.
STACKS = {"n_encoder_layers": "encoder_layers", "n_decoder_layers": "decoder_layers"}


def layer_sources(n_old: int, n_new: int) -> list[tuple[int, bool]]:
    """For each of ``n_new`` layers: ``(old layer it comes from, is a new identity copy)``.

    Raises:
        ValueError: ``n_new < n_old`` (this only grows) or ``n_old < 1``.
    """
    if n_old < 1 or n_new < n_old:
        raise ValueError(f"can only grow a stack of ≥ 1 layers: {n_old} → {n_new}")
    sources, seen = [], set()
    for j in range(n_new):
        i = j * n_old // n_new
        sources.append((i, i in seen))
        seen.add(i)
    return sources


def grow_depth(checkpoint: str | Path, out: str | Path, encoder_layers: int, decoder_layers: int) -> Path:
    """Write a deeper copy of ``checkpoint`` to ``out`` (a checkpoint folder, float32 weights) and return it.

    Args:
        encoder_layers, decoder_layers: the new depths (≥ the old ones; a decoder-only model has only the second).

    Raises:
        CheckpointError: the checkpoint does not load, is not one of ours, is post-norm, or would shrink.
    """
    checkpoint, out = Path(checkpoint), Path(out)
    if is_hf_model_dir(checkpoint):
        raise CheckpointError(f"{checkpoint} is a Hugging Face model folder; only checkpoints of this project grow")
    ckpt = load_checkpoint(checkpoint)  # validates config, tokenizer and weights
    config = ckpt.config.to_dict()
    if not config.get("norm_first", False):
        raise CheckpointError(
            "only a pre-norm model (norm_first) grows exactly: a post-norm block with a zero "
            "branch still normalises, so it is no identity"
        )
    wanted = {"n_encoder_layers": encoder_layers, "n_decoder_layers": decoder_layers}
    if config["arch"] == "decoder-only":
        wanted.pop("n_encoder_layers")
    state = model_state(ckpt.model)  # the weights just loaded and validated, without the tied output copy
    grown = {
        k: v.float() if v.is_floating_point() else v
        for k, v in state.items()
        if not any(k.startswith(prefix + ".") for prefix in STACKS.values())
    }
    growth = {}
    for key, n_new in wanted.items():
        prefix, n_old = STACKS[key], config[key]
        try:
            sources = layer_sources(n_old, n_new)
        except ValueError as exc:
            raise CheckpointError(f"{prefix}: {exc}") from None
        for j, (i, fresh) in enumerate(sources):
            for name, t in state.items():
                if not name.startswith(f"{prefix}.{i}."):
                    continue
                t = (t.float() if t.is_floating_point() else t).clone()  # a copied layer shares no storage
                if fresh and name.endswith(RESIDUAL_WRITERS):
                    t = torch.zeros_like(t)
                grown[f"{prefix}.{j}.{name[len(f'{prefix}.{i}.') :]}"] = t
        config[key] = n_new
        growth[prefix] = [n_old, n_new]
    card = dict(ckpt.card)
    card["grown"] = {
        "from": str(checkpoint),
        "layers": growth,
        "rule": "new layers copy the one before, with zeroed residual projections (identity)",
    }
    write_checkpoint_files(out, config, ckpt.tokenizer.to_str(), grown, card)
    load_checkpoint(out)  # what was written loads, or this raises here rather than in the trainer
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.grow", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output checkpoint folder (created); train it with --init-from OUT")
    p.add_argument("checkpoint", help="a checkpoint folder of this project, e.g. checkpoints/en-de")
    p.add_argument("--encoder-layers", type=int, required=True)
    p.add_argument("--decoder-layers", type=int, required=True)
    args = p.parse_args(argv)
    try:
        out = grow_depth(args.checkpoint, args.out, args.encoder_layers, args.decoder_layers)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"grew {args.checkpoint} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
