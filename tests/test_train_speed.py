"""The trainer's speed options compute what the plain step computes (fused Adam, lengths padded to a multiple, the
compiled step, which meets batches of every shape with one graph), and the throughput probe on a tiny model."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import TINY, run_main

from trainer import probe
from trainer.loop import make_trainer
from trainer.options import parse_config
from training.batches import Example, padded_shape
from training.distributed import Dist

# Dropout off: its masks are drawn per element, so a padded batch (more elements) or a compiled step (its own
# random stream) would draw other ones, and the losses would differ for that reason alone.
EXACT = [*TINY, "--dropout", "0", "--device", "cpu", "--precision", "fp32"]


def trainer_of(tmp_path, *extra):
    config, given = parse_config(["--out", str(tmp_path), *EXACT, *extra])
    return make_trainer(config, Dist(), torch.device("cpu"), given)


def losses(tmp_path, *extra, steps: int = 5) -> list[float]:
    """The losses of the first ``steps`` steps (learning rate 1e-3, so that the updates show in them)."""
    trainer = trainer_of(tmp_path, *extra)
    it = probe.endless_steps(trainer)
    return [float(probe.take_step(trainer, *next(it), lr=1e-3)[2]) for _ in range(steps)]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return losses(tmp_path_factory.mktemp("plain"))


@pytest.mark.parametrize("extra", [[], ["--weight-decay", "0.01"]], ids=["adam", "adamw"])
def test_the_fused_optimizer_takes_the_same_steps(tmp_path, extra):
    base = losses(tmp_path / "a", *extra)
    fused = losses(tmp_path / "b", *extra, "--fused-optimizer")
    assert trainer_of(tmp_path / "c", *extra, "--fused-optimizer").opt.defaults["fused"]
    assert fused == pytest.approx(base, rel=1e-5)
    assert base[-1] < base[0]  # the steps did learn: equal losses are not equally stuck ones


def test_padding_to_a_multiple_repeats_shapes_and_changes_no_loss(tmp_path, plain):
    # the same sums in other blockings: equal to float rounding, which Adam's division carries into the next loss
    assert losses(tmp_path / "p", "--pad-multiple", "8") == pytest.approx(plain, rel=1e-4)
    trainer = trainer_of(tmp_path / "q")
    plain_shapes = probe.shapes_per_epoch(trainer)
    trainer.retune(pad_multiple=8)
    padded = probe.shapes_per_epoch(trainer)
    assert padded["lengths"] < plain_shapes["lengths"] <= plain_shapes["shapes"] <= plain_shapes["steps"]


def test_padded_lengths_are_multiples_that_never_pass_the_positions():
    chosen = [Example([5] * 9, [1] + [6] * 12 + [2]), Example([5] * 3, [1, 6, 2])]
    assert padded_shape(chosen) == (2, 9, 14)
    assert padded_shape(chosen, 8) == (2, 16, 17)  # the decoder reads tgt_len − 1 = 16 positions
    assert padded_shape(chosen, 64, max_len=20) == (2, 20, 20)  # 20 source and 19 decoder positions at most
    assert padded_shape([Example([], [1, 6, 2])], 8) == (1, 0, 9)  # a language model's empty source stays empty


def test_the_compiled_step_meets_every_shape_with_one_graph_and_the_same_losses(tmp_path, plain, monkeypatch):
    from torch._dynamo.utils import counters

    # What this checks is ours: the step traces into one graph with symbolic sizes (no recompile per batch shape,
    # no graph break) and AOT autograd's forward and backward give the eager losses. Inductor's C++ code generation
    # of that graph is PyTorch's, and took 60-90 s of the suite's two cores.
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real_compile(model, backend="aot_eager", **kw))
    torch._dynamo.reset()
    counters.clear()
    trainer = trainer_of(tmp_path, "--compile")
    assert probe.shapes_per_epoch(trainer)["shapes"] > 3  # the steps below meet several shapes
    it = probe.endless_steps(trainer)
    compiled = [float(probe.take_step(trainer, *next(it), lr=1e-3)[2]) for _ in range(len(plain))]
    assert counters["stats"]["unique_graphs"] == 1
    assert compiled == pytest.approx(plain, rel=1e-4)


def test_variants_become_trainer_flags_and_the_fastest_keeps_the_batch():
    assert probe.variant_flags("base", 24000) == []
    assert probe.variant_flags("compile+fused+pad64+batch2", 24000) == [
        "--fused-optimizer",
        "--compile",
        "--pad-multiple",
        "64",
        "--batch-tokens",
        "48000",
    ]
    with pytest.raises(ValueError, match="unknown variant part 'fast'"):
        probe.variant_changes("fused+fast", 24000)
    rows = [
        {"variant": "base", "batch_tokens": 10, "tokens_per_s": 1.0},
        {"variant": "fused", "batch_tokens": 10, "tokens_per_s": 2.0},
        {"variant": "batch2", "batch_tokens": 20, "tokens_per_s": 3.0},
        {"variant": "compile", "error": "x"},
    ]
    assert probe.fastest(rows) == "fused" and probe.fastest(rows, same_batch=False) == "batch2"
    assert probe.fastest([{"variant": "base", "error": "x"}]) == "base"


def test_the_probe_times_each_variant_reports_a_failing_one_and_profiles(tmp_path, monkeypatch):
    real = probe.shapes_per_epoch

    def failing_when_fused(trainer):
        if trainer.config.fused_optimizer:
            raise RuntimeError("no fused kernel here\nsecond line")
        return real(trainer)

    monkeypatch.setattr(probe, "shapes_per_epoch", failing_when_fused)
    rc, out, err = run_main(
        probe.main,
        [
            "--variants",
            "base,fused,pad8,batch2",
            "--seconds",
            "0.3",
            "--profile",
            "--report",
            tmp_path / "report",
            "--",
            "--out",
            tmp_path / "run",
            *EXACT,
        ],
    )
    assert rc == 0, err
    result = json.loads((tmp_path / "report" / "probe.json").read_text())
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["fused"]["error"] == "RuntimeError: no fused kernel here"
    for name in ("base", "pad8", "batch2"):
        assert rows[name]["steps"] >= 3 and rows[name]["tokens_per_s"] > 0 and rows[name]["mfu"] is None
    assert rows["batch2"]["batch_tokens"] == 2 * rows["base"]["batch_tokens"]
    assert result["fastest"] in ("base", "pad8")
    assert "failed: RuntimeError: no fused kernel here" in out and "×base" in out
    assert "by self CPU time" in (tmp_path / "report" / "profile.txt").read_text()


def test_a_spent_budget_skips_the_variants_left(tmp_path):
    rc, out, err = run_main(probe.main, ["--variants", "base,fused", "--budget-s", "0", "--", *EXACT])
    assert rc == 0, err
    assert out.count("skipped: the 0-s budget was spent") == 4  # each row as it comes, then in the table


def test_evaluation_in_larger_batches_scores_the_same(tmp_path):
    from evaluation.evaluate import score, validation_loss

    trainer = trainer_of(tmp_path, "--eval-batch", "256")
    assert trainer.config.eval_batch == 256
    pairs = trainer.eval_pairs
    assert score(trainer.model, trainer.tok, pairs, batch_size=3) == score(trainer.model, trainer.tok, pairs, 256)
    loss = validation_loss(trainer.model, trainer.valid_ex, 2000, trainer.device, "fp32")
    assert isinstance(loss, float) and 0 < loss < 10
