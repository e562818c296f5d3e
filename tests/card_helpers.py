"""What the card tests share: a leg's run folder (its metrics and model), the suite's reports on its candidate, and
the card the leg starts from."""

import json
from pathlib import Path

GOAL = {"The cat sat on the mat.": "Die Katze saß auf der Matte.", "I am hungry.": "Ich habe Hunger."}
START = {
    "step": 22631,
    "tokens_seen": 103_638_498,
    "train_minutes": 660.6,
    "legs": [{"leg": "leg 7 · shipped", "train_minutes": 660.6, "tokens_seen": 103_638_498, "shipped": True}],
}
VALID = {
    "tsv": "v.tsv",
    "sentences": 1600,
    "strategy": "greedy",
    "bleu": 35.0,
    "chrf": 55.0,
    "loss": 1.80,
    "perplexity": 6.05,
    "seconds": 5.0,
}


def leg_run(tmp_path: Path) -> Path:
    """A leg of 3,000 steps: training rows every 500, evaluations every 1,000, a resumed evaluation of step 2,000
    written twice (the later one counts), a line cut short by a kill, and the stop event."""
    run = tmp_path / "run"
    run.mkdir(parents=True)
    rows = [{"step": s, "loss": 2.0, "tokens_seen": s * 4000, "time_s": s * 0.7} for s in range(500, 3001, 500)]
    rows += [
        {"step": s, "valid_loss": 2.0 - s / 10000, "valid_chrf": 50 + s / 1000, "time_s": s * 0.7}
        for s in (1000, 2000, 3000)
    ]
    rows.append({"step": 2000, "valid_loss": 1.7, "valid_chrf": 52.5, "time_s": 1400.0})
    rows.append({"step": 3000, "event": "stopped", "reason": "max_steps"})
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"step": 30'
    (run / "metrics.jsonl").write_text(text, encoding="utf-8")
    write_config(run, layers=2)
    return run


def write_config(run: Path, layers: int) -> None:
    """The run's ``config.json``: a tiny translator of ``layers`` + ``layers`` layers."""
    config = {
        "vocab_size": 100,
        "d_model": 16,
        "n_heads": 2,
        "d_ff": 32,
        "n_encoder_layers": layers,
        "n_decoder_layers": layers,
        "norm_first": True,
    }
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")


def suite_report(strategy: str) -> dict:
    """A ``--suite --json`` report by ``strategy`` (``"greedy"`` or ``"beam"``) on the Multi30K, everyday and Ding
    sets, with each set's repeated words and the beam's width and alpha."""
    sets = [
        {
            "name": n,
            "sentences": 10,
            "references": 10,
            "scores": {strategy: {"bleu": b, "chrf": c}},
            "repeats": {strategy: {"checked": 10, "longest": run, "repeating": int(run >= 2), "looping": 0}},
        }
        for n, b, c, run in (
            ("multi30k test2016", 38.1, 63.0, 1),
            ("everyday", 60.0, 77.0, 2),
            ("ding test", 13.0, 38.2, 1),
        )
    ]
    return {
        "sets": sets,
        "goal": {s: {strategy: t} for s, t in GOAL.items()},
        "decoding": {"beam": 8, "alpha": 1.0, "limit": 0},
        "missing": [],
    }


def report_files(tmp_path: Path) -> dict[str, Path]:
    """The command's four JSON inputs written under ``tmp_path``: card, valid, greedy and beam reports."""
    files = {}
    for name, obj in (
        ("card", START),
        ("valid", VALID),
        ("greedy", suite_report("greedy")),
        ("beam", suite_report("beam")),
    ):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(obj), encoding="utf-8")
    return files
