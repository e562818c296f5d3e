"""The low-resource recipe's knobs in the trainer: word dropout, BPE-dropout, LayerDrop, activation
dropout, AdamW, separate depths, the dictionary share, bf16 autocast, warm starts, selection by chrF with patience,
kept evaluations and checkpoint averaging. Tiny models and tiny runs only."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import run_main

from model.checkpoint import load_checkpoint, save_checkpoint
from model.config import ConfigError, ModelConfig
from trainer import train
from trainer.best import best_card
from trainer.options import parse_config
from training.batches import EpochPlan, Example, loss_fn, with_bpe_dropout, word_dropout
from training.checkpoints import warm_start
from training.config import TrainConfig
from training.device import (
    AUTO_PRECISION_ENV,
    autocast,
    cpu_has_native_bf16,
    default_threads,
    hardware,
    resolve_precision,
)
from training.schedule import factor_for_peak, learning_rate, make_optimizer
from training.state import TrainerState

# One worker runs every test here, so the module's recipe runs are made once, not once per worker
pytestmark = pytest.mark.xdist_group("recipe-runs")

TINY = [
    "--limit-train",
    "200",
    "--eval-every",
    "4",
    "--eval-sentences",
    "8",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--d-ff",
    "64",
    "--vocab-size",
    "400",
    "--warmup",
    "4",
    "--log-every",
    "2",
    "--no-progress",
    "--threads",
    "1",
    "--no-snapshots",
    "--batch-tokens",
    "600",
]


# --- word dropout ---------------------------------------------------------------------------------------------
def test_word_dropout_never_touches_padding_or_sentence_markers():
    pad, bos, eos, unk = 0, 1, 2, 3
    ids = torch.tensor([[bos, 10, 11, 12, eos, pad, pad], [bos, 20, 21, 22, 23, 24, eos]])
    out = word_dropout(ids, 1.0 - 1e-9, unk, (pad, bos, eos))  # every droppable token goes
    assert torch.equal(out[ids == pad], ids[ids == pad])
    assert torch.equal(out[ids == bos], ids[ids == bos]) and torch.equal(out[ids == eos], ids[ids == eos])
    assert (out[(ids > 3)] == unk).all()
    assert word_dropout(ids, 0.0, unk, (pad,)) is ids
    torch.manual_seed(0)
    big = torch.randint(4, 500, (200, 50))
    rate = (word_dropout(big, 0.1, unk, (pad,)) == unk).float().mean().item()
    assert 0.08 < rate < 0.12


# --- config knobs ---------------------------------------------------------------------------------------------
def test_activation_dropout_defaults_to_dropout_and_old_configs_still_load(make_model):
    cfg = ModelConfig(dropout=0.2)
    assert cfg.activation_dropout is None and cfg.ffn_dropout == 0.2
    assert ModelConfig(dropout=0.2, activation_dropout=0.3).ffn_dropout == 0.3
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("activation_dropout", "decoder_layerdrop")}
    assert ModelConfig.from_dict(old) == cfg  # a config.json from before these fields
    assert ModelConfig.from_dict(ModelConfig(activation_dropout=0.3).to_dict()).activation_dropout == 0.3
    for bad in ({"activation_dropout": 1.0}, {"decoder_layerdrop": -0.1}, {"activation_dropout": "x"}):
        with pytest.raises(ConfigError):
            ModelConfig(**bad)
    model = make_model(activation_dropout=0.3, dropout=0.1)
    assert model.encoder_layers[0].ffn.dropout.p == 0.3 and model.encoder_layers[0].res_ffn.dropout.p == 0.1


def test_layerdrop_skips_decoder_layers_in_training_only(make_model, encode_src, encode_tgt):
    model = make_model(decoder_layerdrop=0.5, dropout=0.0, attention_dropout=0.0)
    src, tgt = torch.tensor([encode_src("The cat sleeps.")]), torch.tensor([encode_tgt("Die Katze schläft.")])
    model.eval()
    reference = model(src, tgt)
    torch.manual_seed(3)
    assert model.layers_to_drop(True) == set()  # eval mode: never
    model.train()
    draws = [frozenset(model.layers_to_drop(True)) for _ in range(200)]
    assert set().union(*draws) == set(range(len(model.decoder_layers)))  # each layer is skipped sometimes
    assert frozenset() in draws  # and sometimes none
    assert model.layers_to_drop(False) == set()  # never with a cache or a trace
    differs = any(not torch.allclose(model(src, tgt), reference) for _ in range(10))
    assert differs
    model.eval()
    assert torch.allclose(model(src, tgt), reference)


def test_weight_decay_uses_adamw_on_matrices_only(make_model):
    model = make_model()
    assert type(make_optimizer(model, 0.0)) is torch.optim.Adam
    opt = make_optimizer(model, 0.01)
    assert isinstance(opt, torch.optim.AdamW)
    decay, rest = opt.param_groups
    assert decay["weight_decay"] == 0.01 and rest["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in rest["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))


# --- precision and threads -----------------------------------------------------------------------------------
def test_native_bf16_is_read_from_the_cpu_flags():
    assert cpu_has_native_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16("flags : sse amx_bf16 amx_tile\n")
    assert not cpu_has_native_bf16("flags\t: fpu avx avx2 fma\n")
    assert not cpu_has_native_bf16("")
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) == "fp32" and resolve_precision("bf16", cpu) == "bf16"


def test_auto_precision_follows_the_cpu_unless_the_environment_forces_it(monkeypatch):
    """EXPLORER_AUTO_PRECISION lets one machine run the suite as the other kind of CPU would."""
    cpu = torch.device("cpu")
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)
    assert resolve_precision("auto", cpu) == ("bf16" if cpu_has_native_bf16() else "fp32")
    for forced in ("bf16", "fp32"):
        monkeypatch.setenv(AUTO_PRECISION_ENV, forced)
        assert resolve_precision("auto", cpu) == forced
        assert resolve_precision("fp32", cpu) == "fp32"  # an explicit precision is never overridden
    monkeypatch.setenv(AUTO_PRECISION_ENV, "native")
    assert resolve_precision("auto", cpu) == ("bf16" if cpu_has_native_bf16() else "fp32")
    monkeypatch.setenv(AUTO_PRECISION_ENV, "fp16")
    with pytest.raises(ValueError, match="bf16, fp32 or native"):
        resolve_precision("auto", cpu)


def test_bf16_and_fp32_give_the_same_loss_on_a_tiny_batch(make_model, encode_src, encode_tgt):
    model = make_model(dropout=0.0, attention_dropout=0.0)
    model.eval()
    src = torch.tensor([encode_src("The house is big.")])
    tgt = torch.tensor([encode_tgt("Das Haus ist groß.")])
    losses = {}
    for precision in ("fp32", "bf16"):
        with autocast(torch.device("cpu"), precision):
            logits = model(src, tgt[:, :-1])
        assert logits.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        losses[precision] = loss_fn(logits, tgt[:, 1:], 0, 0.1).item()
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=2e-2)


def test_default_threads():
    assert default_threads(1, {"OMP_NUM_THREADS": "3"}) == 3
    assert default_threads(64, {}) == 1
    assert default_threads(1, {}) >= 1


def test_the_card_names_the_cpu_threads_in_plain_english():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert hardware().endswith(" 1 thread)") or not hardware().startswith("CPU")
        torch.set_num_threads(2)
        assert hardware().endswith(" 2 threads)") or not hardware().startswith("CPU")
    finally:
        torch.set_num_threads(before)


# --- the dictionary share -----------------------------------------------------------------------------------------
def _examples(n, length, offset=0):
    return [Example(list(range(4, 4 + length)), [1, *range(4 + offset, 4 + offset + length), 2]) for _ in range(n)]


def test_dict_share_mixes_every_step_in_the_given_share():
    sentences, phrases, words = _examples(300, 12), _examples(2000, 3, 1), _examples(1000, 1, 2)
    config = TrainConfig(seed=1, batch_tokens=600, dict_share=0.25)
    plan = EpochPlan(sentences, phrases, words, config, lambda e: e)
    examples, steps = plan.steps(0)
    assert all(len(step) == 2 for step in steps[:-1])  # sentences + dictionary in (nearly) every step
    sent_ids = {i for step in steps for i in step[0]}
    assert sent_ids == set(range(300))  # one epoch = one pass over the sentences
    tokens = [[sum(len(examples[i].src) + len(examples[i].tgt) for i in mb) for mb in step] for step in steps]
    share = sum(t[1] for t in tokens if len(t) == 2) / sum(sum(t) for t in tokens)
    assert 0.15 < share < 0.35
    assert all(len(examples[i].src) <= 3 for step in steps for mb in step[1:] for i in mb)  # no sentence in there
    again, steps_again = plan.steps(0)
    assert steps_again == steps and [e.src for e in again] == [e.src for e in examples]  # deterministic per epoch
    assert plan.steps(1)[1] != steps
    plan.config = replace(config, dict_share=0.0)
    _, plain = plan.steps(0)
    assert all(len(step) == 1 for step in plain)


def test_dict_share_reads_the_dictionary_beside_a_sentence_tsv(tmp_path):
    """A real-pairs TSV plus ``--dict-share``: the dictionary's phrases and words are read too (the share would
    otherwise mix nothing in); the per-epoch counts alone still leave a TSV run without them."""
    from corpora.files import Pair, write_tsv_gz
    from training.data import load_data

    for name, pair in (
        ("pairs", Pair("I like tea.", "Ich mag Tee.")),
        ("valid", Pair("Tea.", "Tee.")),
        ("phrases", Pair("green tea", "grüner Tee")),
        ("words", Pair("blackberries", "Brombeeren")),
    ):
        write_tsv_gz(tmp_path / f"{name}.tsv.gz", [pair])
    config, _ = parse_config(
        [
            "--out",
            "x",
            "--data-dir",
            str(tmp_path),
            "--train-tsv",
            str(tmp_path / "pairs.tsv.gz"),
            "--dict-share",
            "0.05",
        ]
    )
    sentences, phrases, words, _ = load_data(config)
    assert [p.src for p in sentences] == ["I like tea."]
    assert [p.tgt for p in phrases] == ["grüner Tee"] and [p.tgt for p in words] == ["Brombeeren"]
    assert load_data(replace(config, dict_share=0.0, phrases_per_epoch=100, words_per_epoch=100))[1:3] == ([], [])


# --- BPE-dropout -----------------------------------------------------------------------------------------------
def test_bpe_dropout_works_on_a_copy(tokenizer):
    noisy = with_bpe_dropout(tokenizer, 0.5)
    assert noisy is not tokenizer and tokenizer.backend.model.dropout is None
    assert with_bpe_dropout(tokenizer, 0.0) is tokenizer
    text = "The weather is nice. The street is long."
    assert len({tuple(noisy.encode(text).tokens) for _ in range(20)}) > 1
    assert len({tuple(tokenizer.encode(text).tokens) for _ in range(5)}) == 1


# --- whole runs ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recipe_runs(tmp_path_factory):
    """A tiny run with every knob on, then a warm start from its best checkpoint."""
    root = tmp_path_factory.mktemp("recipe")
    knobs = [
        "--dict-share",
        "0.3",
        "--bpe-dropout",
        "0.1",
        "--src-word-dropout",
        "0.1",
        "--tgt-word-dropout",
        "0.1",
        "--decoder-layerdrop",
        "0.2",
        "--activation-dropout",
        "0.3",
        "--weight-decay",
        "0.01",
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "1",
        "--vocab-from",
        "sentences",
        "--keep-last",
        "2",
        "--precision",
        "fp32",
    ]
    full = run_main(train.main, ["--out", root / "full", "--max-steps", "12", *TINY, *knobs])
    warm = run_main(
        train.main,
        [
            "--out",
            root / "warm",
            "--init-from",
            root / "full" / "best",
            "--max-steps",
            "4",
            "--peak-lr",
            "1e-3",
            "--dropout",
            "0.05",
            *TINY,
        ],
    )
    return {"root": root, "full": full, "warm": warm}


def test_a_run_with_every_knob(recipe_runs):
    rc, out, err = recipe_runs["full"]
    assert rc == 0, err
    folder = recipe_runs["root"] / "full"
    best = load_checkpoint(folder / "best")
    cfg = best.config
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers) == (2, 1)
    assert cfg.activation_dropout == 0.3 and cfg.decoder_layerdrop == 0.2
    # BPE-dropout never reaches a saved tokenizer.
    for name in ("best", "last", "evals/step-12"):
        saved = json.loads((folder / name / "tokenizer.json").read_text())
        assert saved["model"]["dropout"] is None, name
    # --keep-last 2 keeps the last two evaluations (steps 8 and 12 of 4, 8, 12).
    assert sorted(p.name for p in (folder / "evals").iterdir()) == ["step-12", "step-8"]
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["selected_by"].startswith("valid chrf") and card["precision"] == "fp32"
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    evals = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    chrfs = {r["step"]: r["valid_chrf"] for r in evals if "valid_chrf" in r}
    assert state["best_step"] == max(chrfs, key=lambda s: (chrfs[s], -s))  # the first of the best chrF
    assert isinstance(load_file(str(folder / "last" / "optimizer.safetensors")), dict)


def test_a_warm_start_continues_from_the_checkpoint(recipe_runs):
    rc, out, err = recipe_runs["warm"]
    assert rc == 0, err
    src, folder = recipe_runs["root"] / "full" / "best", recipe_runs["root"] / "warm"
    src_card = json.loads((src / "card.json").read_text())
    saved = json.loads((folder / "train_args.json").read_text())
    assert saved["lr_step_offset"] == src_card["step"]  # the schedule goes on where the checkpoint was
    assert saved["dropout"] == 0.05 and saved["encoder_layers"] == 2  # typed knob kept, architecture from the ckpt
    cfg = load_checkpoint(folder / "last").config
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.dropout) == (2, 1, 0.05)
    assert load_checkpoint(folder / "last").tokenizer.to_str() == load_checkpoint(src).tokenizer.to_str()
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in records if "lr" in r]
    config = TrainConfig(warmup=4, lr_step_offset=src_card["step"], rewarmup=200)
    factor = factor_for_peak(1e-3, 32, 4)
    assert lrs == [pytest.approx(learning_rate(s, 32, config, factor)) for s in (2, 4)]
    assert lrs[0] < lrs[1]  # re-warming up
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["init_from"]["tokens_seen"] == src_card["tokens_seen"]
    assert card["total"]["tokens_seen"] == src_card["tokens_seen"] + card["tokens_seen"]


def test_a_warm_start_continues_the_schedule_of_a_chain_of_warm_starts(make_model, tokenizer, tmp_path):
    """``--lr-step-offset`` defaults to where the checkpoint left the schedule: its step plus the offset its own run
    started at (``recipe_extra.lr_step_offset`` of a warm-started run's card), not its step alone, which restarted
    the decay too early on the second warm start."""
    cpu = torch.device("cpu")
    chained = save_checkpoint(
        tmp_path / "warm", make_model(), tokenizer, {"step": 4, "recipe_extra": {"lr_step_offset": 12, "rewarmup": 200}}
    )
    config = TrainConfig(out=str(tmp_path / "next"), init_from=str(chained))
    *_, warm = warm_start(config, cpu)
    assert warm.lr_step_offset == 16 and warm.init_card["step"] == 4
    assert config.lr_step_offset is None and config.init_card is None  # the options as given are left as they were
    first = save_checkpoint(tmp_path / "first", make_model(), tokenizer, {"step": 7})  # trained from scratch
    *_, warm = warm_start(replace(config, init_from=str(first)), cpu)
    assert warm.lr_step_offset == 7
    *_, warm = warm_start(replace(config, lr_step_offset=3), cpu)
    assert warm.lr_step_offset == 3  # a typed offset wins


def test_a_warm_start_carries_the_lineage_legs_into_its_card(make_model, tokenizer, tmp_path):
    """The shipped card's ``legs`` (scores after each earlier leg, drawn on the Training page) pass to the next
    leg's card, and are not duplicated inside its ``init_from``."""
    legs = [{"leg": "leg 1", "train_minutes": 10.0, "tokens_seen": 1000, "valid_chrf": 20.0, "shipped": True}]
    start = save_checkpoint(tmp_path / "start", make_model(), tokenizer, {"step": 7, "legs": legs})
    model, _, _, config = warm_start(TrainConfig(out=str(tmp_path / "next"), init_from=str(start)), torch.device("cpu"))
    state = TrainerState(step=3, tokens_seen=50)
    card = best_card(model, config, torch.device("cpu"), state, {"chrf": 21.0}, 60.0, 1, "valid chrf")
    assert card["legs"] == legs and "legs" not in card["init_from"]
    assert card["total"]["tokens_seen"] == 50 and card["init_from"]["checkpoint"] == str(start)
    plain = save_checkpoint(tmp_path / "plain", make_model(), tokenizer, {"step": 7})
    model, _, _, config = warm_start(
        TrainConfig(out=str(tmp_path / "next2"), init_from=str(plain)), torch.device("cpu")
    )
    assert "legs" not in best_card(model, config, torch.device("cpu"), state, {}, 60.0, 1, "valid chrf")


def test_init_from_a_missing_checkpoint_is_a_clear_error(tmp_path):
    rc, _, err = run_main(train.main, ["--out", tmp_path / "x", "--init-from", tmp_path / "nowhere", *TINY])
    assert rc == 2 and "--init-from" in err and "not found" in err


def test_patience_stops_a_run_that_no_longer_improves(tmp_path):
    rc, out, err = run_main(
        train.main,
        ["--out", tmp_path / "p", "--max-steps", "400", "--select", "loss", "--patience", "1", "--peak-lr", "0", *TINY],
    )
    assert rc == 0, err
    assert "(patience)" in out  # a learning rate of 0 cannot improve on the first evaluation
    status = json.loads((tmp_path / "p" / "status.json").read_text())
    assert status["state"] == "finished" and status["reason"] == "patience" and status["step"] < 400
