"""From sentence pairs to training batches: tokenized :class:`Example` s, length-bucketed batches under a token
budget (Vaswani et al. 2017, §5.1), the padded :class:`Batch` a step trains on, word dropout, BPE-dropout, the
label-smoothed loss (§5.4) and :class:`EpochPlan`, which says which examples every optimizer step of an epoch
takes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import tokenizers
import torch
import torch.nn.functional as F

from corpora.files import Pair
from model.config import ModelConfig
from model.tokenizer import TextTokenizer
from model.tokenizing import Tokenizer
from training.config import TrainConfig


@dataclass
class Example:
    """One training sequence: encoder ids ``src`` (``… <eos>``; empty for a decoder-only model) and decoder ids
    ``tgt`` (``<bos> … <eos>``: the model reads ``tgt[:-1]`` and predicts ``tgt[1:]``)."""

    src: list[int]
    tgt: list[int]  # <bos> … <eos>

    @property
    def size(self) -> int:
        return max(len(self.src), len(self.tgt))


@dataclass
class Batch:
    """Padded examples, as the model reads them (teacher forcing).

    Attributes:
        src: ``[batch, src_len]`` encoder ids (``[batch, 0]`` for a decoder-only model, which ignores it).
        tgt_in: ``[batch, tgt_len - 1]`` decoder inputs, ``<bos> …`` (each target without its last token).
        tgt_out: ``[batch, tgt_len - 1]`` the tokens to predict, ``… <eos>`` (each target without ``<bos>``).
        n_tokens: non-pad tokens of ``src`` and the full targets together (throughput counts these).
        n_src: non-pad tokens of ``src``.
        n_pred: non-pad tokens of ``tgt_out`` (= of ``tgt_in``): the predictions the loss averages over.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_tokens: int
    n_src: int
    n_pred: int


def encode_pairs(tok: Tokenizer, pairs: list[Pair], cfg: ModelConfig) -> list[Example]:
    """Tokenize pairs, dropping those that do not fit ``max_len`` (src gets ``<eos>``, tgt ``<bos> … <eos>``)."""
    src = tok.encode_batch([p.src for p in pairs])
    tgt = tok.encode_batch([p.tgt for p in pairs])
    out = []
    for s, t in zip(src, tgt, strict=True):
        if s and t and len(s) + 1 <= cfg.max_len and len(t) + 2 <= cfg.max_len:
            out.append(Example(s + [cfg.eos_id], [cfg.bos_id] + t + [cfg.eos_id]))
    return out


def pair_sides(pairs: list[Pair]) -> list[str]:
    """The texts of a language model's data: both sides of every pair, ``[p₀.src, p₀.tgt, p₁.src, …]`` (an empty
    side, as in a monolingual ``Pair(text, "")``, is left out)."""
    return [t for p in pairs for t in (p.src, p.tgt) if t]


def encode_texts(tok: Tokenizer, texts: list[str], cfg: ModelConfig) -> list[Example]:
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


def encode_examples(tok: Tokenizer, pairs: list[Pair], cfg: ModelConfig) -> list[Example]:
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
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
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


