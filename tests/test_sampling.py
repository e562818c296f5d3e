"""Next-token choice: top-k / top-p cuts, temperature, seeds, and beam search."""

import pytest
import torch

from model.decoding import Stepper
from model.sampling import (
    Chooser, SamplingConfig, SamplingError, beam_search, choose_next, length_penalty, top_k_mask, top_p_mask,
)


def test_top_k_keeps_exactly_k_with_ties_to_the_lower_id():
    probs = torch.tensor([0.1, 0.3, 0.1, 0.3, 0.2])
    assert top_k_mask(probs, 2).tolist() == [False, True, False, True, False]
    # Three-way tie for the last place (0.1 at ids 0 and 2): the lower id wins.
    assert top_k_mask(probs, 4).tolist() == [True, True, False, True, True]
    assert top_k_mask(probs, 0).all() and top_k_mask(probs, 99).all()


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs = torch.tensor([0.05, 0.5, 0.3, 0.15])
    assert top_p_mask(probs, 0.5).tolist() == [False, True, False, False]
    assert top_p_mask(probs, 0.51).tolist() == [False, True, True, False]
    assert top_p_mask(probs, 0.8).tolist() == [False, True, True, False]
    assert top_p_mask(probs, 0.81).tolist() == [False, True, True, True]
    assert top_p_mask(probs, 1.0).all()


def test_pipeline_renormalises_over_kept_tokens_only():
    logits = torch.log(torch.tensor([0.05, 0.5, 0.3, 0.15]))
    pipe = choose_next(logits, SamplingConfig("sample", top_k=2), torch.Generator().manual_seed(0))
    assert pipe.keep.tolist() == [False, True, True, False]
    assert torch.allclose(pipe.final, torch.tensor([0.0, 0.625, 0.375, 0.0]))
    assert pipe.token_id in (1, 2)


def test_tiny_temperature_equals_greedy():
    logits = torch.randn(50)
    for seed in range(5):
        pipe = choose_next(logits, SamplingConfig("sample", temperature=1e-6), torch.Generator().manual_seed(seed))
        assert pipe.token_id == int(logits.argmax())


def test_invalid_parameters_are_refused_or_clamped():
    for bad in (dict(temperature=0.0), dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1),
                dict(strategy="nucleus")):
        with pytest.raises(SamplingError):
            SamplingConfig(**{"strategy": "sample", **bad}).validate()
    assert SamplingConfig("sample", top_k=10**6).validate(vocab_size=500).top_k == 500


def test_same_seed_same_sequence(make_model, encode_src):
    model = make_model()
    src = encode_src("the cat sat on the mat")
    runs = []
    for _ in range(2):
        stepper = Stepper(model, src, max_new_tokens=12)
        stepper.run_to_end(Chooser(SamplingConfig("sample", temperature=1.5, seed=7)))
        runs.append(stepper.generated)
    assert runs[0] == runs[1]


def test_beam_width_one_equals_greedy(make_model, encode_src):
    model = make_model()
    src = encode_src("the cat sat on the mat")
    stepper = Stepper(model, src, max_new_tokens=10)
    stepper.run_to_end()
    result = beam_search(model, src, beam_size=1, alpha=0.0, max_new_tokens=10)
    assert result.hypotheses[0].tokens == stepper.generated


def test_beam_hypotheses_are_sorted_and_scores_are_penalised(make_model, encode_src):
    model = make_model(seed=3)
    result = beam_search(model, encode_src("a dog"), beam_size=4, alpha=0.6, max_new_tokens=8)
    scores = [h.score for h in result.hypotheses]
    assert scores == sorted(scores, reverse=True) and len(scores) == 4
    for h in result.hypotheses:
        assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens), 0.6))
    assert all(any(kept for *_, kept in step) for step in result.steps)
    with pytest.raises(SamplingError):
        beam_search(model, encode_src("a dog"), beam_size=0)


def test_beam_states_replay_the_search_and_match_teacher_forced_log_probs(make_model, encode_src):
    from model.analysis import sequence_log_probs
    from model.sampling import beam_states

    model = make_model()
    src = encode_src("The cat sleeps.")
    result = beam_search(model, src, beam_size=3, alpha=0.6, max_new_tokens=6)
    states = beam_states(result, 0.6, model.cfg.eos_id)
    assert len(states) == len(result.steps) + 1 and states[0].open[0].tokens == []
    for t, state in enumerate(states[1:], start=1):
        assert len(state.candidates) == len(result.steps[t - 1])
        assert all(len(h.tokens) == t for h in state.open) and len(state.open) <= 3
        for h in state.open + state.finished[-1:]:
            lp = sequence_log_probs(model, src, [model.cfg.bos_id] + h.tokens)
            assert abs(float(lp.sum()) - h.log_prob) < 1e-4
    # The search's final ranking = the finished hypotheses plus the beams still open at the end.
    last = states[-1]
    pool = {tuple(h.tokens) for h in last.finished + last.open}
    assert {tuple(h.tokens) for h in result.hypotheses} <= pool
