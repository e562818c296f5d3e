"""The shared caches are bounded in bytes: each entry measured, the least recently used dropped over the budget, and
a decoding kept for sharing holds what the pages show, not a vocabulary-wide row per step."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from app_pages.decoding.lab import lab_decoding
from decoding.decoded import decode
from decoding.sampling import SamplingConfig
from decoding.stepping import TOP_KEPT, Stepper
from serving import figures, memory
from serving.heavy import Gate
from serving.memory import ByteLRU, nbytes
from tests.app_helpers import ROOT

MB = 2**20


@dataclass(frozen=True)
class Record:
    name: str
    rows: tuple


def test_arrays_and_tensors_count_their_buffers_once():
    a = np.zeros((1000, 250), dtype=np.float32)  # 1,000,000 bytes
    assert 1_000_000 <= nbytes(a) < 1_001_000
    assert nbytes([a, a, a[:10]]) < 1_002_000  # the same buffer, and a view of it, kept alive once
    t = torch.zeros(500, 500)  # 1,000,000 bytes
    assert 1_000_000 <= nbytes(t) < 1_001_000
    assert nbytes(t[:1]) >= 1_000_000  # a view keeps its whole storage alive
    assert nbytes((t, t[3], t.T)) < 1_002_000


def test_nested_values_are_walked():
    inner = np.ones(10_000, dtype=np.float64)  # 80,000 bytes
    value = Record("x", (inner, {"k": [inner.copy(), "text" * 1000]}))
    assert 164_000 <= nbytes(value) < 170_000
    assert nbytes("") == sys.getsizeof("")


def test_a_string_counts_the_utf8_copy_it_keeps_once_sent():
    """A shared HTML string is measured when it is put, before Streamlit sends it; sending it (protobuf reads it as
    UTF-8) attaches a UTF-8 copy to a non-ASCII str, which the count includes from the start."""
    from streamlit.proto.Markdown_pb2 import Markdown

    for text in ("‖α·f(x)‖ " * 500, "é" * 10, "😀 a" * 7, "plain ascii " * 40):
        counted = nbytes(text)
        Markdown(body=text)  # what st.markdown does with it
        assert counted == nbytes(text) == sys.getsizeof(text)
    assert nbytes("‖α" * 1000) > 2 * 2000 + 5 * 1000  # two bytes a character, and the UTF-8 copy beside them


def test_a_model_inside_a_result_counts_nothing(make_model):
    model = make_model()
    assert nbytes({"model": model, "n": 3}) < 1000  # the model cache owns it


def test_byte_lru_drops_the_least_recently_used_over_its_budget():
    cache = ByteLRU(budget=300)
    assert cache.put("a", None, size=100) and cache.put("b", None, size=100) and cache.put("c", None, size=100)
    cache.get("a")  # now the most recently used
    cache.put("d", None, size=150)
    assert list(cache) == ["a", "d"] and cache.total == 250 and cache.evicted == 2
    assert not cache.put("huge", None, size=301) and "huge" not in cache  # larger than the whole budget
    cache.put("a", None, size=10)  # a key put again is counted once, at its new size
    assert cache.total == sum(cache.size_of(k) for k in cache)


def test_the_gate_keeps_results_within_its_byte_budget():
    gate = Gate(slots=1, budget=3 * MB)
    for i in range(10):
        gate.run(("sentence", i), lambda: np.zeros(MB // 8))  # 1 MB each
    stats = gate.stats()
    assert stats["bytes"] <= 3 * MB and stats["entries"] <= 3 and stats["evicted"] >= 7
    assert gate.cached(("sentence", 9)) and not gate.cached(("sentence", 0))
    assert stats["busy"] == stats["running"] == stats["waiting"] == stats["sharing"] == 0
    gate.run("big", lambda: np.zeros(MB))  # 8 MB: handed out, not kept
    assert not gate.cached("big")


def test_the_gate_sets_aside_what_its_running_computation_may_use(monkeypatch):
    """The work of a slot comes out of the gate's budget: results and the computation in flight share it."""
    gate = Gate(slots=1, budget=5 * MB, work=2 * MB)
    for i in range(10):
        gate.run(("sentence", i), lambda: np.zeros(MB // 8))  # 1 MB each
    assert gate.stats()["budget"] == 3 * MB and gate.stats()["bytes"] <= 3 * MB and gate.stats()["entries"] <= 3
    assert Gate(slots=2, budget=5 * MB, work=2 * MB).stats()["budget"] == MB  # one set-aside per slot
    assert Gate(budget=MB, work=2 * MB).stats()["budget"] == 0  # nothing kept, everything still computed
    from serving import heavy

    monkeypatch.delenv(heavy.SET_ASIDE_ENV, raising=False)
    assert heavy._work_from_env() == memory.WORK_BYTES < memory.GATE_BYTES  # set aside by default
    monkeypatch.setenv(heavy.SET_ASIDE_ENV, "0")
    assert heavy._work_from_env() == 0  # the operator's choice: the results keep the whole budget


def test_the_shared_figures_leave_room_for_the_pages_being_drawn():
    """The figures kept and the figures page runs are serialising share one budget, as the gate's results and its
    computation do; the same switch gives the kept ones all of it."""
    assert 0 < memory.DRAWING_BYTES < memory.FIGURE_BYTES
    assert memory.set_aside(memory.DRAWING_BYTES, {}) == memory.DRAWING_BYTES
    assert memory.set_aside(memory.DRAWING_BYTES, {memory.SET_ASIDE_ENV: "0"}) == 0
    if memory.SET_ASIDE_ENV not in os.environ:  # the process's own cache, made at import
        assert figures._figures.budget == memory.FIGURE_BYTES - memory.DRAWING_BYTES


def test_shared_figures_are_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(figures, "_figures", ByteLRU(2 * MB))
    for i in range(6):
        figures.shared(lambda seed: {"z": np.full(MB // 8, seed, dtype=np.float64)}, i)
    assert figures._figures.total <= 2 * MB and len(figures._figures) <= 2


def test_the_budgets_are_named_in_bytes():
    assert memory.GATE_BYTES >= 64 * MB and memory.FIGURE_BYTES >= 16 * MB
    assert "bytes" in memory.__doc__


def long_source(encode_src, make_model):
    model = make_model(max_len=96, vocab_size=8000)  # the shipped model's vocabulary: rows of 32 kB
    words = "the cat sat on the mat and the dog saw a bird in the tree".split()
    src = encode_src(" ".join(words * 8))[: model.cfg.max_len - 1]
    return model, src


def test_a_shared_decoding_of_a_long_sentence_is_small(make_model, encode_src):
    model, src = long_source(encode_src, make_model)
    vocab = model.cfg.vocab_size
    stepper = Stepper(model, src, max_new_tokens=60)
    decoding = decode(stepper)
    assert decoding.n_steps >= 30
    attention = sum(nbytes(r.cross_attention) + nbytes(r.self_attention) for r in decoding.records)
    rows = decoding.n_steps * vocab * 4  # what the full log-probability rows would hold
    kept = nbytes(decoding) - attention
    assert kept < decoding.n_steps * 4096 and kept < rows / 3
    full = nbytes(stepper.records)  # the stepper itself keeps the rows, for the lens and the tests
    assert full - attention > rows
    for shared, own in zip(decoding.records, stepper.records, strict=True):
        assert shared.log_probs is None and len(shared.kept) >= min(TOP_KEPT, vocab)
        assert shared.log_prob(own.token_id) == pytest.approx(float(own.log_probs[own.token_id]))
        assert shared.top(10) == own.top(10)
        with pytest.raises(KeyError):
            shared.log_prob(next(t for t in range(vocab) if t not in dict(shared.kept)))


def test_a_shared_lab_decoding_keeps_slim_pipelines(make_model, encode_src):
    model, src = long_source(encode_src, make_model)
    cfg = SamplingConfig("sample", temperature=1.3, top_k=20, top_p=0.9, seed=5).validate()
    run = lab_decoding(model, src, cfg, max_new_tokens=40)
    per_step = nbytes(run.pipelines) / len(run.pipelines)
    assert per_step < 2 * model.cfg.vocab_size  # its five [vocab] rows would be 17 bytes a token
    pipe = run.pipelines[3]
    dense = pipe.dense()
    assert dense.final.shape == (model.cfg.vocab_size,) and pipe.final_prob(pipe.token_id) > 0
    assert float(dense.final[pipe.token_id]) == pipe.final_prob(pipe.token_id)


def test_freed_memory_is_handed_back_where_the_allocator_can():
    assert isinstance(memory.give_back(), bool)  # True on glibc, False elsewhere: never raises


def test_the_gate_stats_on_the_metrics_endpoint_read_back(monkeypatch):
    from streamlit.runtime.stats import GaugeStat

    from serving import heavy, metrics

    gate = Gate(slots=2, budget=MB)
    gate.run("k", lambda: np.zeros(1000))
    monkeypatch.setattr(heavy, "GATE", gate)
    [stats] = metrics._Provider().get_stats().values()
    assert all(isinstance(s, GaugeStat) for s in stats)
    text = "\n".join(s.to_metric_str() for s in stats)
    read = metrics.read(f"# TYPE {metrics.FAMILY} gauge\n{text}\nsession_events_total 3\n")
    assert read["slots"] == 2 and read["busy"] == 0 and read["entries"] == 1 and read["budget"] == MB
    assert read["bytes"] == gate.stats()["bytes"] > 8000 and "figure_bytes" in read
    assert isinstance(metrics.publish(), bool)  # registered where a Streamlit runtime exists (an AppTest's too)


def test_tidy_frees_what_only_reference_cycles_hold():
    """A stopped page run's traceback keeps its frames, and their arrays, in cycles: tidy() frees them."""
    import weakref

    class Holder:
        pass

    def stopped_run():
        figure = Holder()
        figure.z = np.zeros(1_000_000)
        try:
            raise RuntimeError("stopped")
        except RuntimeError as exc:
            figure.why = exc  # the exception's traceback holds this frame, whose locals hold the figure: a cycle
        return weakref.ref(figure)

    gc.disable()  # no automatic collection in between: only tidy() may free it
    try:
        alive = stopped_run()
        assert alive() is not None
        assert memory.tidy() > 0
        assert alive() is None
    finally:
        gc.enable()


#: Run in a fresh interpreter (a heap without holes: a free chunk large enough is reused whatever the threshold;
#: and the test process keeps glibc's defaults): free a 16 MB block (by default glibc then raises its mmap threshold
#: to 16 MB), allocate 8 MB, print the MB mapped, and which settings were applied.
_MAPPED = """
import ctypes, sys
from serving import memory
from serving.memory_probe import malloc_info
applied = memory.tune_allocator() if sys.argv[1] == "tuned" else []
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))
before = malloc_info()["mmapped"]
block = libc.malloc(8 << 20)
print((malloc_info()["mmapped"] - before) >> 20, ",".join(applied))
"""


def test_the_tuned_allocator_maps_a_large_block_even_after_a_larger_one_was_freed():
    from serving.memory_probe import malloc_info

    if not hasattr(ctypes.CDLL(None), "mallopt") or not malloc_info():
        pytest.skip("not glibc 2.33+")

    def mapped(how: str, **environ: str) -> tuple[int, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | environ
        run = subprocess.run(
            [sys.executable, "-c", _MAPPED, how], capture_output=True, text=True, cwd=ROOT, check=True, env=env
        )
        mb, _, applied = run.stdout.strip().partition(" ")
        return int(mb), applied

    assert mapped("default") == (0, "")  # from the heap, where it leaves a hole once freed
    assert mapped("tuned") == (8, "M_MMAP_THRESHOLD,M_TRIM_THRESHOLD,M_ARENA_MAX")
    # an operator's threshold (32 MiB, set at start-up) wins; the others are still applied
    assert mapped("tuned", MALLOC_MMAP_THRESHOLD_=str(32 << 20)) == (0, "M_TRIM_THRESHOLD,M_ARENA_MAX")
