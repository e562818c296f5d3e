"""Autoregressive decoding with a KV cache: the stepping API the pages use (batched greedy: :mod:`decoding.batched`).

Each step feeds only the newest target token: self-attention appends one K/V row per layer to the
cache, cross-attention reuses the K/V computed once from the encoder ``memory``. The logits equal those of
a full recompute of the prefix (tested).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from decoding.loops import loop_completions
from model.config import decoder_prefix
from model.tokenizer import replace_surrogates
from model.tokenizing import Tokenizer
from model.transformer import KVCache, Transformer

#: Hard cap on characters accepted from a user before tokenizing (a 10,000-character paste is refused politely).
MAX_INPUT_CHARS = 2000


class InputError(ValueError):
    """User text that cannot be translated as it is; the message is meant to be shown to the user."""


@dataclass
class SourceInput:
    """A tokenized source sentence.

    Attributes:
        text: the cleaned text the offsets refer to.
        ids: token ids fed to the encoder, ``<eos>`` included (``[src_len]``).
        tokens: the pieces for ``ids`` (the end-of-sequence piece, ``"<eos>"`` in our tokenizer, last).
        offsets: ``(start, end)`` character span of each piece in ``text`` (``(len, len)`` for ``<eos>``).
        truncated: the text was longer than the model's ``max_len`` and was cut.
        notes: plain-language remarks for the user (truncation, unknown characters, removed control characters).
    """

    text: str
    ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


#: A decoder-only prompt is cut shorter than ``max_len`` so that the model has this many positions left to continue.
MIN_CONTINUATION = 32


def input_limit(cfg) -> int:
    """The most tokens (``<eos>`` included) of user text that :func:`prepare_source` keeps for this model: all
    ``max_len`` positions of a translator's encoder, or ``max_len − MIN_CONTINUATION`` of a decoder-only model,
    whose prompt and continuation share the ``max_len`` positions (a full-length prompt would leave none)."""
    return cfg.max_len if cfg.is_encoder_decoder else max(2, cfg.max_len - MIN_CONTINUATION)


#: Format characters (category Cf) a text keeps: the zero-width joiner and non-joiner, which shape Persian and Indic
#: letters and join emoji sequences. Every other one is invisible and only misleads (a zero-width space inside a
#: word, a right-to-left override that shows a text other than the one the model reads, a byte-order mark).
KEPT_FORMAT = "\u200c\u200d"


def clean_user_text(text: str) -> tuple[str, list[str]]:
    """NFC-normalise, replace control characters (Cc) by spaces and lone surrogates by U+FFFD, remove invisible
    format characters (Cf but :data:`KEPT_FORMAT`), and collapse whitespace. Returns ``(text, notes)``."""
    notes = []
    text = text or ""
    valid = replace_surrogates(text)
    if valid != text:
        notes.append("Characters that are not valid Unicode (lone surrogates) were replaced by \ufffd.")
    text = unicodedata.normalize("NFC", valid)
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in text):
        notes.append("Control characters were removed.")
    if any(unicodedata.category(ch) == "Cf" and ch not in KEPT_FORMAT for ch in text):
        notes.append(
            "Invisible formatting characters (such as zero-width spaces or right-to-left overrides) were removed."
        )
    text = "".join(
        " " if cat in ("Cc", "Zl", "Zp") else "" if cat == "Cf" and ch not in KEPT_FORMAT else ch
        for ch, cat in ((ch, unicodedata.category(ch)) for ch in text)
    )
    return " ".join(text.split()), notes


def prepare_source(tokenizer: Tokenizer, text: str, max_len: int, eos_id: int, unk_id: int) -> SourceInput:
    """Tokenize user text for the encoder (or as a decoder-only prompt), truncating to ``max_len`` tokens.

    Raises:
        InputError: the text is empty or only whitespace/control characters, or longer than
            :data:`MAX_INPUT_CHARS` characters.
    """
    if text is not None and len(text) > MAX_INPUT_CHARS:
        raise InputError(
            f"The text has {len(text):,} characters; this model reads single sentences of up to "
            f"{MAX_INPUT_CHARS:,} characters. Please shorten it."
        )
    clean, notes = clean_user_text(text)
    if not clean:
        raise InputError("Please type a sentence (the text is empty).")
    enc = tokenizer.encode(clean)
    ids, tokens, offsets = enc.ids, enc.tokens, enc.offsets
    truncated = len(ids) + 1 > max_len
    if truncated:
        keep = max_len - 1
        start = clean.rfind(" ", 0, offsets[keep][0]) + 1  # the word the first piece left out belongs to
        rest = clean[start:].strip()
        ids, tokens, offsets = ids[:keep], tokens[:keep], offsets[:keep]
        shown = rest if len(rest) <= 60 else rest[:57].rstrip() + "…"
        words = len(rest.split())
        notes.append(
            f"The text was cut to the model's limit of {max_len} tokens (the first {keep} pieces): its "
            f"last {words} word{'s' if words != 1 else ''}, from “{shown}”, were left out (the model never "
            "read them)."
        )
    if unk_id in ids:
        unknown = sorted({clean[s:e] for i, (s, e) in zip(ids, offsets, strict=True) if i == unk_id})
        notes.append("Characters the model never saw in training are shown as <unk>: " + " ".join(unknown)[:80])
    end = tokenizer.id_to_token(eos_id)  # "<eos>" here, "</s>" in Marian, "<|endoftext|>" in GPT-2
    return SourceInput(clean, ids + [eos_id], tokens + [end], offsets + [(len(clean), len(clean))], truncated, notes)


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class StepRecord:
    """What one decoding step produced (frozen: a finished decoding is shared read-only, :mod:`decoding.decoded`).

    Attributes:
        token_id: the chosen next token.
        prob: its probability under the model (softmax of the logits).
        log_probs: log-softmax over the whole vocabulary ``[vocab]``; ``None`` in a :meth:`slim` record, which keeps
            ``kept`` instead (read a token's value with :meth:`log_prob`).
        cross_attention: the new token's cross-attention ``[layers, heads, src_len]`` (``None`` for decoder-only).
        self_attention: its masked self-attention over the prefix ``[layers, heads, prefix_len]``.
        cache_bytes: bytes in the KV cache after the step.
    """

    token_id: int
    prob: float
    log_probs: torch.Tensor | None
    cross_attention: torch.Tensor | None
    self_attention: torch.Tensor
    cache_bytes: int
    #: The :data:`TOP_KEPT` most probable tokens and their probabilities, most probable first: the pages' lists,
    #: computed once when the step is decoded instead of at every click of every visitor.
    top_ids: tuple[int, ...] = ()
    top_probs: tuple[float, ...] = ()
    #: The token was not chosen but forced: the model's generation config ends a decoding at its length cap with it
    #: (``Stepper``'s ``forced_eos_id``); ``prob`` is still the model's own probability of it.
    forced: bool = False
    #: The tokens the loop guard kept from the rule at this step (``Stepper``'s ``loop_times``): each would have
    #: written a phrase that many times in a row. ``log_probs`` and ``top_ids`` are still the model's own.
    banned: tuple[int, ...] = ()
    #: ``((token_id, log p), …)`` of a :meth:`slim` record: the top tokens, the chosen one and the banned ones.
    kept: tuple[tuple[int, float], ...] = ()

    def top(self, k: int = 10) -> tuple[list[int], list[float]]:
        """The ``k`` most probable next tokens and their probabilities (at most :data:`TOP_KEPT` of a slim
        record)."""
        if k <= len(self.top_ids) or self.log_probs is None:
            return list(self.top_ids[:k]), list(self.top_probs[:k])
        p, i = self.log_probs.exp().topk(min(k, self.log_probs.numel()))
        return i.tolist(), p.tolist()

    def log_prob(self, token_id: int) -> float:
        """The model's log-probability of ``token_id`` at this step.

        Raises:
            KeyError: a slim record that did not keep it (it keeps the top :data:`TOP_KEPT`, the chosen and the
                banned tokens).
        """
        if self.log_probs is not None:
            return float(self.log_probs[token_id])
        for t, value in self.kept:
            if t == token_id:
                return value
        raise KeyError(f"token {token_id}'s log-probability was not kept at this step")

    def slim(self) -> "StepRecord":
        """This record without its ``[vocab]`` row: what a shared decoding keeps (the pages read the top tokens,
        the chosen one and the banned ones; a 58k-vocabulary row is 232 kB a step)."""
        if self.log_probs is None:
            return self
        ids = list(dict.fromkeys((*self.top_ids, self.token_id, *self.banned)))
        kept = tuple(zip(ids, self.log_probs[ids].tolist(), strict=True))
        return dataclasses.replace(self, log_probs=None, kept=kept)


#: How many of a step's most probable tokens a :class:`StepRecord` keeps ready (the Decoding lab lists 15).
TOP_KEPT = 16


def strip_eos(ids: Sequence[int], eos_id: int) -> list[int]:
    """``ids`` without a final ``<eos>`` (the output text, or the decoder's inputs: ``<eos>`` is never fed back)."""
    return list(ids[:-1]) if ids and ids[-1] == eos_id else list(ids)


def greedy_choice(log_probs: torch.Tensor) -> int:
    """Argmax (ties: lowest id). ``log_probs`` is ``[vocab]``."""
    return int(torch.argmax(log_probs))


class Stepper:
    """Step through the decoding of one sequence, one token at a time, with Back / Reset.

    Args:
        model: an eval-mode :class:`Transformer`.
        src_ids: encoder input ids ``[src_len]``. For a decoder-only model, the prompt's ids instead: without
            ``prefix_ids`` the decoding starts from :func:`lm_prompt` of them (``<bos>`` + the prompt).
        prefix_ids: target ids to start from (default ``[<bos>]``, or the prompt of a decoder-only model).
        max_new_tokens: the decoding stops after this many tokens, or at ``<eos>``.
        use_cache: feed one token per step with the KV cache (``True``) or recompute the whole prefix.
        head_masks: kind → ``[layers, heads]`` multipliers (0 switches a head off), kinds ``encoder``, ``decoder``,
            ``cross`` (or ``self`` for decoder-only); ``None`` = the plain model.
        forced_eos_id: when given, the last token a decoding may add (the ``max_new_tokens``-th) is this one,
            whatever the rule would choose, as ``transformers``' ``forced_eos_token_id`` does at ``max_length``
            (a Hugging Face folder's generation config, :mod:`model.hf.generation`); its record says ``forced``.
        loop_times: 0, or the loop guard: the rule never gets a token that would write a phrase this many times in
            a row (:func:`~decoding.loops.loop_completions`); its record lists them in ``banned``.

    Raises:
        ValueError: an encoder-decoder model without ``src_ids``.
    """

    def __init__(
        self,
        model: Transformer,
        src_ids: list[int] | None = None,
        prefix_ids: list[int] | None = None,
        max_new_tokens: int | None = None,
        use_cache: bool = True,
        head_masks: dict[str, torch.Tensor] | None = None,
        forced_eos_id: int | None = None,
        loop_times: int = 0,
    ):
        self.model = model
        self.loop_times = loop_times
        self.forced_eos_id = forced_eos_id
        cfg = model.cfg
        self.use_cache = use_cache
        masks = head_masks or {}
        self._self_mask = masks.get(cfg.decoder_self_kind)
        self._cross_mask = masks.get("cross")
        if cfg.is_encoder_decoder and not src_ids:
            raise ValueError("an encoder-decoder model needs src_ids")
        self.prefix = decoder_prefix(cfg, src_ids, prefix_ids)
        self.max_new_tokens = min(max_new_tokens or cfg.max_len, cfg.max_len - len(self.prefix))
        dev = model.device
        self.src = torch.tensor([src_ids], device=dev) if cfg.is_encoder_decoder else None
        self.memory: torch.Tensor | None
        self.memory_mask: torch.Tensor | None
        with torch.inference_mode():
            if self.src is not None:
                self.memory, _ = model.encode(self.src, head_mask=masks.get("encoder"))
                self.memory_mask = model.src_mask(self.src)
            else:
                self.memory = self.memory_mask = None
        self.reset()

    # --- state --------------------------------------------------------------------------------
    def reset(self) -> None:
        self.tokens: list[int] = list(self.prefix)
        self.records: list[StepRecord] = []
        self.cache: KVCache = self.model.new_cache()

    @property
    def generated(self) -> list[int]:
        """Tokens produced so far (the prefix excluded)."""
        return self.tokens[len(self.prefix) :]

    @property
    def finished(self) -> bool:
        return bool(self.records and self.records[-1].token_id == self.model.cfg.eos_id) or (
            len(self.records) >= self.max_new_tokens
        )

    # --- stepping -----------------------------------------------------------------------------
    @torch.inference_mode()
    def next_distribution(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Log-probabilities ``[vocab]`` of the next token, with its cross-attention ``[layers, heads, src_len]``
        (or ``None``) and self-attention ``[layers, heads, prefix_len]``, traced."""
        dev = self.model.device
        if self.use_cache:
            new = torch.tensor([self.tokens[self.cache.positions :]], device=dev)
            out = self.model.decode(
                new,
                self.memory,
                self.memory_mask,
                cache=self.cache,
                trace=True,
                self_head_mask=self._self_mask,
                cross_head_mask=self._cross_mask,
            )
        else:
            full = torch.tensor([self.tokens], device=dev)
            out = self.model.decode(
                full,
                self.memory,
                self.memory_mask,
                trace=True,
                self_head_mask=self._self_mask,
                cross_head_mask=self._cross_mask,
            )
        log_probs = torch.log_softmax(self.model.next_token_logits(out.hidden[0, -1]).float(), dim=-1)
        cross = torch.stack([w[0, :, -1] for w in out.cross_weights]) if out.cross_weights else None
        self_w = torch.stack([w[0, :, -1] for w in out.self_weights])
        return log_probs, cross, self_w

    def step(self, choose: Callable[[torch.Tensor], int] = greedy_choice) -> StepRecord | None:
        """Produce one token (``None`` when already finished). ``choose(log_probs) -> token id``."""
        if self.finished:
            return None
        log_probs, cross, self_w = self.next_distribution()
        banned = tuple(sorted(loop_completions(self.generated, self.loop_times))) if self.loop_times else ()
        ruled = log_probs.index_fill(0, torch.tensor(banned), float("-inf")) if banned else log_probs
        token = int(choose(ruled))  # drawn even when forced: a sampler's random stream stays the same
        forced_eos = self.forced_eos_id
        forced = forced_eos is not None and len(self.records) == self.max_new_tokens - 1 and token != forced_eos
        if forced and forced_eos is not None:
            token = forced_eos
        top_p, top_i = log_probs.exp().topk(min(TOP_KEPT, log_probs.numel()))
        rec = StepRecord(
            token,
            float(log_probs[token].exp()),
            log_probs,
            cross,
            self_w,
            self.cache.nbytes()["total"],
            tuple(top_i.tolist()),
            tuple(top_p.tolist()),
            forced,
            banned,
        )
        self.tokens.append(token)
        self.records.append(rec)
        return rec

    def back(self) -> None:
        """Undo the last step (cheap: the cache is truncated, nothing is recomputed)."""
        if not self.records:
            return
        self.records.pop()
        self.tokens.pop()
        self.cache.truncate(len(self.tokens) - 1)

    def run_to_end(self, choose: Callable[[torch.Tensor], int] = greedy_choice) -> None:
        while not self.finished:
            self.step(choose)

    def goto(self, n_steps: int, choose: Callable[[torch.Tensor], int] = greedy_choice) -> None:
        """Move to exactly ``n_steps`` generated tokens (or as far as decoding goes), stepping back or forward."""
        while len(self.records) > n_steps:
            self.back()
        while len(self.records) < n_steps and not self.finished:
            self.step(choose)

    def output_ids(self) -> list[int]:
        """Generated ids without the final ``<eos>``."""
        return strip_eos(self.generated, self.model.cfg.eos_id)

    def decoder_inputs(self) -> list[int]:
        """The ids the decoder reads: the prefix and the generated tokens, without a final ``<eos>``."""
        return strip_eos(self.tokens, self.model.cfg.eos_id)

    def cross_attention_matrix(self) -> torch.Tensor | None:
        """Cross-attention of all generated tokens ``[layers, heads, steps, src_len]``, one row per step."""
        if not self.records or self.records[0].cross_attention is None:
            return None
        # every step of an encoder-decoder model records its cross-attention, none of a decoder-only one's
        return torch.stack([r.cross_attention for r in self.records if r.cross_attention is not None], dim=2)
