"""A Hugging Face ``config.json`` (MarianMT or GPT-2) as this project's :class:`~model.config.ModelConfig`.

The keys are those of ``transformers``' ``MarianConfig`` and ``GPT2Config``; a key a file leaves out takes that
class's default (``save_pretrained`` writes them all, older files may not). ``transformers`` is not imported:
the defaults below are copied from ``models/marian/configuration_marian.py`` and
``models/gpt2/configuration_gpt2.py`` (transformers 5.x; unchanged since 4.x).
"""

from __future__ import annotations

from model.config import ConfigError, ModelConfig
from model.hf.families import family

#: ``MarianConfig``'s defaults for the keys read here.
MARIAN_DEFAULTS = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "decoder_layerdrop": 0.0,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "bad_words_ids": None,
}

#: ``GPT2Config``'s defaults for the keys read here.
GPT2_DEFAULTS = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "tie_word_embeddings": True,
}

#: ``transformers``' ``ACT2FN`` names → ``ModelConfig.activation``. ``gelu_new``, ``gelu_fast`` and
#: ``gelu_pytorch_tanh`` are three spellings of the same tanh approximation of GELU.
ACTIVATION_NAMES = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "swish": "silu",
    "silu": "silu",
}

#: Marian's ``<unk>`` id when the folder has no ``vocab.json`` to read it from: the Marian converter writes
#: ``</s>`` = 0 and ``<unk>`` = 1 into every opus-mt vocabulary.
MARIAN_UNK_ID = 1


def model_type(hf: dict) -> str:
    """The ``model_type`` of a ``config.json`` dict. Raises :class:`ConfigError` unless it is supported
    (:data:`model.hf.families.FAMILIES`)."""
    return family(hf.get("model_type")).model_type


def hf_to_model_config(hf: dict, unk_id: int | None = None) -> ModelConfig:
    """``ModelConfig`` of a Hugging Face ``config.json`` dict of ``model_type`` ``"marian"`` or ``"gpt2"``.

    Args:
        hf: the parsed ``config.json``.
        unk_id: the tokenizer's ``<unk>`` id (Marian: from ``vocab.json``); ``None`` = :data:`MARIAN_UNK_ID` for
            Marian, ``<|endoftext|>`` for GPT-2 (its byte-level tokenizer never needs an unknown token, and
            ``transformers``' GPT-2 tokenizer names ``<|endoftext|>`` its ``unk_token``).

    Raises:
        ConfigError: another ``model_type``, a variant our Transformer does not implement (the message says which
            key), or values that make no valid :class:`ModelConfig`.
    """
    if not isinstance(hf, dict):
        raise ConfigError("config.json must hold a JSON object")
    return TRANSLATE[model_type(hf)](hf, unk_id)


def _get(hf: dict, defaults: dict, key: str):
    return hf[key] if key in hf else defaults[key]


def _activation(name) -> str:
    if name not in ACTIVATION_NAMES:
        raise ConfigError(f"activation_function {name!r} is not supported (supported: {sorted(ACTIVATION_NAMES)})")
    return ACTIVATION_NAMES[name]


