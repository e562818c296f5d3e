"""Averaging checkpoints (the mean of their weights; lanes with other dropout), the Training page's form passing the
recipe to the trainer, and the A/B table of recipe variants."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import run_main

from model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tools import average
from trainer.options import check_args, parse_config


# --- averaging ------------------------------------------------------------------------------------------------------
def test_the_average_of_checkpoints_is_the_mean_of_their_weights(make_model, tokenizer, tmp_path):
    folders = []
    for seed in range(3):
        folders.append(save_checkpoint(tmp_path / f"c{seed}", make_model(seed=seed), tokenizer, {"step": seed}))
    rc, out, err = run_main(average.main, [tmp_path / "avg", *folders])
    assert rc == 0, err
    avg = load_checkpoint(tmp_path / "avg")  # loads like any checkpoint
    inputs = [load_checkpoint(f).model.state_dict() for f in folders]
    for name, t in avg.model.state_dict().items():
        assert torch.allclose(t, sum(s[name] for s in inputs) / 3, atol=1e-6), name
    assert json.loads((tmp_path / "avg" / "card.json").read_text())["averaged"]["count"] == 3
    other = save_checkpoint(tmp_path / "other", make_model(d_ff=48), tokenizer)
    with pytest.raises(CheckpointError, match="another config"):
        average.average_checkpoints([folders[0], other], tmp_path / "bad")
    rc, _, err = run_main(average.main, [tmp_path / "bad2", tmp_path / "missing"])
    assert rc == 2 and "not found" in err


def test_lanes_with_other_dropout_average_and_the_card_says_so(make_model, tokenizer, tmp_path):
    """Dropout acts only in training: warm-start lanes that changed it are still one model to average."""
    a = save_checkpoint(tmp_path / "a", make_model(seed=0, dropout=0.1), tokenizer)
    b = save_checkpoint(tmp_path / "b", make_model(seed=1, dropout=0.3, attention_dropout=0.3), tokenizer)
    out = average.average_checkpoints([a, b], tmp_path / "avg")
    avg = load_checkpoint(out)
    assert avg.config.dropout == 0.1  # the first input's
    sa, sb = load_checkpoint(a).model.state_dict(), load_checkpoint(b).model.state_dict()
    for name, t in avg.model.state_dict().items():
        assert torch.allclose(t, (sa[name] + sb[name]) / 2, atol=1e-6), name
    knobs = json.loads((out / "card.json").read_text())["averaged"]["training_knobs"]
    assert knobs["dropout"] == [0.1, 0.3] and "decoder_layerdrop" not in knobs


# --- the Training page's form ---------------------------------------------------------------------------------------
def test_the_form_passes_the_recipe_to_the_trainer(tmp_path, monkeypatch):
    """The preset that carries the shipped translator on trains it on what it was trained on (the real-pairs
    mixture, not the Ding sentences of an earlier lineage), warm from its weights, and ends in a cooldown."""
    from corpora import parallel
    from launching import form as launch_form

    monkeypatch.setattr(parallel, "PREPARED", tmp_path)  # the form checks that each corpus is prepared
    for corpus in parallel.PARALLEL:
        parallel.prepared_path(corpus, "train", tmp_path).touch()
    form = launch_form.preset_form("continue the shipped translator (hours)")
    assert launch_form.validate_form(form) == []
    cmd = launch_form.build_command(form, "runs/x")
    flags = dict(zip(cmd, cmd[1:], strict=False))
    assert flags["--init-from"] == "checkpoints/en-de" and flags["--dict-share"] == "0.05"
    assert flags["--mix"] == "tatoeba=1,multi30k=4,bcontrast=1,ding=4" and flags["--cooldown-steps"] == "3000"
    args, _ = parse_config(cmd[3:])  # the trainer understands every flag the form writes
    assert args.init_from == "checkpoints/en-de" and args.select == "chrf" and args.keep_last == 10
    check_args(args)
    plain = launch_form.build_command(launch_form.preset_form("base-like"), "runs/y")
    assert not {"--init-from", "--dict-share", "--bpe-dropout", "--select"} & set(plain)  # defaults stay unsaid
    bad = {**form, "bpe_dropout": 1.5, "dict_share": -0.1, "keep_last": -1, "init_from": "no/such/folder"}
    errors = " ".join(launch_form.validate_form(bad))
    for word in ("bpe_dropout", "dict_share", "keep_last", "no/such/folder"):
        assert word in errors
    assert "checkpoints/en-de" in launch_form.warm_start_choices()


# --- the A/B table --------------------------------------------------------------------------------------------------
def test_every_ab_variant_is_a_valid_training_command(tmp_path):
    from benchmarks import recipe

    for name in recipe.VARIANTS:
        cmd = recipe.command(name, tmp_path / f"ab-{name}", 1.0, 10, 1)
        args = parse_config(cmd[3:])[0]
        assert args.max_minutes == 1.0 and args.seed == 1
    assert parse_config(recipe.command("vocab-4k-sentences", tmp_path, 1, 1, 1)[3:])[0].vocab_from == "sentences"
    for name, knob in recipe.WARM_VARIANTS.items():  # warm starts: the checkpoint's model, the leg recipe, one knob
        cmd = recipe.command(name, tmp_path / f"warm-{name}", 1.0, 10, 1, warm="checkpoints/en-de")
        args = parse_config(cmd[3:])[0]
        assert args.init_from == "checkpoints/en-de" and args.dict_share == (0.5 if name == "dict-share-0.5" else 0.25)
        assert args.eval_sentences == 0 and args.max_steps == 10 and args.seed == 1
        assert not {"--d-model", "--layers"} & set(cmd) and set(knob) <= set(cmd)
        assert len([t for t in cmd if t.startswith("--")]) == len({t for t in cmd if t.startswith("--")})  # once each
    depth = recipe.command("depth-5+5", tmp_path, 1, 1, 1)
    assert depth.count("--layers") == 1 and parse_config(depth[3:])[0].layers == 5
    for name, knob in recipe.REAL_VARIANTS.items():  # from scratch on the real-pairs mixture, one knob each
        cmd = recipe.command(name, tmp_path / f"real-{name}", 1.0, 10, 1, real=True)
        args = parse_config(cmd[3:])[0]
        check_args(args)
        assert args.mix == "tatoeba=1,multi30k=2,bcontrast=1,ding=1" and args.max_steps == 10 and set(knob) <= set(cmd)
        assert len([t for t in cmd if t.startswith("--")]) == len({t for t in cmd if t.startswith("--")})
    wide = parse_config(recipe.command("width-512", tmp_path, 1, 1, 1, real=True)[3:])[0]
    assert (wide.d_model, wide.d_ff, wide.n_heads, wide.layers) == (512, 2048, 8, 3)


def test_the_ab_table_reads_run_folders(tmp_path, capsys):
    from benchmarks import recipe

    for name, chrf in (("base", 20.0), ("dict-share-0.25", 21.5)):
        run = tmp_path / f"ab-{name}"
        run.mkdir()
        (run / "train_args.json").write_text("{}")
        (run / "metrics.jsonl").write_text(
            "\n".join(
                json.dumps(r)
                for r in [
                    {"step": 500, "loss": 4.0, "tokens_seen": 700_000, "time_s": 300},
                    {"step": 500, "valid_loss": 4.2, "valid_chrf": chrf - 1, "valid_bleu": 2.0, "time_s": 320},
                    {"step": 1000, "loss": 3.5, "tokens_seen": 1_400_000, "time_s": 600},
                    {"step": 1000, "valid_loss": 3.9, "valid_chrf": chrf, "valid_bleu": 3.0, "time_s": 630},
                ]
            )
        )
    (tmp_path / "ab-broken").mkdir()  # no files: left out, no traceback
    assert recipe.main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| dict-share-0.25" in out and "21.50 (+1.50)" in out and "1.40M" in out and "10.5" in out
    assert recipe.main(["--root", str(tmp_path), "--at-step", "500"]) == 0  # the same step budget for every run
    out = capsys.readouterr().out
    assert "20.50 (+1.50)" in out and "0.70M" in out and "1.40M" not in out and "4.200" in out
    assert recipe.main(["--only", "nonsense"]) == 2
    assert recipe.main(["--warm", "checkpoints/en-de", "--only", "vocab-4k-sentences"]) == 2  # not a warm knob
    (tmp_path / "ab-base").rename(tmp_path / "warm-base")
    assert recipe.main(["--root", str(tmp_path), "--warm", "checkpoints/en-de"]) == 0
    out = capsys.readouterr().out
    assert "| base" in out and "dict-share" not in out  # only the warm-* folders
