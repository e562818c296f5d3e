"""tools.lease_size: what a call to a lent machine would send, measured before it is refused."""

from __future__ import annotations

import subprocess

import pytest

from tools import lease_size


@pytest.fixture
def repo(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("data/\n")
    (tmp_path / "tracked.bin").write_bytes(b"x" * 1000)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.bin", ".gitignore"], check=True)
    (tmp_path / "untracked.txt").write_bytes(b"y" * 200)  # not ignored: it travels too
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tsv.gz").write_bytes(b"z" * 5000)  # ignored: only when carried
    return tmp_path


def test_the_tree_counts_tracked_and_unignored_files_and_carried_paths_add(repo):
    bare = lease_size.measure([], repo)
    assert bare["tree"] == 1000 + 200 + len("data/\n") and bare["carried"] == {}
    carried = lease_size.measure(["data"], repo)
    assert carried["carried"] == {"data": 5000} and carried["total"] == bare["tree"] + 5000
    assert carried["margin"] == lease_size.LIMIT_BYTES - carried["total"]


def test_a_carried_path_that_is_tracked_is_not_counted_twice(repo):
    m = lease_size.measure(["tracked.bin"], repo)
    assert m["total"] == m["tree"] + 1000 and m["tree"] == 200 + len("data/\n")


def test_over_the_limit_exits_1_and_says_refused(repo, monkeypatch, capsys):
    monkeypatch.setattr(lease_size, "REPO", repo)
    assert lease_size.main(["--carry", "data"]) == 0
    monkeypatch.setattr(lease_size, "LIMIT_BYTES", 3000)
    assert lease_size.main(["--carry", "data", "missing"]) == 1
    out = capsys.readouterr().out
    assert "REFUSED" in out and "carried missing: 0.0 MiB (not here)" in out


def test_outside_a_checkout_it_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lease_size, "REPO", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert lease_size.main([]) == 2
    assert "not a git checkout" in capsys.readouterr().err
