"""Model hyper-parameters as one dataclass with a JSON round-trip.

Defaults follow the base Transformer of Vaswani et al. (2017), "Attention Is All You Need", §3 and
Table 3, except the size, which is scaled down so that the model trains on a laptop CPU.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

ARCHITECTURES = ("encoder-decoder", "decoder-only")
POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")
#: The FFN's inner activation: ``relu`` (paper eq. 2), ``gelu`` (exact, erf), ``gelu_tanh`` (the tanh approximation
#: GPT-2 calls ``gelu_new``) and ``silu`` (x·σ(x), which Marian calls ``swish``).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
#: Where the sinusoidal table puts sines and cosines: ``interleaved`` (paper §3.5: sin in even, cos in odd
#: dimensions) or ``halves`` (Marian: all sines first, then all cosines, at the same frequencies).
POS_LAYOUTS = ("interleaved", "halves")
#: The attention kinds, as plain identifiers (display wording lives in ``viz/labels.py``): an encoder-decoder has
#: ``encoder`` (source self-attention), ``decoder`` (masked target self-attention) and ``cross`` (target queries
#: over source keys); a decoder-only model has ``self`` (masked self-attention).
ENCODER_DECODER_KINDS = ("encoder", "decoder", "cross")
DECODER_ONLY_KINDS = ("self",)
#: Kinds whose queries see only keys at or before their own position.
CAUSAL_KINDS = frozenset({"decoder", "self"})


class ConfigError(ValueError):
    """A configuration that cannot describe a valid model (the message says which field and why)."""


@dataclass
class ModelConfig:
    """Shape of a Transformer.

    Attributes:
        arch: ``"encoder-decoder"`` (translation) or ``"decoder-only"`` (GPT-style language model).
        vocab_size: size of the shared source/target vocabulary.
        d_model: width of every residual stream (paper: 512).
        n_heads: attention heads per layer (paper: 8); ``d_k = d_model // n_heads``.
        n_encoder_layers: encoder layers N (paper: 6; ignored for decoder-only).
        n_decoder_layers: decoder layers N (paper: 6).
        d_ff: inner width of the position-wise feed-forward network (paper: 2048).
        dropout: dropout on sub-layer outputs and on embeddings + PE (paper: 0.1).
        attention_dropout: dropout on attention weights (training only).
        activation_dropout: dropout on the FFN's inner ReLU activations (Araabi & Monz 2020 use 0.3 for small
            data); ``None`` = the same as ``dropout`` (as every checkpoint before this field had).
        decoder_layerdrop: probability of skipping a whole decoder layer in a training step (LayerDrop, Fan et al.
            2020); never at inference.
        pos_encoding: ``"sinusoidal"`` (paper §3.5, base 10000), ``"learned"``, ``"rope"``, ``"alibi"``, ``"none"``.
        norm_first: ``False`` = post-LN as in the paper, ``True`` = pre-LN (Xiong et al. 2020).
        tie_embeddings: share source embedding, target embedding and output projection (paper §3.4).
        max_len: longest sequence in tokens, special tokens included.
        pad_id, bos_id, eos_id, unk_id: special token ids. ``bos_id`` starts every decoder input; it may equal
            ``pad_id`` (Marian starts from ``<pad>``): the first target position is never treated as padding.
        activation: the FFN's inner non-linearity, one of :data:`ACTIVATIONS` (paper: ReLU; Marian: SiLU, its
            ``"swish"``; GPT-2: GELU with the tanh approximation, its ``"gelu_new"``).
        pos_layout: sinusoidal table layout, one of :data:`POS_LAYOUTS` (``"halves"``: Marian's
            ``MarianSinusoidalPositionalEmbedding``, sines in the first half of the dimensions, cosines in the second).
        scale_embeddings: multiply token embeddings by √d_model (paper §3.4; Marian's ``scale_embedding``);
            GPT-2 does not.
        logits_bias: a bias ``[vocab]`` added to the logits (Marian's ``final_logits_bias``).
        norm_eps: ε of every LayerNorm (``torch.nn.LayerNorm``'s default 1e-5; GPT-2's ``layer_norm_epsilon``).
        suppress_ids: token ids decoding never chooses (their next-token logits are −∞); Marian: ``[<pad>]``, as its
            ``bad_words_ids``. Teacher-forced logits and traces are unaffected.

    The fields after ``unk_id`` describe pretrained Hugging Face models (``model/hf/``); their defaults are this
    project's own architecture, so a config.json without them loads as before.
    """

    arch: str = "encoder-decoder"
    vocab_size: int = 8000
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float | None = None
    decoder_layerdrop: float = 0.0
    pos_encoding: str = "sinusoidal"
    norm_first: bool = False
    tie_embeddings: bool = True
    max_len: int = 128
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    activation: str = "relu"
    pos_layout: str = "interleaved"
    scale_embeddings: bool = True
    logits_bias: bool = False
    norm_eps: float = 1e-5
    suppress_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def d_k(self) -> int:
        """Per-head width of queries, keys and values (paper: d_k = d_v = d_model / h)."""
        return self.d_model // self.n_heads

    @property
    def is_encoder_decoder(self) -> bool:
        return self.arch == "encoder-decoder"

    @property
    def decoder_self_kind(self) -> str:
        """The attention kind of the decoder's masked self-attention: ``decoder`` beside an encoder, ``self`` in a
        decoder-only model."""
        return "decoder" if self.is_encoder_decoder else "self"

    def attention_layers(self) -> dict[str, int]:
        """Attention kind → number of layers that have it (:data:`ENCODER_DECODER_KINDS` or
        :data:`DECODER_ONLY_KINDS`, in that order); every layer has ``n_heads`` heads."""
        if self.is_encoder_decoder:
            return {"encoder": self.n_encoder_layers, "decoder": self.n_decoder_layers, "cross": self.n_decoder_layers}
        return {"self": self.n_decoder_layers}

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an impossible combination."""
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"arch must be one of {ARCHITECTURES}, got {self.arch!r}")
        if self.pos_encoding not in POS_ENCODINGS:
            raise ConfigError(f"pos_encoding must be one of {POS_ENCODINGS}, got {self.pos_encoding!r}")
        for name in ("vocab_size", "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
            if value <= 0 and name != "n_encoder_layers":
                raise ConfigError(f"{name} must be positive, got {value}")
        if self.is_encoder_decoder and self.n_encoder_layers <= 0:
            raise ConfigError("an encoder-decoder model needs n_encoder_layers > 0")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.pos_encoding == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"RoPE needs an even d_k, got d_model {self.d_model} / n_heads {self.n_heads}")
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")
        self._validate_variant()
        rates = (self.dropout, self.attention_dropout, self.ffn_dropout, self.decoder_layerdrop)
        if not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0.0 <= r < 1.0 for r in rates):
            raise ConfigError("dropout, attention_dropout, activation_dropout and decoder_layerdrop must lie in [0, 1)")

    def _validate_variant(self) -> None:
        """The fields that describe pretrained models' variants (activation … suppress_ids)."""
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.pos_layout not in POS_LAYOUTS:
            raise ConfigError(f"pos_layout must be one of {POS_LAYOUTS}, got {self.pos_layout!r}")
        if self.pos_layout != "interleaved" and self.pos_encoding != "sinusoidal":
            raise ConfigError(
                f"pos_layout {self.pos_layout!r} applies to sinusoidal encodings only, not {self.pos_encoding!r}"
            )
        for name in ("scale_embeddings", "logits_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        eps = self.norm_eps
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
            raise ConfigError(f"norm_eps must be a small positive number, got {eps!r}")
        ids = self.suppress_ids
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ConfigError(f"suppress_ids must be a list of token ids, got {ids!r}")
        outside = [i for i in ids if not 0 <= i < self.vocab_size]
        if outside:
            raise ConfigError(f"suppress_ids {outside} lie outside the vocabulary of {self.vocab_size}")
        if self.eos_id in ids:
            raise ConfigError(f"suppress_ids must not hold eos_id {self.eos_id}: decoding could never stop")

    @property
    def ffn_dropout(self) -> float:
        """The dropout on the FFN's inner activations: ``activation_dropout``, or ``dropout`` when it is ``None``."""
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    # --- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        """Build from a dict; unknown keys are refused so that a typo does not pass silently."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config keys: {sorted(unknown)}")
        return cls(**data)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        """Read ``config.json``. Raises :class:`ConfigError` on unreadable or invalid content."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        try:
            return cls.from_dict(data)
        except TypeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc


def default_max_new_tokens(cfg: ModelConfig, src_len: int) -> int:
    """Length cap for one output: twice the source plus ten tokens (a translation is rarely longer), within
    ``max_len``."""
    return min(cfg.max_len - 1, 2 * src_len + 10)


def lm_prompt(cfg: ModelConfig, src_ids: list[int]) -> list[int]:
    """A decoder-only model's prefix for a tokenized text: ``<bos>`` + its ids without ``<eos>`` (the model then
    continues the text)."""
    return [cfg.bos_id] + [i for i in src_ids if i != cfg.eos_id]


def decoder_prefix(cfg: ModelConfig, src_ids: list[int] | None, prefix_ids: list[int] | None) -> list[int]:
    """Where a decoding starts: ``prefix_ids`` if given; else ``[<bos>]`` for a translator (``src_ids`` go to the
    encoder) and ``<bos>`` + the prompt ``src_ids`` for a decoder-only model (which has no encoder to read them)."""
    if prefix_ids:
        return list(prefix_ids)
    if not cfg.is_encoder_decoder and src_ids:
        return lm_prompt(cfg, src_ids)
    return [cfg.bos_id]
