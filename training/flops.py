"""FLOPs per token of a Transformer, counted from its config: what the trainer's model FLOPs utilization divides by.

The trainer divides :func:`training_flops` per second by the devices' peak to log a model FLOPs utilization
(:func:`training.distributed.model_flops_utilization`).
"""

from __future__ import annotations

from model.config import ModelConfig


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
