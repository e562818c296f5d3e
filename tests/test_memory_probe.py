"""The memory probe a soak switches on: off unless asked, and each line says where the process's memory is."""

from __future__ import annotations

import json
import sys

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
