"""The training CLI on a tiny model (in-process), the learning-rate schedule, and the translate / evaluate CLIs on
the checkpoint the tiny run produced. Resuming a run: ``test_train_resume.py``."""

from __future__ import annotations

import gc
import json
import math
import signal

import pytest
import torch
from train_helpers import TINY, read_records, run_main

from corpora.files import read_tsv
from decoding import translate
from evaluation import evaluate
from model.checkpoint import load_checkpoint
from trainer import train
from trainer.loop import Trainer
from training.batches import encode_examples
from training.schedule import factor_for_peak, noam_lr

# One worker runs this module and test_train_resume.py, so conftest's cli_runs is made once, not once per worker
pytestmark = pytest.mark.xdist_group("cli-runs")


def test_a_finished_run_gives_back_the_signal_handlers_and_its_trainer(tmp_path):
    """Called in-process, the trainer must not leave its SIGINT/SIGTERM handlers behind: they would swallow the
    caller's Ctrl-C and keep the trainer, its model and (under DDP) its process group alive until exit."""

    def live_trainers():
        gc.collect()
        # type(), not isinstance(): isinstance reads __class__, which warns on torch's deprecated module objects
        return sum(type(o) is Trainer for o in gc.get_objects())

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    alive = live_trainers()
    rc, _, err = run_main(train.main, ["--out", tmp_path / "run", "--max-steps", "2", *TINY])
    assert rc == 0, err
    assert {s: signal.getsignal(s) for s in before} == before
    assert live_trainers() == alive


def test_tiny_training_run(cli_runs):
    rc, out, err = cli_runs["straight"]
    assert rc == 0, err
    folder = cli_runs["root"] / "straight"
    assert "stopped at step 12 (max_steps)" in out
    for name in ("best", "last"):
        ckpt = load_checkpoint(folder / name)
        assert ckpt.config.d_model == 32 and ckpt.config.n_heads == 2 and ckpt.config.n_encoder_layers == 1
        assert ckpt.config.vocab_size == ckpt.tokenizer.vocab_size <= 500
    for f in ("optimizer.safetensors", "trainer_state.json"):
        assert (folder / "last" / f).is_file()
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    assert state["step"] == 12 and state["best_step"] in (6, 12) and state["tokens_seen"] > 0
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["step"] == state["best_step"] and card["valid"]["sentences"] == 10
    assert card["parameters"] == load_checkpoint(folder / "best").model.num_parameters()
    assert json.loads((folder / "train_args.json").read_text())["max_steps"] == 12

    records = read_records(folder)
    losses = [r for r in records if "loss" in r]
    assert [r["step"] for r in losses] == [3, 6, 9, 12]
    factor = factor_for_peak(1e-3, 32, 5)
    for r in losses:
        assert math.isfinite(r["loss"]) and r["loss"] > 0 and r["tokens_per_s"] > 0
        assert r["lr"] == pytest.approx(noam_lr(r["step"], 32, 5, factor), rel=1e-9)
    evals = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in evals] == [6, 12]
    assert all(math.isfinite(r["valid_loss"]) and 0 <= r["valid_chrf"] <= 100 for r in evals)
    assert records[-1] == {"step": 12, "event": "stopped", "reason": "max_steps"}


# --- learning-rate schedule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (32, 5), (256, 500)])
def test_noam_lr_peaks_at_warmup(d_model, warmup):
    lrs = [noam_lr(s, d_model, warmup) for s in range(1, 4 * warmup)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == warmup
    peak = noam_lr(warmup, d_model, warmup)
    assert noam_lr(warmup - 1, d_model, warmup) < peak > noam_lr(warmup + 1, d_model, warmup)
    # Paper eq. (3): linear warmup, then inverse square root.
    assert noam_lr(1, d_model, warmup) == pytest.approx(d_model**-0.5 * warmup**-1.5)
    assert noam_lr(4 * warmup, d_model, warmup) == pytest.approx(d_model**-0.5 * (4 * warmup) ** -0.5)
    assert noam_lr(0, d_model, warmup) == noam_lr(1, d_model, warmup)  # step 0 is treated as step 1


@pytest.mark.parametrize("peak", [1e-3, 2e-3, 7e-4])
def test_factor_for_peak_gives_requested_peak(peak):
    for d_model, warmup in ((256, 500), (32, 5), (512, 4000)):
        factor = factor_for_peak(peak, d_model, warmup)
        assert noam_lr(warmup, d_model, warmup, factor) == pytest.approx(peak, rel=1e-12, abs=0)
        assert max(noam_lr(s, d_model, warmup, factor) for s in range(1, 3 * warmup)) == pytest.approx(peak, rel=1e-12)


# --- translate / evaluate CLIs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def best(cli_runs):
    assert cli_runs["straight"][0] == 0
    return cli_runs["root"] / "straight" / "best"


def test_translate_text(best):
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "The house is big."])
    assert rc == 0, err
    assert out.endswith("\n") and out.count("\n") == 1  # exactly one line, whatever the tiny model says


