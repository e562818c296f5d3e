"""What one micro-batch of a training step computes on the device, as one module: the model's teacher-forced
logits under autocast and the label-smoothed loss over them.

The trainer wraps this module (not the bare model) in ``DistributedDataParallel`` and ``torch.compile``, so that
with ``--compile`` the loss is compiled together with the forward pass: the compiler can then fuse the fp32 upcast
of the bf16 logits ``[batch, len, vocab]`` into the log-softmax instead of writing a full fp32 copy first (with a
16k vocabulary, the largest activation of the step; a GPU profile is to confirm it does). Uncompiled, it runs
exactly the operations the loop ran before it existed.
"""

from __future__ import annotations

import torch

from training.batches import loss_fn
from training.device import autocast, resolve_precision


class TrainStep(torch.nn.Module):
    """``model`` and its training loss: ``forward(src, tgt_in, tgt_out)`` → the mean label-smoothed cross-entropy
    over the non-pad tokens of ``tgt_out`` (nats/token, a 0-d fp32 tensor).

    Args:
        model: the Transformer (its parameters are this module's, under the name ``model.…``).
        pad_id: the padding id the loss ignores; smoothing: label smoothing (0 = plain cross-entropy).
        device: where the batches live (its type picks the autocast); precision: ``auto``, ``fp32`` or ``bf16``
            (:func:`training.device.autocast`).

    Shapes: ``src [batch, src_len]`` (``[batch, 0]`` for a decoder-only model), ``tgt_in`` and ``tgt_out``
    ``[batch, tgt_len]``.
    """

    def __init__(self, model: torch.nn.Module, pad_id: int, smoothing: float, device: torch.device, precision: str):
        super().__init__()
        self.model, self.pad_id, self.smoothing = model, pad_id, smoothing
        # resolved once: on a CPU "auto" reads /proc/cpuinfo, a file read in every step (and a graph break in
        # the compiled module)
        self.device = torch.device(device)
        self.precision = resolve_precision(precision, self.device)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.precision):
            logits = self.model(src, tgt_in)
        return loss_fn(logits, tgt_out, self.pad_id, self.smoothing)
