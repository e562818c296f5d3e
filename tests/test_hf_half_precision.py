"""A MarianMT file stored in float16 or bfloat16 that keeps its positional tables (older opus-mt files do) loads:
its tables are compared with our sinusoids within the rounding of the stored type (``model.hf.weights.table_atol``),
and the model computes what ``transformers`` computes on the same rounded weights. A table that is not Marian's is
still refused."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: builds the weights, and the reference

from hf_fixtures import tiny_marian, write_tiny_marian_model
from test_hf_equivalence import SOURCES

from model.checkpoint import CheckpointError
from model.hf import weights
from model.hf.loader import load_hf_model

DTYPES = [torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt-half")
    return folder, write_tiny_marian_model(folder)


def _half_folder(marian, folder, dtype, shift: float = 0.0):
    """``folder`` with the config and a ``pytorch_model.bin`` of the reference's whole state dict in ``dtype``, its
    positional tables included (``+ shift``). Returns that state dict."""
    source, reference = marian
    (folder / "config.json").write_bytes((source / "config.json").read_bytes())
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in reference.state_dict().items()}
    assert "model.encoder.embed_positions.weight" in state
    state["model.encoder.embed_positions.weight"] = state["model.encoder.embed_positions.weight"] + shift
    torch.save(state, folder / "pytorch_model.bin")
    return state


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_half_precision_marian_with_its_positional_tables_loads(marian, tmp_path, dtype):
    reference = marian[1]
    state_dict = _half_folder(marian, tmp_path, dtype)
    stored = state_dict["model.encoder.embed_positions.weight"].float()
    ours_table = reference.model.encoder.embed_positions.weight.detach()
    assert (stored - ours_table).abs().max() > weights.TABLE_ATOL  # what the float32 tolerance refused
    model, _, _ = load_hf_model(tmp_path)
    # the same computation as the reference run on the rounded weights
    rounded = tiny_marian()  # its positional tables stay exact (computed), as ours
    rounded.load_state_dict({k: v.float() for k, v in state_dict.items() if "embed_positions" not in k}, strict=False)
    src, tgt = torch.tensor([SOURCES[0]]), torch.tensor([[96, 5, 9, 14]])
    with torch.no_grad():
        theirs = rounded(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_half_precision_table_that_is_not_marians_is_still_refused(marian, tmp_path, dtype):
    _half_folder(marian, tmp_path, dtype, shift=0.05)
    with pytest.raises(CheckpointError, match="is not Marian's sinusoidal table"):
        load_hf_model(tmp_path)
    assert weights.table_atol(torch.float32) == weights.TABLE_ATOL < weights.table_atol(torch.float16) < 0.05
