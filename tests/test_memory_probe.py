"""The memory probe a soak switches on: off unless asked, each line says where the process's memory is, and the peak
watcher says what ran when the memory rose."""

from __future__ import annotations

import json
import sys
import threading
import time

from serving import memory_probe


def test_the_probe_is_off_without_its_switch(monkeypatch):
    monkeypatch.delenv(memory_probe.PROBE_ENV, raising=False)
    assert memory_probe.start_if_asked() is False


def test_a_line_holds_the_process_the_allocator_and_the_caches():
    line = memory_probe.sample()
    json.dumps(line)  # written as one JSON line
    assert set(line["caches"]) >= {"bytes", "figure_bytes", "budget"}
    if sys.platform.startswith("linux"):
        assert line["VmRSS"] > 10 * 2**20
        malloc = line["malloc"]
        if malloc:  # glibc 2.33+
            assert malloc["in_use"] > 0 and malloc["heap"] >= malloc["in_use"]


def _waiting(ready, done) -> None:
    ready.set()
    done.wait(10)


def test_stacks_name_what_each_thread_runs_in_this_repositorys_code():
    ready, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=_waiting, args=(ready, done), name="visitor-run")
    thread.start()
    try:
        ready.wait(5)
        stacks = memory_probe.stacks()
    finally:
        done.set()
        thread.join()
    (frames,) = [v for k, v in stacks.items() if k.startswith("visitor-run-")]
    assert frames[0].startswith("tests/test_memory_probe.py:") and frames[0].endswith(" _waiting")
    assert frames[-1].startswith("threading.py:")  # the innermost frame of all: where it waits


def test_the_peak_watcher_says_what_ran_when_the_memory_rose(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_probe, "PEAK_EVERY_S", 0.01)
    path, stop = tmp_path / "probe.jsonl", threading.Event()
    watcher = threading.Thread(target=memory_probe._watch_peaks, args=(str(path), stop))
    watcher.start()
    try:
        time.sleep(0.1)  # its first line: the memory as it starts
        block = bytearray(64 * 2**20)  # zeroed, so every page is touched
        deadline = time.time() + 10
        while time.time() < deadline and path.read_text().count("\n") < 2:
            time.sleep(0.02)
        del block
    finally:
        stop.set()
        watcher.join()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 2 and lines[-1]["peak"] >= lines[0]["peak"] + 32 * 2**20
    assert any(k.startswith("MainThread-") for k in lines[-1]["stacks"])  # this test, allocating
    assert set(lines[-1]["caches"]) >= {"bytes", "figure_bytes"}
