"""The batched first decodings (decoding/decoded_batch.py) against the solo Stepper the pages ran before them.

Sentences of very different lengths share a batch, so the short ones are padded to the long one's length: each
decoding must still be exactly the solo one's tokens and records (the attention over its own source only, the
cache bytes of a one-sentence cache), its numbers equal to float rounding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from decoding import decoded_batch
from decoding.decoded import Decoding, decode
from decoding.decoded_batch import checkpoint_decodings, greedy_decodings
from decoding.stepping import Stepper, input_limit, prepare_source
from model.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "checkpoints" / "en-de"
#: One to twenty-odd words: the shortest is padded by most of the longest's length in a batch.
SENTENCES = [
    "Hi.",
    "My brother lives in Berlin.",
    "The cat sat on the mat.",
    "The girl who is wearing a red dress is my sister, and she lives in a small house near the river.",
    "Thank you very much.",
    "Bobby likes blackberries.",
]
ATOL = 1e-4  # a batched sum runs in another order than a solo one: about 1e-6 apart (log-probabilities 1e-5)


def assert_same(solo: Decoding, batched: Decoding) -> None:
    """Every field the pages read: equal, and the tensors' numbers equal to float rounding."""
    assert batched.prefix == solo.prefix and batched.generated == solo.generated
    assert (batched.max_new_tokens, batched.eos_id, batched.cross_bytes) == (
        solo.max_new_tokens,
        solo.eos_id,
        solo.cross_bytes,
    )
    assert batched.n_steps == solo.n_steps and batched.finished
    for b, s in zip(batched.records, solo.records, strict=True):
        assert (b.token_id, b.cache_bytes, b.top_ids, b.forced, b.banned) == (
            s.token_id,
            s.cache_bytes,
            s.top_ids,
            s.forced,
            s.banned,
        )
        assert b.prob == pytest.approx(s.prob, abs=ATOL)
        assert b.top_probs == pytest.approx(s.top_probs, abs=ATOL)
        assert b.log_probs is None and s.log_probs is None  # shared decodings keep their top tokens, not [vocab]
        assert [i for i, _ in b.kept] == [i for i, _ in s.kept]
        assert [p for _, p in b.kept] == pytest.approx([p for _, p in s.kept], abs=ATOL)
        for mine, theirs in ((b.cross_attention, s.cross_attention), (b.self_attention, s.self_attention)):
            assert mine.shape == theirs.shape and mine.dtype == theirs.dtype and mine.is_inference()
            torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def shipped():
    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip("the shipped en-de checkpoint is missing")
    ckpt = load_checkpoint(SHIPPED)
    cfg = ckpt.config
    return ckpt, [prepare_source(ckpt.tokenizer, t, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids for t in SENTENCES]


def solo(ckpt, ids):
    from ui.state import new_stepper  # the pages' own stepper: its caps and forced end

    return decode(new_stepper(ckpt.model, list(ids), ckpt.generation))


def test_a_batch_of_sentences_of_different_lengths_decodes_each_as_alone(shipped):
    ckpt, sources = shipped
    assert len({len(s) for s in sources}) >= 5 and max(map(len, sources)) > 4 * min(map(len, sources))
    for s, b in zip([solo(ckpt, ids) for ids in sources], checkpoint_decodings(ckpt, sources), strict=True):
        assert_same(s, b)


def test_a_decoding_does_not_depend_on_its_batch(shipped):
    ckpt, sources = shipped
    alone = checkpoint_decodings(ckpt, sources[1:2])[0]
    with_long = checkpoint_decodings(ckpt, [sources[3], sources[1]])[1]
    assert alone.generated == with_long.generated
    assert_same(solo(ckpt, sources[1]), alone)


def test_a_close_call_is_decoded_again_alone(shipped, monkeypatch):
    ckpt, sources = shipped
    monkeypatch.setattr(decoded_batch, "CLOSE_CALL_NATS", float("inf"))  # every step a close call
    for s, b in zip([solo(ckpt, ids) for ids in sources[:3]], checkpoint_decodings(ckpt, sources[:3]), strict=True):
        assert b.generated == s.generated
        for rb, rs in zip(b.records, s.records, strict=True):  # the solo decoding itself: bit for bit
            assert rb.kept == rs.kept and torch.equal(rb.cross_attention, rs.cross_attention)


def test_caps_and_the_forced_end_are_each_sentences_own(make_model, encode_src):
    model = make_model()
    sources = [encode_src("the cat sat on the mat"), encode_src("a dog"), encode_src("the dog runs in the park")]
    caps = [3, 1, 5]
    for ids, cap, b in zip(sources, caps, greedy_decodings(model, sources, caps, forced_eos_id=2), strict=True):
        s = decode(Stepper(model, ids, max_new_tokens=cap, forced_eos_id=2))
        assert_same(s, b)
        assert b.n_steps <= cap and b.generated[-1] == 2  # ends with <eos>, forced at the cap where needed


def test_a_decoder_only_model_is_refused_with_a_reason(make_model):
    with pytest.raises(ValueError, match="decoder-only|prompt"):
        greedy_decodings(make_model(arch="decoder-only"), [[5, 6, 2]])
    with pytest.raises(ValueError, match="src_ids"):
        greedy_decodings(make_model(), [[5, 2], []])


def test_a_coarser_type_makes_more_close_calls():
    float32 = decoded_batch.close_call_nats(torch.float32)
    assert float32 == decoded_batch.CLOSE_CALL_NATS
    assert float32 < decoded_batch.close_call_nats(torch.float16) < decoded_batch.close_call_nats(torch.bfloat16)


def test_no_vocabulary_row_outlives_its_step(make_model, monkeypatch):
    """Each step's record is slimmed (:meth:`StepRecord.slim`) before the next step runs, not at the batch's end:
    a ``[vocab]`` row a step kept to the end was 130 MB for sixteen sentences at the length cap."""
    model = make_model()
    counts = {"made": 0, "slimmed": 0, "steps": 0}
    real, real_slim, real_decode = decoded_batch.StepRecord, decoded_batch.StepRecord.slim, model.decode

    def record(*args, **kwargs):
        counts["made"] += 1
        return real(*args, **kwargs)

    def slim(self):
        counts["slimmed"] += self.log_probs is not None
        return real_slim(self)

    def decode_step(*args, **kwargs):
        assert counts["slimmed"] == counts["made"], "a record of an earlier step still holds its [vocab] row"
        counts["steps"] += 1
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(decoded_batch, "StepRecord", record)
    monkeypatch.setattr(real, "slim", slim)
    monkeypatch.setattr(model, "decode", decode_step)
    decodings = greedy_decodings(model, [[5, 6, 7, 2], [8, 9, 2]], [6, 6])
    assert counts["steps"] >= 2 and counts["made"] == sum(d.n_steps for d in decodings) == counts["slimmed"]
    assert all(r.log_probs is None and r.kept for d in decodings for r in d.records)
