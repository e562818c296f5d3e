"""The Attention page's state and data helpers, without Streamlit.

The Altair grid's click, word-level views (BPE pieces merged into words), head labels for the ablation picker
(``"cross L2 H3"``) and the masks they stand for, the head-statistics table, and the ``.npz`` export of a trace's
raw attention. Its URL parameters are read by :mod:`ui.url`.
"""

from __future__ import annotations

import io
import re
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from decoding.stepping import SourceInput
from model.checkpoint import Checkpoint
from model.config import CAUSAL_KINDS, DECODER_ONLY_KINDS, ENCODER_DECODER_KINDS
from reading.analysis import merge_words, word_ids
from reading.trace import Trace
from ui import state
from ui.limits import SWEEP_BUDGET
from viz.labels import KIND_SHORT, parameters_text

#: Column order of the head-statistics table (those a kind lacks are left out).
STAT_COLUMNS = ("entropy", "same", "previous", "first", "eos", "max")
STAT_HELP = {
    "entropy": "mean row entropy in nats (0 = all weight on one key; ln k = uniform)",
    "same": "weight on the query's own position (the diagonal)",
    "previous": "weight on the position just before the query",
    "first": "weight on the first key (<bos> in the decoder, the first piece in the source)",
    "eos": "weight on the source's final <eos>",
    "max": "mean of each row's largest weight (1 = always one key)",
}
_HEAD_LABEL = re.compile(
    rf"^\s*({'|'.join(ENCODER_DECODER_KINDS + DECODER_ONLY_KINDS)})\s+L(\d+)\s+H(\d+)\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class View:
    """What the Attention page's shared controls picked, and the weights they show.

    Attributes:
        kind: attention kind (``encoder``, ``decoder``, ``cross``, ``self``); layer: 0-based;
        head: 0-based head, ``"all"`` or ``"mean"``; words: word level (pieces merged into words).
        attn: ``[layers, heads, q, k]`` of ``kind`` (word level when ``words``); q_labels / k_labels: its rows /
            columns (pieces, or words as word-start pieces).
    """

    kind: str
    layer: int
    head: int | str
    words: bool
    attn: torch.Tensor
    q_labels: list[str]
    k_labels: list[str]

    @property
    def causal(self) -> bool:
        """Keys after each query are masked (decoder and decoder-only self-attention)."""
        return self.kind in CAUSAL_KINDS

    @property
    def weights(self) -> torch.Tensor:
        """``[heads, q, k]``: the picked layer."""
        return self.attn[self.layer]

    @property
    def unit(self) -> str:
        """Title suffix: ``" · words"`` at word level, else empty."""
        return " · words" if self.words else ""

    def one_head(self) -> tuple[torch.Tensor, int | str]:
        """``([q, k] weights, head)`` of the picked head, or of the mean over heads (``"mean"``) when all are shown."""
        if isinstance(self.head, int):
            return self.weights[self.head], self.head
        return self.weights.mean(0), "mean"


def make_view(trace: Trace, kind: str, layer: int, head: int | str, words: bool) -> View:
    """The :class:`View` of ``trace`` for the picked kind, layer, head and word level."""
    q_pieces, k_pieces = trace.labels(kind)
    attn = trace.attention[kind]
    if words:
        attn, q_labels, k_labels = word_level(attn, q_pieces, k_pieces)
    else:
        q_labels, k_labels = list(q_pieces), list(k_pieces)
    return View(kind, layer, head, words, attn, q_labels, k_labels)


# --- the Altair grid ----------------------------------------------------------------------------------------
def grid_pick(selection: Any) -> tuple[int, int] | None:
    """``(layer, head)`` 0-based from the Altair grid's selection state (``{"head_pick": [{"layer": l, "head": h}]}``,
    1-based), or ``None`` when nothing usable is selected."""
    try:
        points = selection["head_pick"]
        point = points[0] if isinstance(points, (list, tuple)) else points
        return int(point["layer"]) - 1, int(point["head"]) - 1
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None


# --- word level ---------------------------------------------------------------------------------------------
def word_labels(pieces: Sequence[str]) -> list[str]:
    """One label per word (words as :func:`reading.analysis.word_ids` groups them), as word-start pieces.

    A word's pieces are joined, with the word-start mark of its first (``▁``, or GPT-2's ``␣``), so that every
    view shows the word as one piece: ``["▁black", "berries", "."]`` → ``["▁blackberries."]``, ``["␣M", "ü",
    "ller"]`` → ``["␣Müller"]``; a word whose first piece has no mark (GPT-2's first word) gets none. Special
    tokens (``<bos>``, ``<eos>``) stay as they are.
    """
    ids = word_ids(list(pieces))
    words: list[list[str]] = [[] for _ in range(max(ids) + 1)] if ids else []
    for piece, w in zip(pieces, ids, strict=True):
        words[w].append(piece)
    return ["".join(parts) for parts in words]  # only a word's first piece can carry the mark


def word_level(
    weights: torch.Tensor, q_pieces: Sequence[str], k_pieces: Sequence[str]
) -> tuple[torch.Tensor, list[str], list[str]]:
    """Word-level attention: ``[..., q_len, k_len]`` → ``([..., n_query_words, n_key_words], q_words, k_words)``.

    Sums over a word's key pieces and averages over its query pieces (:func:`reading.analysis.merge_words`), so
    each row still sums to 1. NaN (a blanked cell) counts as 0.
    """
    w = torch.nan_to_num(torch.as_tensor(weights).float())
    merged = merge_words(w, word_ids(list(q_pieces)), word_ids(list(k_pieces)))
    return merged, word_labels(q_pieces), word_labels(k_pieces)


# --- ablation ----------------------------------------------------------------------------------------------
def head_label(kind: str, layer: int, head: int) -> str:
    """``("cross", 1, 2)`` (0-based) → ``"cross L2 H3"``."""
    return f"{kind} L{layer + 1} H{head + 1}"


def head_options(layer_counts: Mapping[str, int], n_heads: int) -> list[str]:
    """Every head of the model as a label, kind by kind (``layer_counts``: kind → number of layers)."""
    return [
        head_label(kind, layer, head)
        for kind, n_layers in layer_counts.items()
        for layer in range(n_layers)
        for head in range(n_heads)
    ]


def parse_head_label(label: str) -> tuple[str, int, int] | None:
    """``"cross L2 H3"`` → ``("cross", 1, 2)`` (0-based), or ``None`` when it is not such a label."""
    m = _HEAD_LABEL.match(str(label))
    if not m:
        return None
    return m.group(1).lower(), int(m.group(2)) - 1, int(m.group(3)) - 1


def head_masks(labels: Sequence[str], layer_counts: Mapping[str, int], n_heads: int) -> dict[str, torch.Tensor]:
    """Masks for :func:`reading.analysis.sequence_log_probs`: kind → ``[layers, heads]`` with 0 at each listed head.

    Only kinds with at least one head switched off appear; labels that name no head of this model are ignored.
    """
    masks: dict[str, torch.Tensor] = {}
    for label in labels:
        parsed = parse_head_label(label)
        if parsed is None:
            continue
        kind, layer, head = parsed
        if kind not in layer_counts or not (0 <= layer < layer_counts[kind]) or not (0 <= head < n_heads):
            continue
        mask = masks.setdefault(kind, torch.ones(layer_counts[kind], n_heads))
        mask[layer, head] = 0.0
    return masks


@dataclass(frozen=True)
class SweepPlan:
    """What the ablation sweep covers.

    Attributes:
        layers: kind → the layers whose every head is removed in turn (empty: nothing is swept).
        scope: ``"all"`` (every head), ``"kind"`` (every layer of the kind shown), ``"layer"`` (the layer shown)
            or ``"none"`` (too big even for one layer).
        scorings: how many times the output is scored (one per head swept).
        note: why the sweep covers less than every head (``None`` when it covers them all).
    """

    layers: dict[str, tuple[int, ...]]
    scope: str
    scorings: int
    note: str | None = None


def sweep_plan(
    layer_counts: Mapping[str, int],
    n_heads: int,
    n_parameters: int,
    n_positions: int,
    kind: str,
    layer: int,
    budget: float = SWEEP_BUDGET,
) -> SweepPlan:
    """The largest of: every head, the heads of every layer of ``kind``, the heads of ``kind``'s ``layer``, whose
    cost fits ``budget``.

    Args:
        layer_counts: kind → number of layers; n_heads: heads per layer; n_parameters: the model's parameters;
        n_positions: positions one scoring runs (source and target); kind, layer: the view shown (0-based layer);
        budget: parameters × positions × scorings allowed (:data:`SWEEP_BUDGET`).
    """
    per_scoring = float(n_parameters) * max(n_positions, 1)
    total = n_heads * sum(layer_counts.values())
    what = KIND_SHORT.get(kind, kind).lower()
    options: list[tuple[str, dict[str, tuple[int, ...]], str | None]] = [
        ("all", {k: tuple(range(n)) for k, n in layer_counts.items()}, None),
        (
            "kind",
            {kind: tuple(range(layer_counts.get(kind, 0)))},
            f"the {n_heads * layer_counts.get(kind, 0)} heads of the kind shown above ({what}); pick another kind "
            "above to sweep its heads",
        ),
        (
            "layer",
            {kind: (layer,)},
            f"the {n_heads} heads of the layer shown above ({what}, layer {layer + 1}); pick another layer or kind "
            "above to sweep its heads",
        ),
    ]
    size = parameters_text(n_parameters)
    why = (
        f"Removing each of this model's {total} heads in turn scores the output {total} times, each through "
        f"{size} parameters: too slow here, so the sweep covers "
    )
    for scope, layers, covers in options:
        scorings = n_heads * sum(len(v) for v in layers.values())
        if scorings and per_scoring * (scorings + 1) <= budget:  # + 1: the scoring with every head
            return SweepPlan(layers, scope, scorings, None if covers is None else why + covers + ".")
    return SweepPlan(
        {},
        "none",
        0,
        f"Even the {n_heads} heads of one layer are too many to sweep for this model "
        f"({size} parameters) and this text ({n_positions} positions): try a shorter "
        "sentence.",
    )


# --- tables and export ----------------------------------------------------------------------------------------
def stats_frame(stats: Mapping[str, torch.Tensor]) -> pd.DataFrame:
    """:func:`reading.analysis.head_statistics` as a table: one row per head, columns layer, head (1-based) and
    each statistic in :data:`STAT_COLUMNS` order."""
    names = [n for n in STAT_COLUMNS if n in stats] + [n for n in stats if n not in STAT_COLUMNS]
    first = next(iter(stats.values()))
    n_layers, n_heads = first.shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row: dict[str, float] = {"layer": layer + 1, "head": head + 1}
            row.update({n: round(float(stats[n][layer, head]), 4) for n in names})
            rows.append(row)
    return pd.DataFrame(rows, columns=["layer", "head", *names])


def attention_npz(trace: Trace) -> bytes:
    """The trace's raw attention as a compressed ``.npz`` (bytes).

    Arrays: one per kind (``encoder``, ``decoder``, ``cross`` or ``self``), float32 ``[layers, heads, q, k]``
    (rows = queries); ``src_tokens`` / ``tgt_tokens`` (unicode, the BPE pieces; the target ones are the decoder
    inputs, ``<bos>`` first) and ``src_ids`` / ``tgt_ids`` (int64). ``np.load`` reads it without pickle.
    """
    arrays: dict[str, np.ndarray] = {kind: w.detach().cpu().float().numpy() for kind, w in trace.attention.items()}
    arrays["src_tokens"] = np.array(list(trace.src_tokens), dtype=str)
    arrays["tgt_tokens"] = np.array(list(trace.tgt_tokens), dtype=str)
    arrays["src_ids"] = np.array(list(trace.src_ids), dtype=np.int64)
    arrays["tgt_ids"] = np.array(list(trace.tgt_ids), dtype=np.int64)
    buffer = io.BytesIO()
    # numpy's stub lets any ``**`` name reach its ``allow_pickle: bool``; these names are kinds and token fields
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def made_from_trace_when_asked(
    ckpt: Checkpoint, src: SourceInput, tgt_inputs: list[int], raw_trace: Trace, make: Callable[[Trace], bytes]
) -> Callable[[], bytes]:
    """A download button's ``data``: ``make(raw_trace)`` (a file's bytes: :func:`attention_npz`, a Query · key
    record's), made when the visitor asks for it, holding the trace and the model only weakly; ``make`` should hold
    nothing large either (the labels and indices it needs, not arrays cut from the trace, which keep its tensors).

    Streamlit keeps a button's data callable while the session lives (and until a later run of any session drops
    it), so a closure over the trace kept every Attention visitor's trace alive after the gate had dropped it: tens
    of MB each, outside the gate's byte budget. A trace dropped since is traced again through the gate.

    Raises:
        RuntimeError: the model itself was unloaded since (another checkpoint version): the page is stale.
    """
    trace_ref, ckpt_ref = weakref.ref(raw_trace), weakref.ref(ckpt)

    def data() -> bytes:
        trace = trace_ref()
        if trace is None:
            model = ckpt_ref()
            if model is None:
                raise RuntimeError("the model of this page was unloaded: reload the page")
            trace = state.traced(model, src, tgt_inputs)[0]
        return make(trace)

    return data
