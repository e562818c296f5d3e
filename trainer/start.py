"""Where a run starts from: a fresh model (random weights; the vocabulary given, or learned on rank 0 and sent to
the others), a warm start from a checkpoint (``--init-from``), or the run's own ``last/`` (``--resume``) with the
trainer state it saved. :class:`trainer.loop.Trainer` is set up from these."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer

from corpora.files import DataError
from model.baseline import build_model
from model.config import ModelConfig
from model.tokenizer import TextTokenizer
from training.batches import pair_sides
from training.checkpoints import load_any, read_tokenizer, warm_start
from training.config import TrainConfig
from training.distributed import Dist
from training.runs import write_config, write_train_args
from training.state import TrainerState, load_resume_state, read_state


def new_model(
    config: TrainConfig, ctx: Dist, device, sentences, phrases, words
) -> tuple[torch.nn.Module, TextTokenizer, ModelConfig]:
    """A fresh model: the ``--tokenizer`` given, else a BPE vocabulary learned on rank 0 (and sent to the others),
    then random weights. Raises ``DataError`` when ``--tokenizer`` names no readable tokenizer."""
    tok: TextTokenizer | None = None
    if ctx.is_main:
        if config.tokenizer:
            tok = read_tokenizer(config.tokenizer)
        else:
            vocab_texts = sentences if config.vocab_from == "sentences" else sentences + phrases + words
            tok = TextTokenizer.train(pair_sides(vocab_texts), vocab_size=config.vocab_size)
    if ctx.enabled:  # rank 0's vocabulary on every rank
        tok = TextTokenizer(Tokenizer.from_str(ctx.broadcast(tok.to_str() if tok is not None else None)))
    assert tok is not None, "rank 0 reads or learns the vocabulary, the other ranks receive it"
    c = config
    cfg = ModelConfig(
        arch=c.arch,
        vocab_size=tok.vocab_size,
        d_model=c.d_model,
        n_heads=c.n_heads,
        n_encoder_layers=(c.encoder_layers or c.layers) if c.arch == "encoder-decoder" else 0,
        n_decoder_layers=c.decoder_layers or c.layers,
        d_ff=c.d_ff,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        decoder_layerdrop=c.decoder_layerdrop,
        pos_encoding=c.pos_encoding,
        norm_first=c.norm_first,
        max_len=c.max_len,
    )
    return build_model(cfg, c.impl).to(device), tok, cfg  # the same on every rank; DDP broadcasts rank 0's


def model_to_train(
    config: TrainConfig, ctx: Dist, device: torch.device, given: set[str] | None, sentences, phrases, words
) -> tuple[torch.nn.Module, TextTokenizer, ModelConfig, TrainConfig]:
    """``(model, tokenizer, model config, config)``, the model in training mode: ``last/``'s (``--resume``), the
    ``--init-from`` checkpoint's (``config`` then has the options the warm start has in fact), or a new one; a
    new run also writes ``train_args.json`` and ``config.json`` into ``config.out``."""
    out = Path(config.out)
    if config.resume:
        ckpt = load_any(out / "last", config.impl, device)
        ckpt.model.train()
        return ckpt.model, ckpt.tokenizer, ckpt.config, config
    if config.init_from:
        model, tok, cfg, config = warm_start(config, device, given or frozenset())
    else:
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
        model, tok, cfg = new_model(config, ctx, device, sentences, phrases, words)
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_train_args(out, config.to_saved())
        write_config(out, cfg)
    if ctx.rank:
        torch.manual_seed(config.seed + 1_000_003 * ctx.rank)  # each rank its own dropout masks
    return model, tok, cfg, config


def initial_state(config: TrainConfig, ctx: Dist, opt: torch.optim.Optimizer) -> TrainerState:
    """A fresh trainer state, or the one ``last/`` saved (``--resume``, same number of processes), its optimizer
    moments loaded into ``opt``. Raises ``DataError`` for a run resumed with another number of processes."""
    if not config.resume:
        return TrainerState(world_size=ctx.world_size)
    last = Path(config.out) / "last"
    saved_world = read_state(last).world_size
    if saved_world != ctx.world_size:
        raise DataError(
            f"{config.out} was trained by {saved_world} process(es); resume it with the same "
            f"number (this launch has {ctx.world_size})"
        )
    return load_resume_state(last, opt, ctx.rank)
