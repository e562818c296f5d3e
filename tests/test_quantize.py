"""model.quantize: int8 checkpoints (a matrix as int8 with a scale per row) are a quarter of float32 on disk, load as
float32 through every reader of weights, stay within the rounding bound, and a damaged one is refused by name."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from model.checkpoint import CheckpointError, load_checkpoint, read_weights, save_checkpoint
from model.quantize import SCALE_SUFFIX, dequantize_state, is_quantized, quantize_state
from tools.average import average_checkpoints
from tools.average import main as average_main

SRC = torch.tensor([[5, 9, 14, 20, 2], [7, 8, 2, 0, 0]])
TGT = torch.tensor([[1, 30, 31, 32], [1, 40, 0, 0]])


def test_each_weight_is_within_half_a_step_of_its_row_and_vectors_stay_float16():
    w = torch.randn(6, 40) * torch.tensor([0.01, 0.1, 1.0, 10.0, 0.0, 3.0])[:, None]  # rows of every scale
    state = quantize_state({"w": w, "bias": torch.randn(6), "narrow": torch.randn(4, 8), "ids": torch.arange(3)})
    assert state["w"].dtype == torch.int8 and state["w" + SCALE_SUFFIX].shape == (6,)
    assert state["bias"].dtype == torch.float16 and state["narrow"].dtype == torch.float16
    assert torch.equal(state["ids"], torch.arange(3)) and is_quantized(state)
    back = dequantize_state(state)
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert torch.all((back["w"] - w).abs() <= step / 2 + 1e-7)
    assert torch.equal(back["w"][4], torch.zeros(40))  # an all-zero row stays exactly zero
    assert back["w"].abs().amax(dim=1).sub(w.abs().amax(dim=1)).abs().max() < 1e-6  # the row's largest is exact
    plain = {"w": w}
    assert dequantize_state(plain) is plain and not is_quantized(plain)


@pytest.mark.parametrize(
    "broken,match",
    [
        (lambda s: s.pop("w" + SCALE_SUFFIX), "has no scale per row"),
        (lambda s: s.update({"w" + SCALE_SUFFIX: torch.ones(3)}), "has no scale per row"),
        (lambda s: s.update({"gone" + SCALE_SUFFIX: torch.ones(3)}), "have no weights"),
    ],
)
def test_scales_that_do_not_fit_are_refused(broken, match):
    state = quantize_state({"w": torch.randn(6, 40), "v": torch.randn(2, 40)})
    broken(state)
    with pytest.raises(ValueError, match=match):
        dequantize_state(state)


def test_an_int8_checkpoint_is_a_quarter_of_float32_and_translates_like_it(tmp_path, make_model, tokenizer):
    model = make_model(seed=3, d_model=64, d_ff=128)
    save_checkpoint(tmp_path / "fp32", model, tokenizer)
    save_checkpoint(tmp_path / "int8", model, tokenizer, dtype=torch.int8)
    sizes = {k: (tmp_path / k / "model.safetensors").stat().st_size for k in ("fp32", "int8")}
    assert sizes["int8"] < 0.3 * sizes["fp32"]
    with safe_open(str(tmp_path / "int8" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("embed.weight").dtype == torch.int8
    ckpt = load_checkpoint(tmp_path / "int8")
    assert ckpt.model.embed.weight.dtype == torch.float32
    assert ckpt.model.generator.weight is ckpt.model.embed.weight  # still tied
    with torch.no_grad():
        ref, got = model(SRC, TGT), ckpt.model(SRC, TGT)
    assert not torch.equal(got, ref)  # it really went through int8
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_average_converts_to_int8_and_reads_int8_inputs(tmp_path, make_model, tokenizer, capsys):
    a = save_checkpoint(tmp_path / "a", make_model(seed=1), tokenizer)
    assert average_main([str(tmp_path / "q"), str(a), "--int8"]) == 0
    assert is_quantized(read_weights(tmp_path / "q" / "model.safetensors")) is False  # read back as float32
    with safe_open(str(tmp_path / "q" / "model.safetensors"), "pt") as f:
        assert any(k.endswith(SCALE_SUFFIX) for k in f.keys())
    # a soup of an int8 checkpoint and a float32 one averages the dequantised weights, not the int8 codes
    soup = average_checkpoints([tmp_path / "q", a], tmp_path / "soup")
    w_q = load_checkpoint(tmp_path / "q").model.embed.weight
    w_a = load_checkpoint(a).model.embed.weight
    torch.testing.assert_close(load_checkpoint(soup).model.embed.weight, (w_q + w_a) / 2)
    with pytest.raises(SystemExit):
        average_main([str(tmp_path / "x"), str(a), "--int8", "--fp16"])
    assert "not allowed with" in capsys.readouterr().err


def test_a_checkpoint_with_broken_scales_is_refused_with_a_message(tmp_path, make_model, tokenizer):
    folder = save_checkpoint(tmp_path / "int8", make_model(seed=1), tokenizer, dtype=torch.int8)
    path = folder / "model.safetensors"
    state = {}
    with safe_open(str(path), "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys() if k != "embed.weight" + SCALE_SUFFIX}
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt or unreadable: int8 tensor 'embed.weight'"):
        load_checkpoint(folder)


def test_named_matrices_kept_in_float16_make_a_mixed_file_that_loads_and_translates_like_float32(
    tmp_path, make_model, tokenizer
):
    model = make_model(seed=3, d_model=64, d_ff=128)
    a = save_checkpoint(tmp_path / "fp32", model, tokenizer)
    assert average_main([str(tmp_path / "mixed"), str(a), "--int8", "--keep-fp16", "embed.weight"]) == 0
    with safe_open(str(tmp_path / "mixed" / "model.safetensors"), "pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}
    assert stored["embed.weight"].dtype == torch.float16 and "embed.weight" + SCALE_SUFFIX not in stored
    assert stored["encoder_layers.0.self_attn.q_proj.weight"].dtype == torch.int8  # the rest is still int8
    # round trip: the kept matrix comes back as it was stored, the int8 ones within half a step of their row
    back = read_weights(tmp_path / "mixed" / "model.safetensors")
    assert torch.equal(back["embed.weight"], stored["embed.weight"])
    w = model.state_dict()["encoder_layers.0.self_attn.q_proj.weight"]
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert torch.all((back["encoder_layers.0.self_attn.q_proj.weight"] - w).abs() <= step / 2 + 1e-6)
    ckpt = load_checkpoint(tmp_path / "mixed")
    assert ckpt.model.embed.weight.dtype == torch.float32 and ckpt.model.generator.weight is ckpt.model.embed.weight
    torch.testing.assert_close(ckpt.model.embed.weight, model.embed.weight.detach().half().float())
    with torch.no_grad():
        ref, got = model(SRC, TGT), ckpt.model(SRC, TGT)
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    assert load_checkpoint(tmp_path / "mixed").card["int8_kept_fp16"] == ["embed.weight"]


def test_keeping_a_tensor_that_is_not_there_is_refused_with_a_message(tmp_path, make_model, tokenizer, capsys):
    with pytest.raises(ValueError, match="no floating tensor to keep in float16 named 'embed'"):
        quantize_state({"w": torch.randn(6, 40)}, keep=["embed"])
    state = quantize_state(
        {"a.attn.w": torch.randn(6, 40), "b.attn.w": torch.randn(6, 40), "ff.w": torch.randn(6, 40)}, keep=["*.attn.*"]
    )  # a pattern keeps every tensor it matches
    assert [k for k, t in state.items() if t.dtype == torch.float16] == ["a.attn.w", "b.attn.w"]
    a = save_checkpoint(tmp_path / "a", make_model(seed=1), tokenizer)
    assert average_main([str(tmp_path / "q"), str(a), "--int8", "--keep-fp16", "embedding"]) == 2
    assert "--keep-fp16: no floating tensor to keep in float16 named 'embedding'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        average_main([str(tmp_path / "q"), str(a), "--keep-fp16", "embed.weight"])
    assert "--keep-fp16 goes with --int8" in capsys.readouterr().err
