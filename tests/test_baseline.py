"""The torch.nn.Transformer baseline (model/baseline.py): same interface, recompute decoding, and the
``--impl torch`` training path (tiny run, best/ written and reloadable, exact resume)."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import TINY, run_main

from decoding.batched import greedy_batch
from model.baseline import TorchBaseline, build_model, load_baseline
from trainer import train


def test_forward_shapes_and_padding_do_not_leak(make_config, encode_src, encode_tgt):
    torch.manual_seed(0)
    model = TorchBaseline(make_config(norm_first=True)).eval()
    src = torch.tensor([encode_src("the cat sat on the mat")])
    tgt = torch.tensor([encode_tgt("die katze")])
    logits = model(src, tgt)
    assert logits.shape == (1, tgt.size(1), model.cfg.vocab_size)
    # One pad appended to the source must not change anything (key-padding mask).
    padded = torch.cat([src, torch.zeros(1, 1, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt), logits, atol=1e-5, rtol=1e-4)
    # Causality: changing the last target token leaves the earlier positions' logits alone.
    other = tgt.clone()
    other[0, -1] = 5
    torch.testing.assert_close(model(src, other)[:, :-1], logits[:, :-1], atol=1e-5, rtol=1e-4)


def test_prefix_cache_decoding_equals_teacher_forcing_and_greedy_batch_runs(make_config, encode_src):
    torch.manual_seed(1)
    model = TorchBaseline(make_config()).eval()
    src = torch.tensor([encode_src("the dog runs")])
    memory, _ = model.encode(src)
    cache, ids = model.new_cache(), [model.cfg.bos_id, 7, 9, 11]
    for i, t in enumerate(ids):
        step = model.decode(torch.tensor([[t]]), memory, model.src_mask(src), cache=cache).hidden
        full = model.decode(torch.tensor([ids[: i + 1]]), memory, model.src_mask(src)).hidden
        torch.testing.assert_close(step[:, -1], full[:, -1], atol=1e-5, rtol=1e-4)
    out = greedy_batch(model, [encode_src("the dog runs"), encode_src("a cat")], max_new_tokens=5)
    assert len(out) == 2 and all(len(o) <= 5 for o in out)


def test_build_model_refuses_what_nn_transformer_cannot_do(make_config):
    assert isinstance(build_model(make_config(), "torch"), TorchBaseline)
    with pytest.raises(ValueError, match="unknown --impl"):
        build_model(make_config(), "jax")
    with pytest.raises(ValueError, match="encoder-decoder only"):
        TorchBaseline(make_config(arch="decoder-only"))
    with pytest.raises(ValueError, match="rope"):
        TorchBaseline(make_config(pos_encoding="rope"))


def test_impl_torch_trains_saves_and_resumes(tmp_path):
    out = tmp_path / "baseline"
    rc, _, err = run_main(train.main, ["--out", out, "--impl", "torch", "--norm-first", "--max-steps", 6, *TINY])
    assert rc == 0, err
    card = json.loads((out / "best" / "card.json").read_text())
    assert card["impl"].startswith("torch.nn.Transformer") and not (out / "probes.jsonl").exists()
    model = load_baseline(out / "best")
    assert isinstance(model, TorchBaseline) and model.generator.weight is model.embed.weight
    rc, _, err = run_main(train.main, ["--out", out, "--resume", "--max-steps", 9, "--no-progress"])
    assert rc == 0, err
    assert json.loads((out / "status.json").read_text())["step"] == 9
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 9


def test_the_explorer_refuses_a_baseline_checkpoint_with_a_message(tmp_path):
    from launching.launch import LaunchError, export_best
    from model.checkpoint import CheckpointError, load_checkpoint

    out = tmp_path / "baseline"
    rc, _, err = run_main(train.main, ["--out", out, "--impl", "torch", "--max-steps", 3, *TINY])
    assert rc == 0, err
    with pytest.raises(CheckpointError, match="torch.nn.Transformer baseline"):
        load_checkpoint(out / "best")
    with pytest.raises(LaunchError, match="baseline"):
        export_best(out, tmp_path / "checkpoints")


def test_impl_torch_trains_and_evaluates_in_bf16_on_any_cpu(tmp_path, make_config, encode_src, encode_tgt):
    """A baseline trained under bf16 autocast is evaluated under it too: nn.Transformer's eval fast path used to
    meet fp32 weights and bf16 activations there ("expected scalar type Float but found BFloat16"). bf16 is asked
    for explicitly, so the test runs the same path on an AVX2-only CPU (emulated) and on a native-bf16 one."""
    from training.device import autocast

    out = tmp_path / "baseline"
    rc, _, err = run_main(
        train.main, ["--out", out, "--impl", "torch", "--precision", "bf16", "--max-steps", 6, "--test-at-end", *TINY]
    )
    assert rc == 0, err
    card = json.loads((out / "best" / "card.json").read_text())
    assert card["precision"] == "bf16" and "chrf" in card["valid"] and "test" in card
    model = build_model(make_config(), "torch").eval()
    rows = [encode_src("the cat sat on the mat"), encode_src("the dog")]
    src = torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])  # padding: the nested-tensor case
    tgt = torch.tensor([encode_tgt("die katze")] * 2)
    with torch.no_grad(), autocast(torch.device("cpu"), "bf16"):
        logits = model(src, tgt)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
    assert torch.backends.mha.get_fastpath_enabled()  # restored after the call
