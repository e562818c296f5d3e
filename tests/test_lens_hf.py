"""The logit lens on Hugging Face MarianMT and GPT-2 folders, layer by layer against ``transformers``.

The tiny random reference models of ``tests/hf_fixtures.py`` (the ``hf_marian`` and ``hf_gpt2`` fixtures): at
the last layer the lens is our model's own output distribution (≤ 1e-6), and at every layer it is what the
reference's hidden states give when read out the same way: Marian (post-LN, no final LayerNorm): ``lm_head(h_l) +
final_logits_bias``; GPT-2 (pre-LN): ``lm_head(ln_f(h_l))``, where ``transformers`` already applied ``ln_f`` to
its last hidden state. Both with the folder's suppressed ids (Marian's ``<pad>``) at −∞, as the model's choice has.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")  # a dev dependency: the reference implementation

from test_hf_equivalence import PROMPTS, SOURCES
from test_lens import assert_last_layer_is_the_output, distribution

from decoding.decoded import decode
from decoding.stepping import Stepper

#: ``transformers`` and our modules round differently: the HF equivalence tests compare logits at 1e-5.
REFERENCE_TOL = 1e-5


def reference_probs(cfg, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of reference logits ``[.., vocab]`` with the suppressed ids at −∞ (float64)."""
    logits = logits.double().clone()
    logits[..., list(cfg.suppress_ids)] = float("-inf")
    return torch.softmax(logits, dim=-1)


def compare_layers(lens, decoding, per_layer_probs, vocab: int) -> None:
    """``per_layer_probs[l]``: the reference's readout of layer ``l`` at every decoder position, as probabilities
    ``[positions, vocab]`` (:func:`reference_probs`). Step ``s`` reads position ``len(prefix) − 1 + s − 1``."""
    start = len(decoding.prefix) - 1
    for layer, probs in enumerate(per_layer_probs):
        for s, step in enumerate(lens.steps):
            got = distribution(step, layer, vocab)
            assert torch.max(torch.abs(got - probs[start + s])) <= REFERENCE_TOL, (layer, s)


def test_marian_lens_is_the_projection_of_each_post_ln_layer(hf_marian):
    model, cfg, ref = hf_marian.model, hf_marian.cfg, hf_marian.reference
    src = SOURCES[0]
    decoding = decode(Stepper(model, src, max_new_tokens=6))
    lens = assert_last_layer_is_the_output(model, src, decoding)
    assert not lens.final_norm  # Marian is post-LN: no final LayerNorm to apply
    inputs = torch.tensor([list(decoding.prefix + decoding.generated[:-1])])
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([src]), decoder_input_ids=inputs, output_hidden_states=True)
        layers = [
            reference_probs(cfg, ref.lm_head(h[0]) + ref.final_logits_bias[0]) for h in out.decoder_hidden_states[1:]
        ]
    torch.testing.assert_close(layers[-1], reference_probs(cfg, out.logits[0]), atol=1e-6, rtol=0)
    compare_layers(lens, decoding, layers, cfg.vocab_size)


def test_gpt2_lens_applies_ln_f_to_each_layer(hf_gpt2):
    model, cfg, ref = hf_gpt2.model, hf_gpt2.cfg, hf_gpt2.reference
    decoding = decode(Stepper(model, PROMPTS[0], max_new_tokens=6))
    lens = assert_last_layer_is_the_output(model, PROMPTS[0], decoding)
    assert lens.final_norm  # GPT-2 is pre-LN: ln_f on every layer's stream
    inputs = torch.tensor([list(decoding.prefix + decoding.generated[:-1])])
    with torch.no_grad():
        out = ref(input_ids=inputs, output_hidden_states=True)
        hidden = out.hidden_states[1:]  # the last already went through ln_f
        streams = [ref.transformer.ln_f(h[0]) for h in hidden[:-1]] + [hidden[-1][0]]
        layers = [reference_probs(cfg, ref.lm_head(h)) for h in streams]
    torch.testing.assert_close(layers[-1], reference_probs(cfg, out.logits[0]), atol=1e-6, rtol=0)
    compare_layers(lens, decoding, layers, cfg.vocab_size)
