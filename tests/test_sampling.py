"""Next-token choice: top-k / top-p cuts, temperature, seeds, and beam search."""

import pytest
import torch

from decoding.batched import greedy_batch, translate_texts
from decoding.beam import beam_search, beam_search_batch, beam_translate_texts, length_penalty
from decoding.sampling import Chooser, SamplingConfig, SamplingError, choose_next, top_k_mask, top_p_mask
from decoding.stepping import Stepper, strip_eos
from model.config import default_max_new_tokens


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
    for bad in (
        dict(temperature=0.0),
        dict(temperature=-1.0),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(strategy="nucleus"),
    ):
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
    assert list(result.hypotheses[0].tokens) == stepper.generated


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
    from decoding.beam import beam_states
    from reading.analysis import sequence_log_probs

    model = make_model()
    src = encode_src("The cat sleeps.")
    result = beam_search(model, src, beam_size=3, alpha=0.6, max_new_tokens=6)
    states = beam_states(result, 0.6, model.cfg.eos_id)
    assert len(states) == len(result.steps) + 1 and states[0].open[0].tokens == ()
    for t, state in enumerate(states[1:], start=1):
        assert len(state.candidates) == len(result.steps[t - 1])
        assert all(len(h.tokens) == t for h in state.open) and len(state.open) <= 3
        for h in state.open + state.finished[-1:]:
            lp = sequence_log_probs(model, src, [model.cfg.bos_id] + list(h.tokens))
            assert abs(float(lp.sum()) - h.log_prob) < 1e-4
    # The search's final ranking = the finished hypotheses plus the beams still open at the end.
    last = states[-1]
    pool = {tuple(h.tokens) for h in last.finished + last.open}
    assert {tuple(h.tokens) for h in result.hypotheses} <= pool


# --- batched beam search (evaluation) ------------------------------------------------------------------------
BATCH_TEXTS = [
    "The cat sleeps.",
    "a dog",
    "Where is the station?",
    "I am tired.",
    "Thank you very much.",
    "The street is long and the weather is nice.",
    "Hi",
    "We go home.",
]


#: Ways to push the random tiny model towards <eos>: ``(constant, scale)`` adds ``constant + scale · hidden[0]`` to
#: the <eos> logit. Unpushed it rarely says <eos> and every search runs to its length cap; pushed, hypotheses close
#: at varied lengths within one batch (checked below).
EOS_PUSH = [(0.0, 0.0), (2.0, 0.0), (0.0, 2.0)]


def _push_eos(monkeypatch, model, constant: float, scale: float) -> None:
    plain = model.logits
    eos = model.cfg.eos_id

    def logits(hidden):
        out = plain(hidden).clone()
        out[..., eos] += constant + scale * hidden[..., 0]
        return out

    monkeypatch.setattr(model, "logits", logits)


@pytest.mark.parametrize("push", EOS_PUSH)
@pytest.mark.parametrize("beam_size,alpha", [(1, 0.0), (1, 0.6), (2, 0.6), (3, 0.0), (4, 0.6), (5, 1.0)])
def test_batched_beam_search_equals_the_single_sentence_search(
    make_model, encode_src, monkeypatch, push, beam_size, alpha
):
    model = make_model(seed=1)
    _push_eos(monkeypatch, model, *push)
    srcs = [encode_src(t) for t in BATCH_TEXTS]
    batched = beam_search_batch(model, srcs, beam_size, alpha)
    for src, got in zip(srcs, batched, strict=True):
        want = beam_search(model, src, beam_size, alpha, max_new_tokens=default_max_new_tokens(model.cfg, len(src)))
        assert [h.tokens for h in got.hypotheses] == [h.tokens for h in want.hypotheses]
        assert [h.finished for h in got.hypotheses] == [h.finished for h in want.hypotheses]
        assert [h.score for h in got.hypotheses] == pytest.approx([h.score for h in want.hypotheses], abs=1e-4)
        assert len(got.hypotheses) == beam_size and got.steps == ()