def test_translate_json(best):
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--json", "The house is big."])
    assert rc == 0, err
    result = json.loads(out)
    n_src = len(result["src_ids"])
    n_tgt = len(result["tgt_ids"])
    assert result["source"] == "The house is big." and result["src_tokens"][-1] == "<eos>"
    assert len(result["token_probs"]) == n_tgt > 0
    shapes = result["attention_shapes"]
    assert shapes["encoder"] == [1, 2, n_src, n_src]
    assert shapes["cross"] == [1, 2, n_tgt + 1, n_src]  # <bos> + generated tokens as decoder inputs
    assert shapes["decoder"] == [1, 2, n_tgt + 1, n_tgt + 1]


def test_translate_input_file(best, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("The house is big.\nGood morning.\nWhere is the station?\n", encoding="utf-8")
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--input", path])
    assert rc == 0, err
    assert len(out.splitlines()) == 3


def test_translate_input_file_with_beam_search_matches_sentence_by_sentence(best, tmp_path):
    lines = ["The house is big.", "", "Good morning.", "Where is the station?"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    beam = ["--strategy", "beam", "--beam", "3", "--alpha", "1.0"]
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--input", path, *beam])
    assert rc == 0, err
    got = out.split("\n")[:-1]
    assert len(got) == 4 and got[1] == ""
    for line, text in zip(lines, got, strict=True):
        if line:  # the batched search gives what the one-sentence search gives
            assert text == run_main(translate.main, ["--checkpoint", best, line, *beam])[1].rstrip("\n")
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "--input", path, "--strategy", "beam", "--beam", "0"])
    assert rc == 2 and "beam size" in err


def test_translate_errors(best, tmp_path):
    rc, out, err = run_main(translate.main, ["--checkpoint", tmp_path / "no-such-checkpoint", "Hello."])
    assert rc == 2 and out == ""
    assert "error:" in err and "Checkpoint folder not found" in err
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "   "])
    assert rc == 2 and "empty" in err
    rc, _, err = run_main(translate.main, ["--checkpoint", best, "--input", tmp_path / "missing.txt"])
    assert rc == 2 and "cannot read" in err
    with pytest.raises(SystemExit) as exc:  # neither a sentence nor --input
        run_main(translate.main, ["--checkpoint", best])
    assert exc.value.code == 2


def test_evaluate_cli(best, tmp_path):
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "5"])
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["sentences"] == 5 and 0 <= result["bleu"] <= 100 and 0 <= result["chrf"] <= 100
    tsv = tmp_path / "mine.tsv"
    tsv.write_text("Good morning.\tGuten Morgen.\nThe house is big.\tDas Haus ist groß.\n", encoding="utf-8")
    rc, out, _ = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tsv, "--show", "1"])
    assert rc == 0 and out.startswith("SRC Good morning.\nREF Guten Morgen.\nOUT ")
    assert json.loads(out.strip().splitlines()[-1])["sentences"] == 2
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tsv, "--loss"])
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    ckpt = load_checkpoint(best)
    expected = evaluate.validation_loss(
        ckpt.model, encode_examples(ckpt.tokenizer, read_tsv(tsv), ckpt.config), 4000, torch.device("cpu"), "fp32"
    )
    assert result["loss"] == pytest.approx(expected, abs=1e-4)  # the references' loss, no label smoothing
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]), rel=1e-3)


def test_evaluate_cli_threads(best, monkeypatch):
    """--threads 1 is what an evaluation beside a training run should use; a negative count is refused by argparse."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)  # the suite's other tests keep their threads
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "2", "--threads", "1"])
    assert rc == 0, err
    assert calls == [1]
    assert json.loads(out.strip().splitlines()[-1])["sentences"] == 2
    rc, _, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "2"])
    assert rc == 0 and calls == [1]  # 0, the default, leaves torch's own choice alone
    with pytest.raises(SystemExit) as exc:
        run_main(evaluate.main, ["--checkpoint", best, "--threads", "-1"])
    assert exc.value.code == 2


def test_evaluate_cli_beam_search(best):
    rc, out, err = run_main(
        evaluate.main, ["--checkpoint", best, "--limit", "6", "--strategy", "beam", "--beam", "2", "--alpha", "1.0"]
    )
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["strategy"] == "beam" and result["beam"] == 2 and result["alpha"] == 1.0
    assert result["sentences"] == 6 and 0 <= result["chrf"] <= 100
    scores = {}
    for strategy in (["--strategy", "greedy"], ["--strategy", "beam", "--beam", "1"]):
        rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--limit", "6", *strategy])
        assert rc == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        scores[strategy[1]] = (result["bleu"], result["chrf"])
    assert scores["greedy"] == scores["beam"]  # beam 1 is greedy
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--strategy", "beam", "--beam", "17"])
    assert rc == 2 and out == "" and "beam size" in err


def test_evaluate_errors(best, tmp_path):
    rc, out, err = run_main(evaluate.main, ["--checkpoint", tmp_path / "nope"])
    assert rc == 2 and out == "" and "Checkpoint folder not found" in err
    rc, _, err = run_main(evaluate.main, ["--checkpoint", best, "--tsv", tmp_path / "missing.tsv"])
    assert rc == 2 and "No such data file" in err


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "none"])
def test_every_positional_encoding_trains_and_loads(tmp_path, pos):
    rc, _, err = run_main(train.main, ["--out", tmp_path / pos, "--max-steps", "3", "--pos-encoding", pos, *TINY])
    assert rc == 0, err
    ckpt = load_checkpoint(tmp_path / pos / "best")
    assert ckpt.config.pos_encoding == pos
