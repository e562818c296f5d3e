"""Data-parallel training through the ordinary trainer: ``torchrun --nproc-per-node 2 -m trainer.train`` on CPU
(gloo). The runs are real two-process launches of a tiny model; the helpers are tested as pure functions."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from model.baseline import build_model
from model.checkpoint import load_checkpoint
from trainer import train
from trainer.options import parse_config
from training.batches import EpochPlan, collate, encode_pairs, loss_fn
from training.data import load_data
from training.distributed import Dist, dist_from_env, model_flops_utilization, peak_tflops_for, shard_batches
from training.flops import matmul_weights_per_token, training_flops
from training.schedule import factor_for_peak, noam_lr

# One worker runs every test here, so the module's torchrun launches are made once, not once per worker
pytestmark = [
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()),
        reason="this torch build has no torch.distributed with gloo",
    ),
    pytest.mark.xdist_group("ddp-runs"),
]

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--device",
    "cpu",
    "--threads",
    "1",
    "--limit-train",
    "64",
    "--vocab-size",
    "300",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--layers",
    "1",
    "--d-ff",
    "64",
    "--batch-tokens",
    "400",
    "--warmup",
    "5",
    "--eval-sentences",
    "4",
    "--no-progress",
    "--no-snapshots",
]
LM = ["--arch", "decoder-only", *TINY]
TIMEOUT = 120  # seconds for one launch; a hang in an all-reduce fails the test instead of stalling it


def torchrun_cmd(out: Path, *args) -> list[str]:
    """Two CPU processes of the training CLI; ``--standalone`` lets torchrun pick a free rendezvous port."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer.train",
        "--out",
        str(out),
        *map(str, args),
    ]


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def torchrun(out: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        torchrun_cmd(out, *args), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=TIMEOUT
    )


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def rank_pid(agent_pid: int, rank: int) -> int | None:
    """The pid of the worker with ``RANK=rank`` among the torchrun agent's children (Linux ``/proc``)."""
    for task in Path(f"/proc/{agent_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in environ:
                return int(child)
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``stopped``: SIGTERM to rank 1 alone mid-run; ``resumed``: it continued to ``stop + 3`` steps with
    ``--resume``; ``straight``: the same recipe run to that step in one go. The recipe is a language model
    (decoder-only): what these runs check does not depend on the architecture, they also show that the sharding does
    not, and the translator's two-process step is checked to the number by the one-step test."""
    root = tmp_path_factory.mktemp("ddp")
    stopped = root / "stopped"
    proc = subprocess.Popen(
        torchrun_cmd(stopped, *LM, "--max-steps", 10_000, "--log-every", 1, "--eval-every", 10_000),
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        metrics, deadline = stopped / "metrics.jsonl", time.time() + TIMEOUT
        while time.time() < deadline and proc.poll() is None:
            if metrics.is_file() and metrics.read_text().count("\n") >= 2:
                break  # two steps done: every rank's signal handler is installed
            time.sleep(0.05)
        pid = rank_pid(proc.pid, 1) if proc.poll() is None else None
        if pid is None:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no rank 1 to signal; torchrun said:\n{proc.communicate()[0]}")
        os.kill(pid, signal.SIGTERM)
        stopped_log, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # the agent and its workers: the session this test started
            os.killpg(proc.pid, signal.SIGKILL)
    assert (stopped / "last" / "trainer_state.json").is_file(), stopped_log
    stop_step = json.loads((stopped / "last" / "trainer_state.json").read_text())["step"]
    final = stop_step + 3
    resumed = root / "resumed"
    shutil.copytree(stopped, resumed)
    resumed_run = torchrun(
        resumed, "--resume", "--max-steps", final, "--device", "cpu", "--threads", "1", "--no-progress"
    )
    straight = root / "straight"
    straight_run = torchrun(straight, *LM, "--max-steps", final, "--log-every", 2, "--eval-every", 3)
    return {
        "root": root,
        "stopped": (proc.returncode, stopped_log),
        "stop_step": stop_step,
        "final": final,
        "resumed": resumed_run,
        "straight": straight_run,
    }


def test_two_process_run_writes_once_from_rank_0(runs):
    run = runs["straight"]
    assert run.returncode == 0, run.stdout + run.stderr
    folder, final = runs["root"] / "straight", runs["final"]
    assert run.stdout.count("stopped at step") == 1  # rank 1 prints nothing of its own
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == final and status["exit_code"] == 0
    recs = records(folder)
    steps = [r["step"] for r in recs if "loss" in r]
    assert steps == list(range(2, final + 1, 2))  # once per log step, no duplicate lines from rank 1
    evals = [r["step"] for r in recs if "valid_loss" in r]
    assert evals == sorted(set(range(3, final + 1, 3)) | {final})
    assert recs[-1] == {"step": final, "event": "stopped", "reason": "max_steps"}
    assert all(r["tokens_per_s"] > 0 and "mfu" not in r for r in recs if "loss" in r)  # CPU: no peak, no mfu
    assert all("valid_ppl" in r and "valid_bleu" not in r for r in recs if "valid_loss" in r)  # a language model's
    best = load_checkpoint(folder / "best")
    assert best.config.d_model == 32 and best.config.vocab_size == best.tokenizer.vocab_size
    assert best.config.arch == "decoder-only"
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["recipe"]["processes"] == 2 and card["hardware"].startswith("2 × CPU")
    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["step"] == final
    opt = load_file(str(folder / "last" / "optimizer.safetensors"))
    assert "rng.torch" in opt and "rng.torch.1" in opt
    assert not torch.equal(opt["rng.torch"], opt["rng.torch.1"])  # each rank its own dropout stream


def test_sigterm_to_one_rank_stops_all(runs):
    rc, log = runs["stopped"]
    assert rc == 0, log
    folder = runs["root"] / "stopped"
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "stopped" and status["reason"] == "SIGTERM" and status["step"] == runs["stop_step"]
    recs = records(folder)
    assert recs[-1] == {"step": runs["stop_step"], "event": "stopped", "reason": "SIGTERM"}
    assert [r["step"] for r in recs if "loss" in r] == list(range(1, runs["stop_step"] + 1))


def test_resume_under_ddp_is_exact(runs):
    run = runs["resumed"]
    assert run.returncode == 0, run.stdout + run.stderr
    straight, resumed = runs["root"] / "straight", runs["root"] / "resumed"
    for name in ("model.safetensors", "optimizer.safetensors"):
        a, b = load_file(str(straight / "last" / name)), load_file(str(resumed / "last" / name))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (name, k)
    sa = json.loads((straight / "last" / "trainer_state.json").read_text())
    sb = json.loads((resumed / "last" / "trainer_state.json").read_text())
    for k in ("step", "epoch", "batch", "tokens_seen", "world_size"):
        assert sa[k] == sb[k], k
    assert [r["reason"] for r in records(resumed) if r.get("event") == "stopped"] == ["SIGTERM", "max_steps"]


def test_resume_with_another_process_count_is_refused(runs, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(runs["root"] / "stopped", folder)
    rc = train.main(["--out", str(folder), "--resume", "--no-progress", "--threads", "1", "--device", "cpu"])
    assert rc == 2
    assert "same number" in json.loads((folder / "status.json").read_text())["error"]


def test_one_ddp_step_is_the_step_on_averaged_gradients(tmp_path):
    """Without dropout, step 1 of the 2-process run equals one Adam step on the mean of the gradients of the
    epoch's batches 0 (rank 0) and 1 (rank 1), computed here in one process."""
    out = tmp_path / "one"
    # fp32 named: the reference step below is fp32, and auto would be bf16 on a CPU with native bf16.
    run = torchrun(
        out, *TINY, "--dropout", "0", "--max-steps", 1, "--log-every", 1, "--peak-tflops", 0.05, "--precision", "fp32"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    args, _ = parse_config(["--out", str(out), *TINY, "--dropout", "0"])
    ckpt = load_checkpoint(out / "last")
    torch.manual_seed(args.seed)
    model = build_model(ckpt.config, "ours")  # the initial weights: the trainer seeds, then builds
    model.train()
    sentences, phrases, words, _ = load_data(args)
    plan = EpochPlan(encode_pairs(ckpt.tokenizer, sentences, ckpt.config), [], [], args, lambda e: e)
    examples, batches = plan.examples(0)
    pad = ckpt.config.pad_id
    grads = []
    for idx in batches[:2]:
        model.zero_grad(set_to_none=True)
        batch = collate(examples, idx, pad, "cpu")
        loss_fn(model(batch.src, batch.tgt_in), batch.tgt_out, pad, args.label_smoothing).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for p, g0, g1 in zip(model.parameters(), *grads, strict=True):
        p.grad = (g0 + g1) / 2
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    d_model = ckpt.config.d_model
    lr = noam_lr(1, d_model, args.warmup, factor_for_peak(args.peak_lr, d_model, args.warmup))
    torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9).step()
    got = ckpt.model.state_dict()
    for name, want in model.state_dict().items():
        torch.testing.assert_close(got[name], want, rtol=1e-5, atol=1e-6, msg=name)
    # tokens_seen and the logged tokens_per_s are global: both ranks' batches.
    n_tokens = sum(len(examples[i].src) + len(examples[i].tgt) for idx in batches[:2] for i in idx)
    assert json.loads((out / "last" / "trainer_state.json").read_text())["tokens_seen"] == n_tokens
    rec = records(out)[0]
    assert rec["step"] == 1 and rec["tokens_seen"] == n_tokens
    # --peak-tflops is per device: MFU = both ranks' training FLOPs over the logging rank's window ÷ (2 × 0.05e12
    # FLOP/s), the window tokens_per_s is measured over, so the expectation needs no second clock and holds on a
    # loaded machine; the tolerance covers the logged roundings. Charging every parameter to every token (the old
    # estimate) would read about 2× this.
    n_src = sum(len(examples[i].src) for idx in batches[:2] for i in idx)
    n_tgt_in = sum(len(examples[i].tgt) - 1 for idx in batches[:2] for i in idx)
    seconds = n_tokens / rec["tokens_per_s"]
    want = training_flops(ckpt.config, n_src, n_tgt_in) / seconds / (2 * 0.05e12)
    assert rec["mfu"] == pytest.approx(want, rel=0.01)


# --- pure helpers ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,world", [(10, 2), (11, 2), (7, 3), (2, 2), (5, 1), (1, 2), (0, 4)])
def test_shard_batches_is_a_disjoint_equal_cover_of_the_truncated_list(n, world):
    batches = [[i] for i in range(n)]
    shards = [shard_batches(batches, r, world) for r in range(world)]
    usable = n - n % world
    assert {len(s) for s in shards} == {usable // world}  # every rank the same number of steps
    flat = [b[0] for s in shards for b in s]
    assert len(flat) == len(set(flat)) and sorted(flat) == list(range(usable))  # disjoint, covers the truncation
    for r, shard in enumerate(shards):
        assert all(b[0] % world == r for b in shard)
    # Step k trains on the consecutive batches k·W … k·W+W−1.
    for k in range(usable // world):
        assert sorted(s[k][0] for s in shards) == list(range(k * world, (k + 1) * world))
    if world == 1:
        assert shards[0] == batches


def test_dist_from_env():
    assert dist_from_env({}) == Dist()
    assert dist_from_env({"WORLD_SIZE": "1", "RANK": "0"}).enabled is False
    d = dist_from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"})
    assert (d.rank, d.local_rank, d.world_size, d.enabled, d.is_main) == (3, 1, 4, True, False)


def test_single_process_collectives_are_identities():
    d = Dist()
    assert d.agree(None, 17) == (None, 17) and d.agree("SIGTERM", 5) == ("SIGTERM", 5)
    assert d.mean(2.5) == 2.5 and d.gather("x") == ["x"] and d.broadcast({"a": 1}) == {"a": 1}
    d.barrier()


def test_peak_table_and_mfu():
    assert peak_tflops_for("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops_for("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops_for("NVIDIA A100-SXM4-80GB") == 312.0
    assert peak_tflops_for("NVIDIA L40S") == 362.0 and peak_tflops_for("NVIDIA L4") == 121.0
    assert peak_tflops_for("Some Other GPU") is None
    assert model_flops_utilization(6e14, None) is None
    assert model_flops_utilization(6e14, 1000.0) == pytest.approx(0.6)  # 6e14 FLOP/s of a 1000 TFLOP/s peak


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_training_flops_charge_each_token_the_weights_it_passes(arch):
    """6 FLOPs per weight per token, each token charged only its own side: for a decoder-only model every token
    passes every weight (≈ 6 × parameters per token); for an encoder-decoder a source token plus a target token
    together pass about all parameters once (6N per pair of tokens, not 12N as charging all of them would)."""
    from model.config import ModelConfig
    from model.transformer import Transformer

    cfg = ModelConfig(
        arch=arch,
        vocab_size=8000,
        d_model=256,
        n_heads=4,
        d_ff=1024,
        n_decoder_layers=3,
        n_encoder_layers=3 if arch == "encoder-decoder" else 0,
    )
    n = Transformer(cfg).num_parameters()
    per_src, per_tgt = matmul_weights_per_token(cfg)
    if arch == "decoder-only":
        assert per_src == 0 and training_flops(cfg, 0, 100) == pytest.approx(6 * n * 100, rel=0.01)
    else:
        assert training_flops(cfg, 100, 100) == pytest.approx(6 * n * 100, rel=0.01)
        assert per_tgt > per_src  # the decoder has cross-attention and the output projection
    assert training_flops(cfg, 10, 20) == 6 * (per_src * 10 + per_tgt * 20)
