"""Data parallelism under ``torchrun`` and throughput accounting.

``torchrun --nproc_per_node N -m trainer.train --out runs/NAME [options]`` runs N processes (one per GPU, NCCL; or
on CPU, gloo) that each take a disjoint share of every step's batches (:func:`shard_batches`), so one optimizer step
consumes N batches: N × ``--batch-tokens`` padded tokens. Only rank 0 evaluates and writes files. On CUDA: TF32
matmuls, the rank's own GPU, optional ``--compile``; every log line has the global ``tokens_per_s`` and, where the
peak is known, ``mfu`` (:func:`model_flops_utilization`).
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

from training.device import pick_device

# --- data parallelism (torchrun) ------------------------------------------------------------------
STOP_REASONS = ("SIGTERM", "SIGINT", "max_minutes")  # why a run stops early, in order of precedence
DIST_TIMEOUT = timedelta(hours=1)  # ranks ≠ 0 wait this long at a barrier while rank 0 evaluates and saves


@dataclass
class Dist:
    """This process's place in a ``torchrun`` launch; the default (``world_size`` 1) is a single process.

    Its collectives are no-ops for a single process, so the trainer calls them unconditionally.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")  # where collective tensors live (the rank's GPU under NCCL)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that evaluates and writes files."""
        return self.rank == 0

    def agree(self, reason: str | None, n_tokens: int) -> tuple[str | None, int]:
        """One all-reduce per step: the stop reason of any rank (by :data:`STOP_REASONS` precedence, or ``None``)
        and the step's token count summed over ranks."""
        if not self.enabled:
            return reason, n_tokens
        t = torch.zeros(1 + len(STOP_REASONS), dtype=torch.int64, device=self.device)
        t[0] = n_tokens
        if reason is not None:
            t[1 + STOP_REASONS.index(reason)] = 1
        dist.all_reduce(t)
        total, *flags = t.tolist()
        return next((r for r, f in zip(STOP_REASONS, flags, strict=True) if f), None), total

    def mean(self, value: float) -> float:
        """``value`` averaged over ranks."""
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t) / self.world_size

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (on every rank)."""
        if not self.enabled:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        """Rank 0's ``obj`` (picklable), on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank is here (e.g. while rank 0 evaluates and saves)."""
        if self.enabled:
            dist.barrier(device_ids=[self.device.index] if self.device.type == "cuda" else None)


def dist_from_env(environ=os.environ) -> Dist:
    """The process's :class:`Dist` from torchrun's ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (absent → single)."""
    world_size = int(environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Dist()
    return Dist(
        rank=int(environ["RANK"]), local_rank=int(environ.get("LOCAL_RANK", environ["RANK"])), world_size=world_size
    )


T = TypeVar("T")


def shard_batches(batches: list[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s share of an epoch's batches: those at positions ``b`` with ``b % world_size == rank``.

    The list is first truncated to a multiple of ``world_size`` (the last ``len % world_size`` batches of the
    epoch are skipped; the epochs are shuffled differently, so it is not always the same ones) so that every rank
    takes the same number of steps and none waits forever in an all-reduce. Step ``k`` of the epoch trains on the
    batches ``k·W … k·W + W − 1`` together. With ``world_size`` 1 it is the whole list.
    """
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]


def setup_device(name: str, ctx: Dist) -> torch.device:
    """:func:`pick_device`, then under torchrun the rank's own GPU (``cuda:LOCAL_RANK``); TF32 matmuls on CUDA."""
    device = pick_device(name)
    if device.type == "cuda":
        # an index always: torch.cuda.set_device refuses a bare "cuda"
        device = torch.device("cuda", ctx.local_rank if ctx.enabled else (device.index or 0))
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast: TF32 tensor cores
        torch.backends.cudnn.allow_tf32 = True
    ctx.device = device
    return device


@contextmanager
def process_group(ctx: Dist):
    """``torch.distributed`` initialised for the block (NCCL on CUDA, gloo on CPU), destroyed after it."""
    if not ctx.enabled:
        yield
        return
    if not dist.is_available():
        raise ValueError("torchrun started several processes, but this torch build has no torch.distributed")
    dist.init_process_group(
        "nccl" if ctx.device.type == "cuda" else "gloo", rank=ctx.rank, world_size=ctx.world_size, timeout=DIST_TIMEOUT
    )
    try:
        yield
    except BaseException:
        dist.destroy_process_group()  # no barrier: the other ranks may never reach one
        raise
    # The trainer's DDP model holds the group until the garbage collector frees it (it sits in a reference cycle),
    # and a rank that destroys its group while another still talks to it, or whose gloo threads outlive the
    # group until interpreter exit, can abort at shutdown. So: free it, meet, then destroy together.
    gc.collect()
    ctx.barrier()
    dist.destroy_process_group()


# --- throughput and MFU ---------------------------------------------------------------------------
# Dense bf16 tensor-core peak of one GPU, TFLOP/s (NVIDIA datasheets, without sparsity). First match of a
# substring of ``torch.cuda.get_device_name`` wins, so the longer names come first.
PEAK_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
}


def peak_tflops_for(device_name: str) -> float | None:
    """The :data:`PEAK_TFLOPS` entry of a GPU name such as ``"NVIDIA H100 80GB HBM3"``, or ``None`` if unknown."""
    return next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)


def model_flops_utilization(flops_per_s: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilization: achieved training FLOP/s (:func:`training.flops.training_flops` per second, all ranks
    together) ÷ the peak of all devices together, ``peak_tflops`` in TFLOP/s; ``None`` when the peak is unknown.
    An estimate, not a measurement: it ignores attention-score FLOPs and padding."""
    if not peak_tflops:
        return None
    return flops_per_s / (peak_tflops * 1e12)


def wrap_for_training(model, ctx: Dist, device: torch.device, compile_model: bool):
    """The module the training steps call: ``model`` itself, in ``DistributedDataParallel`` under torchrun, and
    ``torch.compile``d with ``--compile``. Evaluation and checkpoints use the unwrapped model."""
    wrapped = model
    if ctx.enabled:
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if compile_model:
        # Every batch has its own rows and lengths: compiled for one shape, the graph would be compiled again for
        # the second one seen (then generalised); symbolic sizes from the start compile it once. Without duck
        # sizing, a first batch whose source and target happen to be equally long does not tie the two sizes
        # together (the next batch would compile the graph again).
        import torch.fx.experimental._config as fx_config

        fx_config.use_duck_shape = False
        wrapped = torch.compile(wrapped, dynamic=True)
    return wrapped