def test_the_eos_push_exercises_closed_and_capped_searches(make_model, encode_src, monkeypatch):
    """The parametrised comparison above covers both endings: hypotheses closed by <eos> at different steps in
    one batch, and searches that reach their length cap with open beams."""
    model = make_model(seed=1)
    srcs = [encode_src(t) for t in BATCH_TEXTS]
    _push_eos(monkeypatch, model, 0.0, 2.0)
    for k in (2, 4):
        best = [r.hypotheses[0] for r in beam_search_batch(model, srcs, k, 0.6)]
        assert any(h.finished for h in best) and any(not h.finished for h in best)
        assert len({len(h.tokens) for h in best if h.finished}) > 1
    assert len({len(ids) for ids in greedy_batch(model, srcs)}) > 3


@pytest.mark.parametrize("push", EOS_PUSH)
def test_batched_beam_one_equals_greedy(make_model, encode_src, monkeypatch, push):
    model = make_model(seed=1)
    _push_eos(monkeypatch, model, *push)
    srcs = [encode_src(t) for t in BATCH_TEXTS]
    for alpha in (0.0, 0.6, 1.0):
        beams = [strip_eos(r.hypotheses[0].tokens, model.cfg.eos_id) for r in beam_search_batch(model, srcs, 1, alpha)]
        assert beams == greedy_batch(model, srcs)


def test_the_loop_guard_holds_in_beam_search_and_beam_one_is_still_greedy(make_model, encode_src):
    # An untrained model loops at once; with the guard no beam writes a token three times in a row.
    model = make_model(seed=3)
    srcs = [encode_src(t) for t in BATCH_TEXTS]
    looped = lambda ids: any(ids[i] == ids[i + 1] == ids[i + 2] for i in range(len(ids) - 2))  # noqa: E731
    assert any(looped(ids) for ids in greedy_batch(model, srcs, max_new_tokens=24))
    for k in (1, 3):
        for result in beam_search_batch(model, srcs, k, 0.6, max_new_tokens=24, loop_times=3):
            assert not any(looped(list(h.tokens)) for h in result.hypotheses)
    beam_one = [
        strip_eos(r.hypotheses[0].tokens, model.cfg.eos_id)
        for r in beam_search_batch(model, srcs, 1, 0.6, max_new_tokens=24, loop_times=3)
    ]
    assert beam_one == greedy_batch(model, srcs, max_new_tokens=24, loop_times=3)
    one = beam_search(model, srcs[0], 3, 0.6, max_new_tokens=24, loop_times=3)
    assert not any(looped(list(h.tokens)) for h in one.hypotheses)


def test_beam_search_closes_only_eos_ranked_within_the_beam(make_model, encode_src, monkeypatch):
    """An <eos> candidate ranked k+1…2k does not close a hypothesis (it did before: beam 1 then stopped where
    greedy went on), and every closed hypothesis was one of its step's k best candidates."""
    model = make_model(seed=1)
    _push_eos(monkeypatch, model, 0.0, 2.0)
    ranks = {True: set(), False: set()}  # kept or not → ranks of <eos> candidates
    for text in BATCH_TEXTS:
        for k in (1, 3):
            result = beam_search(model, encode_src(text), k, 0.6, max_new_tokens=20)
            for step in result.steps:
                for rank, (_, token, _, kept) in enumerate(step):
                    if token == model.cfg.eos_id:
                        ranks[kept].add(rank - k)
    assert ranks[True] and max(ranks[True]) < 0  # closed: ranked within the beam
    assert ranks[False] and min(ranks[False]) >= 0  # the test met <eos> candidates ranked k+1…2k


def test_beam_translate_texts_keeps_order_and_gives_empty_strings_for_unusable_input(make_model, tokenizer):
    model = make_model(seed=1)
    texts = ["The cat sleeps.", "", "   ", "Where is the station?", "\x00\x01", "a dog", "x" * 3000]
    out = beam_translate_texts(model, tokenizer, texts, beam=3, alpha=0.6, batch_size=2)
    assert len(out) == len(texts) and out[1] == out[2] == out[4] == out[6] == ""
    for i in (0, 3, 5):
        src = tokenizer.encode(texts[i]).ids + [model.cfg.eos_id]
        best = beam_search(model, src, 3, 0.6, max_new_tokens=default_max_new_tokens(model.cfg, len(src)))
        assert out[i] == tokenizer.decode(strip_eos(best.hypotheses[0].tokens, model.cfg.eos_id))
    assert beam_translate_texts(model, tokenizer, texts, beam=1) == translate_texts(model, tokenizer, texts)
    with pytest.raises(SamplingError):
        beam_translate_texts(model, tokenizer, texts, beam=0)
