"""The Training page's launch form as data: its defaults, presets, validation and the command it becomes.

A form is a dict of :class:`training.config.TrainConfig` options (without ``out`` and ``resume``) plus ``data``,
one of :data:`DATA_SOURCES`, which sets the corpus options. Its defaults are the trainer's own
(:func:`form_defaults`); the presets are JSON files in ``launching/presets/`` (``{"name", "about", "values"}``, listed
in file-name order), each overriding some options. :func:`build_command` writes the command a user would type:
the options marked ``show`` always, every other option where it differs from the trainer's default.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from model.config import ARCHITECTURES, POS_ENCODINGS, ConfigError, ModelConfig
from training.checkpoints import hf_refusal
from training.config import FIELDS, defaults, flag_of, value_type
from training.runs import runs_root

REPO = Path(__file__).resolve().parent.parent
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
#: Training data: the Ding sentence pairs, optionally with phrase and word pairs sampled into every epoch; the
#: mixture of the prepared real corpora (Tatoeba, Multi30K, BConTrasT, Ding) with a share each (``--mix``); the
#: user's uploaded TSV; the Brown corpus (English sentences, for a decoder-only model only). A decoder-only run
#: trains on each side of the pairs as its own text.
DATA_SOURCES = ("sentences", "sentences+phrases", "sentences+phrases+words", "mixture", "tsv", "brown")
DEVICES = ("auto", "cpu", "cuda")
PHRASES_PER_EPOCH = 2000
WORDS_PER_EPOCH = 2000
NOT_IN_FORM = ("out", "resume")


def form_defaults() -> dict:
    """Every knob of the launch form with the trainer's default (``no_progress`` on: nobody watches a bar)."""
    out = {k: v for k, v in defaults().items() if k not in NOT_IN_FORM}
    return {**out, "no_progress": True, "data": "sentences"}


def load_presets(folder: Path = PRESETS_DIR) -> dict[str, dict]:
    """``{name: values}`` of the preset files in ``folder``, in file-name order. Raises ``ValueError`` for a preset
    that sets something the form does not have (a typo would otherwise be ignored silently)."""
    presets = {}
    known = set(form_defaults())
    for path in sorted(Path(folder).glob("*.json")):
        preset = json.loads(path.read_text(encoding="utf-8"))
        unknown = set(preset["values"]) - known
        if unknown:
            raise ValueError(f"{path.name}: unknown option(s) {sorted(unknown)}")
        presets[preset["name"]] = preset["values"]
    return presets


PRESETS: dict[str, dict] = load_presets()


def preset_form(name: str) -> dict:
    """The full form of a preset (defaults overlaid with the preset's values). Raises ``KeyError`` for an unknown
    name."""
    return {**form_defaults(), **PRESETS[name]}


def warm_start_choices() -> list[str]:
    """Checkpoint folders a run can start from (``--init-from``), relative to the repository where possible: the
    shipped ones under ``checkpoints/`` and every run's ``best/``. Hugging Face folders are left out: the trainer
    starts only from checkpoints of ours (:func:`training.checkpoints.warm_start`)."""
    from model.checkpoint import is_own_checkpoint_dir, list_checkpoints

    found = [p for p in list_checkpoints(REPO / "checkpoints") if is_own_checkpoint_dir(p)]
    root = runs_root()
    if root.is_dir():
        found += sorted(p / "best" for p in root.iterdir() if (p / "best" / "model.safetensors").is_file())
    return [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in found]


def _number_error(name: str, value) -> str | None:
    """Why ``value`` is not a valid number for option ``name`` (its type and its ``check``), or ``None``."""
    kind = value_type(name)
    if value is None and FIELDS[name].default is None:
        return None
    if (
        isinstance(value, bool)
        or value is None
        or not isinstance(value, (int, float))
        or (kind is int and int(value) != value)
    ):
        return f"{name} must be a number, got {value!r}"
    check = FIELDS[name].metadata.get("check")
    if check == "positive" and not value > 0:
        return f"{name} must be positive, got {value}"
    if check == "nonneg" and value < 0:
        return f"{name} must not be negative, got {value}"
    if check == "rate" and not 0.0 <= value < 1.0:
        return f"{name} must lie in [0, 1), got {value}"
    if check == "min100" and value < 100:
        return f"{name} must be at least 100, got {value}"
    return None


