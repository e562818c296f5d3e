"""Attention-page speed on this machine: ``python -m benchmarks.attention [--checkpoint DIR]``.

Prints a table: the head-ablation sweep (every head of every kind removed alone, teacher-forced log-prob of
the greedy translation) for a ~15-token sentence, in seconds; and the Attention page's render time in
Streamlit's AppTest with the full layers × heads grid open (median of warm reruns, model already cached).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.table import print_table
from decoding.stepping import Stepper, prepare_source
from decoding.translate import DEFAULT_CHECKPOINT
from model.checkpoint import load_checkpoint
from reading.analysis import ablation_sweep

SENTENCE = "The animal didn't cross the street because it was too tired."
ROOT = Path(__file__).resolve().parent.parent


def time_sweep(checkpoint: str, repeats: int) -> tuple[int, int, float]:
    """``(source tokens, heads, median seconds)`` of :func:`reading.analysis.ablation_sweep`."""
    ckpt = load_checkpoint(checkpoint)
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SENTENCE, cfg.max_len, cfg.eos_id, cfg.unk_id)
    stepper = Stepper(ckpt.model, src.ids)
    stepper.run_to_end()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sweep = ablation_sweep(ckpt.model, src.ids, stepper.tokens)
        times.append(time.perf_counter() - start)
    heads = sum(v.numel() for v in sweep.values())
    return len(src.ids), heads, statistics.median(times)


def time_grid_render(repeats: int) -> float:
    """Median seconds of a warm AppTest rerun of the Attention page with the model grid tab open."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["text"] = SENTENCE
    at.run()
    at.switch_page("app_pages/attention/attention.py").run()
    at.session_state["at_tab"] = "Model grid"
    at.run()  # warm: model and translation cached
    if at.exception:
        raise RuntimeError(at.exception[0].message)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.attention", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    n_src, heads, sweep_s = time_sweep(args.checkpoint, args.repeats)
    render_s = time_grid_render(args.repeats)
    rows = [
        ("sentence", f"{n_src} source tokens"),
        (f"ablation sweep ({heads} heads), median", f"{sweep_s:.2f} s"),
        ("Attention page, model grid, AppTest rerun, median", f"{render_s:.2f} s"),
    ]
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