def _one_id(value, key: str) -> int:
    """A special token id that ``transformers`` lets be an int or a list: we stop on exactly one ``<eos>``."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{key} must be one token id, got {value!r}")
    return value


def _same(hf: dict, defaults: dict, encoder_key: str, decoder_key: str) -> int:
    """A size our Transformer shares between encoder and decoder; refused when the model has two."""
    enc, dec = _get(hf, defaults, encoder_key), _get(hf, defaults, decoder_key)
    if enc != dec:
        raise ConfigError(
            f"{encoder_key} ({enc}) differs from {decoder_key} ({dec}); "
            "this explorer's Transformer uses one value for both"
        )
    return enc


def _marian(hf: dict, unk_id: int | None) -> ModelConfig:
    d = MARIAN_DEFAULTS
    vocab = _get(hf, d, "vocab_size")
    decoder_vocab = _get(hf, d, "decoder_vocab_size") or vocab
    if not _get(hf, d, "share_encoder_decoder_embeddings") or decoder_vocab != vocab:
        raise ConfigError(
            "this Marian model has separate source and target vocabularies (share_encoder_decoder_embeddings is "
            f"false or decoder_vocab_size {decoder_vocab} ≠ vocab_size {vocab}); the explorer's Transformer shares "
            "one vocabulary between encoder and decoder"
        )
    pad = _one_id(_get(hf, d, "pad_token_id"), "pad_token_id")
    eos = _one_id(_get(hf, d, "eos_token_id"), "eos_token_id")
    # Banned words of one token become suppressed ids; <pad> always is: it is the decoder's start token, never an
    # output (every opus-mt config bans it with bad_words_ids = [[pad]]).
    banned = {w[0] for w in _get(hf, d, "bad_words_ids") or [] if isinstance(w, list) and len(w) == 1}
    return ModelConfig(
        arch="encoder-decoder",
        vocab_size=vocab,
        d_model=_get(hf, d, "d_model"),
        n_heads=_same(hf, d, "encoder_attention_heads", "decoder_attention_heads"),
        n_encoder_layers=_get(hf, d, "encoder_layers"),
        n_decoder_layers=_get(hf, d, "decoder_layers"),
        d_ff=_same(hf, d, "encoder_ffn_dim", "decoder_ffn_dim"),
        dropout=_get(hf, d, "dropout"),
        attention_dropout=_get(hf, d, "attention_dropout"),
        activation_dropout=_get(hf, d, "activation_dropout"),
        decoder_layerdrop=_get(hf, d, "decoder_layerdrop"),
        pos_encoding="sinusoidal",
        norm_first=False,  # MarianEncoderLayer / MarianDecoderLayer are post-LN, without a final LayerNorm
        tie_embeddings=bool(_get(hf, d, "tie_word_embeddings")),
        max_len=_get(hf, d, "max_position_embeddings"),
        pad_id=pad,
        bos_id=_one_id(_get(hf, d, "decoder_start_token_id"), "decoder_start_token_id"),
        eos_id=eos,
        unk_id=MARIAN_UNK_ID if unk_id is None else unk_id,
        activation=_activation(_get(hf, d, "activation_function")),
        pos_layout="halves",
        scale_embeddings=bool(_get(hf, d, "scale_embedding")),
        logits_bias=True,
        norm_eps=1e-5,  # Marian's nn.LayerNorm default
        suppress_ids=sorted((banned | {pad}) - {eos}),
    )


def _gpt2(hf: dict, unk_id: int | None) -> ModelConfig:
    d = GPT2_DEFAULTS
    if _get(hf, d, "add_cross_attention"):
        raise ConfigError("this GPT-2 has cross-attention layers (add_cross_attention); only plain GPT-2 is supported")
    if not _get(hf, d, "scale_attn_weights") or _get(hf, d, "scale_attn_by_inverse_layer_idx"):
        raise ConfigError(
            "this GPT-2 scales its attention scores differently (scale_attn_weights false or "
            "scale_attn_by_inverse_layer_idx true); the explorer's attention divides by √d_k"
        )
    d_model = _get(hf, d, "n_embd")
    eos = _one_id(_get(hf, d, "eos_token_id"), "eos_token_id")
    bos = _get(hf, d, "bos_token_id")
    return ModelConfig(
        arch="decoder-only",
        vocab_size=_get(hf, d, "vocab_size"),
        d_model=d_model,
        n_heads=_get(hf, d, "n_head"),
        n_encoder_layers=0,
        n_decoder_layers=_get(hf, d, "n_layer"),
        d_ff=_get(hf, d, "n_inner") or 4 * d_model,
        # GPT-2's embd_pdrop and resid_pdrop are one rate here (both are 0.1 in every released GPT-2).
        dropout=_get(hf, d, "resid_pdrop"),
        attention_dropout=_get(hf, d, "attn_pdrop"),
        activation_dropout=0.0,  # GPT2MLP has no dropout inside
        pos_encoding="learned",
        norm_first=True,  # ln_1 / ln_2 before each sub-layer, ln_f at the end
        tie_embeddings=bool(_get(hf, d, "tie_word_embeddings")),
        max_len=_get(hf, d, "n_positions"),
        # GPT-2 has no padding token. <|endoftext|> (= eos) pads, as transformers users set pad_token_id = eos:
        # padding only ever goes to the right of a row, where the causal mask already hides it from every real
        # token; the decoder never masks position 0, where <|endoftext|> starts a prompt; and a prompt holds no
        # other <|endoftext|> (decoding.lm_prompt drops eos from it). No token is suppressed, or eos would be.
        pad_id=eos,
        bos_id=eos if bos is None else _one_id(bos, "bos_token_id"),
        eos_id=eos,
        unk_id=eos if unk_id is None else unk_id,
        activation=_activation(_get(hf, d, "activation_function")),
        scale_embeddings=False,  # GPT2Model adds wte(ids) + wpe(positions) unscaled
        logits_bias=False,
        norm_eps=_get(hf, d, "layer_norm_epsilon"),
    )


#: ``model_type`` → its ``config.json`` translation (one for each of :data:`model.hf.families.FAMILIES`).
TRANSLATE = {"marian": _marian, "gpt2": _gpt2}
