"""App-level AppTest tests of corrupt, missing and vanishing checkpoints: each gives a readable message, never an
exception. Extra checkpoints are offered to the app through ``$ATTENTION_EXPLORER_CHECKPOINTS``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from app_helpers import (
    ATTENTION_PAGE,
    DEFAULT_CKPT,
    ROOT,
    assert_clean,
    button,
    make_app,
    messages,
    n_alignments,
    n_charts,
)

from model.checkpoint import is_checkpoint_dir
from ui.checkpoints import CHECKPOINTS_ENV
from ui.state import checkpoint_label

pytestmark = pytest.mark.usefixtures("app_at_repo_root")


# --- corrupt and missing checkpoints -------------------------------------------------------------------
def _copy_checkpoint(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "card.json"):
        if (DEFAULT_CKPT / name).is_file():
            shutil.copyfile(DEFAULT_CKPT / name, dest / name)
    return dest


def _garbage_weights(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(os.urandom(4096))


def _truncated_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _garbage_config(folder: Path) -> None:
    (folder / "config.json").write_text("{ this is not json", encoding="utf-8")


def _wrong_config(folder: Path) -> None:
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    cfg["d_model"] = cfg["d_model"] * 2
    cfg["d_ff"] = cfg["d_ff"] * 2
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")


def _garbage_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": 42}', encoding="utf-8")


def _garbage_card(folder: Path) -> None:
    (folder / "card.json").write_bytes(b"\xff\xfe not json")


CORRUPTIONS = {
    "garbage-weights": _garbage_weights,
    "truncated-weights": _truncated_weights,
    "garbage-config": _garbage_config,
    "weights-do-not-fit-config": _wrong_config,
    "garbage-tokenizer": _garbage_tokenizer,
}


@pytest.fixture
def extra_root(tmp_path, monkeypatch) -> Path:
    """A folder listed in ``$ATTENTION_EXPLORER_CHECKPOINTS`` (plus a nonexistent one, which is ignored)."""
    root = tmp_path / "extra-checkpoints"
    root.mkdir()
    monkeypatch.setenv(CHECKPOINTS_ENV, os.pathsep.join([str(root), str(tmp_path / "does-not-exist")]))
    return root


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_checkpoint_shows_a_readable_error(extra_root, corruption):
    name = f"broken-{corruption}"
    CORRUPTIONS[corruption](_copy_checkpoint(extra_root / name))
    at = make_app(ckpt=name)
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.selectbox(key="app_ckpt").value == name
    assert len(at.error) == 1
    msg = at.error[0].value
    assert msg.startswith("This checkpoint cannot be loaded:") and name in msg and "Pick another one" in msg
    assert "Traceback" not in msg
    assert n_charts(at) == 0 and len(at.button) == 0

    at.switch_page(ATTENTION_PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and at.error[0].value == msg


def test_sidebar_lists_extra_checkpoints_and_recovers(extra_root):
    _garbage_weights(_copy_checkpoint(extra_root / "broken"))
    _copy_checkpoint(extra_root / "copy-of-en-de")
    (extra_root / "not-a-checkpoint").mkdir()  # no files: not listed
    _copy_checkpoint(extra_root / "en-de")  # same name as the default: checkpoints/en-de wins
    _garbage_card(_copy_checkpoint(extra_root / "bad-card"))

    at = make_app()
    assert_clean(at)
    box = at.sidebar.selectbox(key="app_ckpt")
    assert box.options[0] == "en-de"
    # (a Hugging Face folder downloaded beside ours is listed too, labelled with its size and source)
    shipped = [checkpoint_label(d.name, d) for d in (ROOT / "checkpoints").iterdir() if is_checkpoint_dir(d)]
    assert sorted(box.options) == sorted([*shipped, "bad-card", "broken", "copy-of-en-de"])
    assert box.value == "en-de"

    box.select("broken").run()
    assert not at.exception
    assert len(at.error) == 1 and "model.safetensors" in at.error[0].value
    assert at.query_params["ckpt"] == "broken"

    at.sidebar.selectbox(key="app_ckpt").select("copy-of-en-de").run()
    assert_clean(at)
    assert at.query_params["ckpt"] == "copy-of-en-de" and len(at.button) == 4

    at.sidebar.selectbox(key="app_ckpt").select("bad-card").run()  # an unreadable card is not fatal
    assert_clean(at)
    assert len(at.button) == 4

    at.sidebar.selectbox(key="app_ckpt").select("en-de").run()
    assert_clean(at)
    button(at, "Next").click().run()
    assert_clean(at)
    assert n_alignments(at) == 1


def test_checkpoint_that_disappears(extra_root):
    """A checkpoint deleted while selected: a warning and the default model, or an error — never an exception."""
    folder = _copy_checkpoint(extra_root / "ephemeral")
    at = make_app(ckpt="ephemeral")
    assert_clean(at)
    assert at.sidebar.selectbox(key="app_ckpt").value == "ephemeral"
    shutil.rmtree(folder)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.warning or at.sidebar.warning or at.error
    assert "Traceback" not in messages(at)


def test_a_folder_version_is_read_again_once_its_time_is_up(tmp_path, monkeypatch):
    """A run asks for the version of its checkpoint's folder for every shared value: the files are stat'ed at most
    once per VERSION_TTL_S, and a folder retrained in place is noticed once that has passed."""
    import os

    from ui import folders

    (tmp_path / "config.json").write_text("{}")
    os.utime(tmp_path / "config.json", (1_000, 1_000))
    assert folders.folder_version(tmp_path) == 1_000
    os.utime(tmp_path / "config.json", (2_000, 2_000))
    assert folders.folder_version(tmp_path) == 1_000  # within the second: the version read a moment ago
    monkeypatch.setattr(folders, "VERSION_TTL_S", 0.0)
    assert folders.folder_version(tmp_path) == 2_000
    assert folders.folder_version(tmp_path / "missing") == 0.0
