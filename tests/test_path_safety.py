"""Run folders and checkpoint folders are named, never pathed: ``../``, an absolute path, a link out of the folder,
a NUL or another control character is refused with a sentence saying why, never followed and never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from launching import launch as L
from model.checkpoint import list_checkpoints
from training.runs import folder_problem, run_checkpoints, safe_folders

ROOT = Path(__file__).resolve().parent.parent
EN_DE = ROOT / "checkpoints" / "en-de"
needs_ckpt = pytest.mark.skipif(not (EN_DE / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")


@pytest.fixture
def root(tmp_path) -> Path:
    """A folder of runs or checkpoints, with a folder outside it for links to point at."""
    (tmp_path / "outside" / "secret").mkdir(parents=True)
    (tmp_path / "root" / "ok").mkdir(parents=True)
    return tmp_path / "root"


@pytest.mark.parametrize(
    "name, why",
    [
        ("..", "not a folder name"),
        ("../outside", "is a path"),
        ("ok/../../outside", "is a path"),
        ("/etc", "is a path"),
        ("a\\b", "is a path"),
        ("", "not a folder name"),
        ("...", "not a folder name"),
        ("ok\x00", "control character"),
        ("ok\n", "control character"),
        ("o\x1b[31mk", "control character"),
    ],
)
def test_names_that_are_paths_or_hold_control_characters_are_refused(root, name, why):
    problem = folder_problem(root, name)
    assert problem and why in problem
    assert "\x00" not in problem and "\n" not in problem  # the message shows them as \x00, \x0a


def test_a_link_out_of_the_folder_is_refused_and_one_inside_is_not(root):
    (root / "out").symlink_to(root.parent / "outside")
    (root / "in").symlink_to(root / "ok")
    assert "link to a folder outside" in folder_problem(root, "out")
    assert folder_problem(root, "in") is None and folder_problem(root, "ok") is None
    assert folder_problem(root, "new run.2") is None  # a plain name that is not there yet is fine


def test_safe_folders_keeps_the_root_itself(root):
    (root / "out").symlink_to(root.parent / "outside")
    assert safe_folders(root, [root, root / "ok", root / "out"]) == [root, root / "ok"]


def make_run(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "status.json").write_text('{"state": "finished", "step": 3}', encoding="utf-8")


def test_the_runs_table_leaves_out_links_out_and_control_characters(root):
    make_run(root / "good")
    make_run(root.parent / "outside" / "elsewhere")
    (root / "linked").symlink_to(root.parent / "outside" / "elsewhere")
    make_run(root / "bad\nname")
    names = [r["name"] for r in L.list_runs(root)]
    assert "good" in names and "linked" not in names and "bad\nname" not in names


@needs_ckpt
def test_run_checkpoints_follow_no_link_out_of_the_runs(root):
    for run in ("r1", "r2"):
        (root / run).mkdir()
    shutil.copytree(EN_DE, root.parent / "outside" / "best")
    (root / "r1" / "best").symlink_to(root.parent / "outside" / "best")  # best/ itself a link out
    (root / "r3").symlink_to(root.parent / "outside")  # the whole run a link out: its best/ is outside
    shutil.copytree(EN_DE, root / "r2" / "best")
    assert list(run_checkpoints(root)) == ["r2/best"]


@needs_ckpt
def test_the_checkpoint_picker_lists_no_link_out_of_its_folder(root):
    shutil.copytree(EN_DE, root / "mine")
    (root / "theirs").symlink_to(EN_DE)
    os.mkdir(root / "tab\tname")
    assert [p.name for p in safe_folders(root, list_checkpoints(root))] == ["mine"]


# --- the link's ?ckpt= ------------------------------------------------------------------------------------------
@needs_ckpt
@pytest.mark.parametrize(
    "raw",
    [
        "../checkpoints/en-de",
        "checkpoints/../checkpoints/en-de",
        str(EN_DE),
        "/etc/passwd",
        "en-de\x00",
        "en-de\x1b[2J",
        "..",
        "brown-lm/../en-de",
    ],
)
def test_a_checkpoint_in_the_link_is_a_name_from_the_list(raw, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = raw
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    notes = " ".join(w.value for w in at.sidebar.warning)
    assert "Ignored `ckpt` (checkpoint)" in notes and "it is one of: en-de" in notes, notes
    assert "\x00" not in notes and "\x1b" not in notes
    assert at.sidebar.selectbox(key="app_ckpt").value == "en-de"


@needs_ckpt
def test_the_sidebar_lists_no_checkpoint_linked_from_outside(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "linked").symlink_to(EN_DE)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(extra))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "linked"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "linked" not in at.sidebar.selectbox(key="app_ckpt").options


@needs_ckpt
def test_the_training_page_says_which_folders_it_left_out(root, monkeypatch):
    from streamlit.testing.v1 import AppTest

    make_run(root / "good")
    (root / "linked").symlink_to(root.parent / "outside")
    make_run(root / "bad\x1bname")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.switch_page("app_pages/training/training.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warned = " ".join(w.value for w in at.warning)
    assert "“linked” is a link to a folder outside" in warned and "“bad\\x1bname”" in warned, warned
    (picker,) = [s for s in at.selectbox if s.label == "Watch run"]
    assert sorted(picker.options) == ["good", "ok"]  # "ok": the fixture's folder
