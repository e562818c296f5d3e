"""Growing a trained model deeper (tools/grow.py): the deeper copy computes exactly what the original did, its
new layers can learn, and bad requests get a clear error."""

import json

import pytest
import torch

from model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tools.grow import grow_depth, layer_sources, main

SRC = torch.tensor([[5, 9, 14, 20, 2], [7, 8, 2, 0, 0]])
TGT = torch.tensor([[1, 30, 31, 32], [1, 40, 0, 0]])


def _trained_like(make_model, **overrides):
    """A tiny pre-norm model whose every weight is non-trivial (no zero biases that would hide a wrong copy)."""
    model = make_model(seed=5, norm_first=True, **overrides)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def test_layer_sources_keep_each_old_layer_and_copy_it_after_itself():
    assert layer_sources(3, 6) == [(0, False), (0, True), (1, False), (1, True), (2, False), (2, True)]
    assert layer_sources(2, 3) == [(0, False), (0, True), (1, False)]
    assert layer_sources(2, 2) == [(0, False), (1, False)]
    with pytest.raises(ValueError, match="grow"):
        layer_sources(3, 2)


def test_the_grown_translator_gives_the_same_logits_and_its_new_layers_learn(tmp_path, make_model, tokenizer):
    model = _trained_like(make_model)
    save_checkpoint(tmp_path / "small", model, tokenizer, {"task": "test"})
    out = grow_depth(tmp_path / "small", tmp_path / "deep", encoder_layers=4, decoder_layers=3)
    deep = load_checkpoint(out)
    assert (deep.config.n_encoder_layers, deep.config.n_decoder_layers) == (4, 3)
    with torch.no_grad():
        assert torch.equal(deep.model(SRC, TGT), model(SRC, TGT))
    assert deep.card["task"] == "test" and deep.card["grown"]["layers"] == {
        "encoder_layers": [2, 4],
        "decoder_layers": [2, 3],
    }
    # a new layer copies the old one's features and starts with a zero write into the residual stream …
    new = deep.model.decoder_layers[1]
    assert torch.equal(new.self_attn.q_proj.weight, model.decoder_layers[0].self_attn.q_proj.weight)
    assert not new.ffn.linear2.weight.any() and not new.cross_attn.out_proj.weight.any()
    # … which the gradient reaches at once, so training moves it off the identity
    deep.model.train()
    deep.model(SRC, TGT).logsumexp(-1).sum().backward()
    assert new.ffn.linear2.weight.grad.abs().sum() > 0
    assert new.cross_attn.out_proj.weight.grad.abs().sum() > 0


def test_a_decoder_only_model_grows_its_decoder(tmp_path, make_model, tokenizer):
    model = _trained_like(make_model, arch="decoder-only", n_encoder_layers=0)
    save_checkpoint(tmp_path / "lm", model, tokenizer)
    deep = load_checkpoint(grow_depth(tmp_path / "lm", tmp_path / "deep", encoder_layers=0, decoder_layers=5))
    assert deep.config.n_decoder_layers == 5
    with torch.no_grad():
        assert torch.equal(deep.model(None, TGT), model(None, TGT))


def test_bad_requests_are_refused_with_a_message(tmp_path, make_model, tokenizer, capsys):
    save_checkpoint(tmp_path / "post", make_model(seed=1, norm_first=False), tokenizer)
    with pytest.raises(CheckpointError, match="pre-norm"):
        grow_depth(tmp_path / "post", tmp_path / "x", 4, 4)
    save_checkpoint(tmp_path / "pre", make_model(seed=1, norm_first=True), tokenizer)
    with pytest.raises(CheckpointError, match="encoder_layers: can only grow"):
        grow_depth(tmp_path / "pre", tmp_path / "x", 1, 4)
    assert main([str(tmp_path / "x"), str(tmp_path / "missing"), "--encoder-layers", "4", "--decoder-layers", "4"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([str(tmp_path / "ok"), str(tmp_path / "pre"), "--encoder-layers", "3", "--decoder-layers", "2"]) == 0
    assert json.loads((tmp_path / "ok" / "config.json").read_text())["n_encoder_layers"] == 3