def round_up(n: int, multiple: int, cap: int | None = None) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (≥ 1), but never past ``cap`` (nor below ``n``)."""
    up = -(-n // multiple) * multiple
    return max(n, min(up, cap)) if cap else up


def padded_shape(chosen: list[Example], multiple: int = 1, max_len: int | None = None) -> tuple[int, int, int]:
    """``(rows, src_len, tgt_len)`` of the padded tensors of ``chosen``: the longest source rounded up to a multiple
    of ``multiple``, the longest target such that the decoder's input (``tgt_len − 1`` tokens) is one; neither
    past ``max_len`` (the positional table's length) when given."""
    src_len = round_up(max(len(e.src) for e in chosen), multiple, max_len)
    tgt_len = round_up(max(len(e.tgt) for e in chosen) - 1, multiple, max_len and max_len - 1) + 1
    return len(chosen), src_len, tgt_len


def collate(
    examples: list[Example], idx: list[int], pad: int, device, multiple: int = 1, max_len: int | None = None
) -> Batch:
    """The :class:`Batch` of ``examples[i] for i in idx``, padded with ``pad`` and moved to ``device``; with
    ``multiple`` > 1 padded further, to the lengths :func:`padded_shape` gives (shapes then repeat from step to
    step; the extra padding is masked like any other and changes no loss).

    The padded rows become one tensor each in a single call (7 ms per 1,000 sentences on a 2-core CPU, against 17 ms
    row by row: a fifth of a 92-ms GPU step of the shipped translator's run), and reach a CUDA device from pinned
    memory without blocking, so the host can prepare the next step while the GPU computes this one."""
    chosen = [examples[i] for i in idx]
    _, src_len, tgt_len = padded_shape(chosen, multiple, max_len)
    src = torch.tensor([e.src + [pad] * (src_len - len(e.src)) for e in chosen], dtype=torch.long)
    tgt = torch.tensor([e.tgt + [pad] * (tgt_len - len(e.tgt)) for e in chosen], dtype=torch.long)
    src = src.reshape(len(chosen), src_len)  # a decoder-only model's empty sources stay [batch, 0]
    n_src = sum(len(e.src) for e in chosen)
    n_pred = sum(len(e.tgt) - 1 for e in chosen)
    device = torch.device(device)
    if device.type == "cuda":
        src = src.pin_memory().to(device, non_blocking=True)
        tgt = tgt.pin_memory().to(device, non_blocking=True)
    else:
        src, tgt = src.to(device), tgt.to(device)
    return Batch(src, tgt[:, :-1], tgt[:, 1:], n_tokens=n_src + n_pred + len(chosen), n_src=n_src, n_pred=n_pred)


def loss_fn(logits: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float) -> torch.Tensor:
    """Mean cross-entropy in nats/token over the non-pad tokens of ``target [batch, len]``, from ``logits
    [batch, len, vocab]``, with label smoothing ``smoothing`` (paper §5.4; 0 = plain cross-entropy)."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1), ignore_index=pad, label_smoothing=smoothing
    )


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


def with_bpe_dropout(tok: TextTokenizer, p: float) -> TextTokenizer:
    """A *copy* of ``tok`` whose BPE skips each merge with probability ``p`` (BPE-dropout, Provilkov et al. 2020),
    for encoding training data only; ``tok`` itself (the one saved in checkpoints) is untouched. ``p`` 0 → ``tok``."""
    if not p:
        return tok
    copy_ = tokenizers.Tokenizer.from_str(tok.to_str())
    copy_.model.dropout = p
    return TextTokenizer(copy_)


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
    each epoch sees other segmentations; otherwise everything is tokenized once. Of ``config`` it reads
    ``seed``, ``sentence_repeat``, ``phrases_per_epoch``, ``words_per_epoch``, ``batch_tokens`` and ``dict_share``.

    The sampling is deterministic in ``(seed, epoch)``, which is what makes ``--resume`` exact (with BPE-dropout,
    whose random merges ``tokenizers`` draws from its own unseeded generator, the segmentations are not).
    """

    def __init__(
        self, sentences, phrases, words, config: TrainConfig, encode, per_pair: int = 1, reencode: bool = False
    ):
        self.config, self.encode, self.per_pair, self.reencode = config, encode, per_pair, reencode
        self.raw = {"sentences": sentences, "phrases": phrases, "words": words}
        self.cached = {} if reencode else {k: encode(v) for k, v in self.raw.items()}

    def pool_size(self, kind: str) -> int:
        return len(self.raw[kind]) if self.reencode else len(self.cached[kind])

    def take(self, kind: str, idx: list[int] | None = None) -> list[Example]:
        """The examples of pool ``kind`` (all, or the pairs/examples at ``idx``), tokenized now when re-encoding."""
        if not self.reencode:
            pool = self.cached[kind]
            return pool if idx is None else [pool[i] for i in idx]
        pairs = self.raw[kind] if idx is None else [self.raw[kind][i] for i in idx]
        return self.encode(pairs)

    def generator(self, epoch: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)

    def examples(self, epoch: int) -> tuple[list[Example], list[list[int]]]:
        """Without ``--dict-share``: the epoch's examples and its length-bucketed, shuffled batches of indices."""
        gen = self.generator(epoch)
        chosen = self.take("sentences") * self.config.sentence_repeat
        for kind, n in (("phrases", self.config.phrases_per_epoch), ("words", self.config.words_per_epoch)):
            size = self.pool_size(kind)
            if size and n:
                count = n if self.reencode else n * self.per_pair  # pairs, or examples (a pair gives per_pair)
                pick = torch.randperm(size, generator=gen)[: min(count, size)].tolist()
                chosen = chosen + self.take(kind, pick)
        return chosen, make_batches(chosen, self.config.batch_tokens, gen)

    def steps(self, epoch: int) -> tuple[list[Example], list[list[list[int]]]]:
        """The epoch's examples and its optimizer steps, each a list of micro-batches (lists of example indices):
        one micro-batch per step without ``--dict-share``, sentences + dictionary with it."""
        share = self.config.dict_share
        n_phrases, n_words = self.pool_size("phrases"), self.pool_size("words")
        if not share or not (n_phrases + n_words):
            chosen, batches = self.examples(epoch)
            return chosen, [[b] for b in batches]
        gen = self.generator(epoch)
        chosen = self.take("sentences") * self.config.sentence_repeat
        sent_batches = make_batches(chosen, max(1, round(self.config.batch_tokens * (1 - share))), gen)
        dict_budget = max(1, round(self.config.batch_tokens * share))
        sample = self.take("phrases", list(range(min(n_phrases, 2000)))) + self.take(
            "words", list(range(min(n_words, 1000)))
        )
        mean_size = sum(len(e.src) + len(e.tgt) for e in sample) / max(len(sample), 1)
        wanted = math.ceil(len(sent_batches) * dict_budget / mean_size * 1.1)  # padding in the buckets: ~10%
        total = n_phrases + n_words
        order = torch.cat([torch.randperm(total, generator=gen) for _ in range(math.ceil(wanted / total))])[
            :wanted
        ].tolist()
        picked = self.take("phrases", [i for i in order if i < n_phrases]) + self.take(
            "words", [i - n_phrases for i in order if i >= n_phrases]
        )
        dict_batches = make_batches(picked, dict_budget, gen)
        offset = len(chosen)
        steps = [
            [b] + ([[offset + i for i in dict_batches[k]]] if k < len(dict_batches) else [])
            for k, b in enumerate(sent_batches)
        ]
        return chosen + picked, steps