def validate_form(form: dict) -> list[str]:
    """Human-readable errors of a launch form (empty list = fine): every number against its option's type and
    ``check``, every choice, the data source, the warm-start folder, and the model's own shape checks."""
    f = {**form_defaults(), **form}
    errors = [
        e
        for name in FIELDS
        if name not in NOT_IN_FORM and value_type(name) in (int, float) and (e := _number_error(name, f.get(name)))
    ]
    errors += [
        f"{name} must be one of {', '.join(meta['choices'])}, got {f[name]!r}"
        for name, fld in FIELDS.items()
        if (meta := fld.metadata).get("choices") and name != "arch" and f.get(name) not in meta["choices"]
    ]
    if f.get("init_from") and not (REPO / str(f["init_from"])).is_dir() and not Path(str(f["init_from"])).is_dir():
        errors.append(f"no checkpoint folder {f['init_from']!r} to start from")
    elif f.get("init_from") and (reason := hf_refusal(REPO / str(f["init_from"]))):
        errors.append(reason)
    if f["arch"] not in ARCHITECTURES:
        errors.append(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {f['arch']!r}")
    if f["pos_encoding"] not in POS_ENCODINGS:
        errors.append(f"unknown positional encoding {f['pos_encoding']!r} (one of {', '.join(POS_ENCODINGS)})")
    if f["device"] not in DEVICES:
        errors.append(f"device must be one of {', '.join(DEVICES)}, got {f['device']!r}")
    if f["data"] not in DATA_SOURCES:
        errors.append(f"data must be one of {DATA_SOURCES}, got {f['data']!r}")
    elif f["data"] == "tsv" and not f.get("train_tsv"):
        errors.append("upload a source<TAB>target .tsv file to train on your own data")
    elif f["data"] == "mixture":
        errors += mixture_errors(f.get("mix"))
    elif f["data"] == "brown" and f["arch"] != "decoder-only":
        errors.append(
            "the Brown corpus is English only: it trains a language model (architecture decoder-only), not a translator"
        )
    if f.get("reverse") and (f["arch"] != "encoder-decoder" or f["data"] == "brown"):
        errors.append(
            "German → English turns translation pairs round: it needs the encoder-decoder architecture "
            "and pairs, not the Brown corpus"
        )
    if not errors:
        try:  # the model's own checks (d_model % n_heads, RoPE's even d_k, sinusoidal's even d_model, …)
            ModelConfig(
                arch=f["arch"],
                d_model=f["d_model"],
                n_heads=f["n_heads"],
                n_encoder_layers=f["layers"],
                n_decoder_layers=f["layers"],
                d_ff=f["d_ff"],
                dropout=f["dropout"],
                pos_encoding=f["pos_encoding"],
                norm_first=bool(f["norm_first"]),
            )
        except ConfigError as exc:
            errors.append(str(exc))
    return errors


def mixture_errors(mix: str | None, prepared: Path | None = None) -> list[str]:
    """Why ``mix`` (``"tatoeba=1,multi30k=2,…"``) cannot be trained on now: malformed, every share 0, or a corpus
    with a share that is not prepared in ``prepared`` (default ``data/prepared``; the message names the command)."""
    from corpora.files import DataError
    from corpora.mixture import parse_repeats, prepared_corpora
    from corpora.parallel import BACKTRANSLATED, PREPARED

    try:
        shares = parse_repeats(mix or "", {})
    except DataError as exc:
        return [str(exc)]
    if not any(shares.values()):
        return ["give at least one corpus of the mixture a share above 0"]
    ready = prepared_corpora(prepared or PREPARED)
    missing = [c for c, n in shares.items() if n and c not in ready]
    if missing:
        how = (
            "python -m tools.backtranslate makes the back-translated pairs"
            if missing == [BACKTRANSLATED]
            else "run python -m corpora prepare all"
            + (" and python -m tools.backtranslate" if BACKTRANSLATED in missing else "")
        )
        return [f"{', '.join(missing)} not prepared yet: {how} (see docs/training.md), or give it the share 0"]
    return []


def with_data_source(form: dict) -> dict:
    """``form`` with the corpus options its ``data`` source stands for: ``--train-tsv`` for an upload, ``--mix`` for
    the mixture, ``--corpus brown``, or the shipped pairs with phrase and word pairs sampled into every epoch (a
    preset's own counts kept). Raises ``KeyError`` for a form without ``data``."""
    code = form["data"]
    f = {**form, "corpus": "brown" if code == "brown" else "ding"}
    if code != "tsv":
        f["train_tsv"] = None
    if code != "mixture":
        f["mix"] = None
    f["phrases_per_epoch"] = (f.get("phrases_per_epoch") or PHRASES_PER_EPOCH) if "phrases" in code else 0
    f["words_per_epoch"] = (f.get("words_per_epoch") or WORDS_PER_EPOCH) if "words" in code else 0
    return f


def build_command(form: dict, run_dir: str | Path) -> list[str]:
    """The CLI a user would type for this form: ``[python, -m, trainer.train, --out, run_dir, …]``, options in
    :class:`training.config.TrainConfig` order."""
    f = with_data_source({**form_defaults(), **form})
    base = defaults()
    cmd = [sys.executable, "-m", "trainer.train", "--out", str(run_dir)]
    for name, fld in FIELDS.items():
        if name in NOT_IN_FORM:
            continue
        value = f.get(name)
        if isinstance(fld.default, bool):
            if value != fld.default:
                cmd.append(flag_of(name))
        elif fld.metadata.get("show") or value not in (None, "", base[name]):
            cmd += [flag_of(name), str(value)]
    return cmd
