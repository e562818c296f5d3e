"""Average checkpoints: ``python -m tools.average OUT CKPT CKPT …`` (Vaswani et al. 2017, §6.1: "averaging the last
5 checkpoints").

Every floating-point tensor of the output is the element-wise mean of the inputs' (computed in float64, stored in
float32 unless ``--fp16``, or as int8 matrices with a scale per row with ``--int8``, less the matrices named by
``--keep-fp16`` which stay float16: :mod:`model.quantize`; one input is then a conversion); the config and
tokenizer come from the first checkpoint, and all inputs must share them exactly, except the options that act only
in training (dropout rates, LayerDrop: :data:`WARM_START_KNOBS`), so that lanes warm-started from one model with
other dropout still make one soup (Wortsman et al. 2022); the card lists such differences. The result is an ordinary
checkpoint folder, loadable like any other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from model.checkpoint import CheckpointError, load_checkpoint, read_weights, write_checkpoint_files
from model.hf.loader import is_hf_model_dir
from model.quantize import quantize_state
from training.checkpoints import WARM_START_KNOBS


def _architecture(config: dict) -> dict:
    """``config`` without the training-only knobs: what must agree for weights to average."""
    return {k: v for k, v in config.items() if k not in WARM_START_KNOBS}


def average_checkpoints(
    folders: list[str | Path],
    out: str | Path,
    fp16: bool = False,
    int8: bool = False,
    keep_fp16: tuple[str, ...] = (),
) -> Path:
    """Write the mean of ``folders`` (≥ 1 checkpoint folders) to ``out`` and return it, in float32, float16
    (``fp16``) or int8 matrices with float32 row scales (``int8``, :func:`model.quantize.quantize_state`), where
    the matrices named in ``keep_fp16`` (e.g. ``("embed.weight",)``) stay float16.

    Raises:
        CheckpointError: no input, an input that does not load, inputs whose config, tokenizer or tensor
            names differ, or a name in ``keep_fp16`` that is no tensor of the model.
    """
    paths = [Path(f) for f in folders]
    if not paths:
        raise CheckpointError("nothing to average: give at least one checkpoint folder")
    for folder in paths:  # its tensors have other names and its tokenizer is no tokenizer.json of ours
        if is_hf_model_dir(folder):
            raise CheckpointError(f"{folder} is a Hugging Face model folder; only checkpoints of this project average")
    first = load_checkpoint(paths[0])  # validates the first fully (config, tokenizer, weights)
    tok_json = first.tokenizer.to_str()
    first_architecture = _architecture(first.config.to_dict())
    total: dict[str, torch.Tensor] = {}
    knobs: dict[str, list] = {}  # training-only knob -> its value in each input
    for folder in paths:
        ckpt = first if folder == paths[0] else load_checkpoint(folder)
        config = ckpt.config.to_dict()
        if _architecture(config) != first_architecture:
            raise CheckpointError(f"{folder} has another config than {paths[0]}; only the same model averages")
        for k in WARM_START_KNOBS:
            knobs.setdefault(k, []).append(config.get(k))
        if ckpt.tokenizer.to_str() != tok_json:
            raise CheckpointError(f"{folder} has another tokenizer than {paths[0]}")
        state = read_weights(folder / "model.safetensors")
        if total and set(state) != set(total):
            raise CheckpointError(f"{folder} holds other tensors than {paths[0]}")
        for name, t in state.items():
            t = t.to(torch.float64) if t.is_floating_point() else t
            total[name] = total[name] + t if name in total and t.is_floating_point() else t
    dtype = torch.float16 if fp16 else torch.float32
    card = dict(first.card)
    mean = {k: (v / len(paths)).to(dtype) if v.is_floating_point() else v for k, v in total.items()}
    if int8:
        try:
            mean = quantize_state(mean, keep_fp16)
        except ValueError as exc:
            raise CheckpointError(f"--keep-fp16: {exc}") from exc
        if keep_fp16:
            card["int8_kept_fp16"] = sorted(keep_fp16)
    card["averaged"] = {"checkpoints": [str(f) for f in paths], "count": len(paths)}
    differ = {k: values for k, values in knobs.items() if len(set(map(repr, values))) > 1}
    if differ:  # the config keeps the first input's values; these never act at inference
        card["averaged"]["training_knobs"] = differ
    return write_checkpoint_files(out, first.config.to_dict(), tok_json, mean, card)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.average", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output checkpoint folder (created)")
    p.add_argument("checkpoints", nargs="+", help="checkpoint folders of the same model, e.g. runs/X/evals/step-*")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--fp16", action="store_true", help="store the mean in float16 (half the size)")
    size.add_argument(
        "--int8",
        action="store_true",
        help="store the matrices as int8 with a scale per row (a quarter "
        "of float32; measure the loss with evaluation.evaluate --loss)",
    )
    p.add_argument(
        "--keep-fp16",
        action="append",
        default=[],
        metavar="NAME",
        help="with --int8: keep this tensor in float16 (repeatable; a shell pattern matches "
        "several), e.g. embed.weight, the tied embedding and output projection, or '*_attn.*'",
    )
    args = p.parse_args(argv)
    if args.keep_fp16 and not args.int8:
        p.error("--keep-fp16 goes with --int8")
    try:
        out = average_checkpoints(args.checkpoints, args.out, args.fp16, args.int8, tuple(args.keep_fp16))
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
