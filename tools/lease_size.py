"""Will a lease's call be sent? ``python -m tools.lease_size [--carry PATH …]``.

A lent GPU machine is sent the checkout as it is on disk — every tracked file and every untracked file git does not
ignore — plus the ignored paths a call carries, at most :data:`LIMIT_BYTES` in all; a larger tree is refused before
any device time is spent. The shipped weights alone are most of that (the translator's float16 file is 56 MB), so a
lease that carries its data must be measured first. This prints the tree's bytes, each carried path's and the margin,
and exits 1 when the call would be refused::

    python -m tools.lease_size --carry data/gpu
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: What a call to the lent machine may send: the working tree and its carried paths together (64 MiB).
LIMIT_BYTES = 64 * 2**20
REPO = Path(__file__).resolve().parent.parent


def path_bytes(path: Path) -> int:
    """Bytes of the file ``path``, or of every file under the folder ``path`` (links not followed); 0 if absent."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    if not path.is_dir():
        return 0
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_symlink() or p.is_file())


def tree_files(repo: Path) -> list[Path]:
    """The files a call sends without being told: tracked ones that exist on disk, and untracked ones that git does
    not ignore (``git ls-files --cached --others --exclude-standard``). Raises ``RuntimeError`` outside a git
    checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"{repo} is not a git checkout: {exc}") from None
    files = [repo / name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]
    return [f for f in files if f.is_file() or f.is_symlink()]


def measure(carry: list[str], repo: Path | None = None) -> dict:
    """``{"tree", "carried": {path: bytes}, "total", "limit", "margin"}``, in bytes, for a call carrying ``carry``
    (paths relative to ``repo``). A carried path replaces whatever the tree holds there, so tree files under it are
    not counted twice."""
    repo = REPO if repo is None else repo
    carried = {c: path_bytes(repo / c) for c in carry}
    roots = [(repo / c).resolve() for c in carry]

    def under_carried(f: Path) -> bool:
        return any(f.resolve() == r or r in f.resolve().parents for r in roots)

    tree = sum(f.lstat().st_size for f in tree_files(repo) if not under_carried(f))
    total = tree + sum(carried.values())
    return {"tree": tree, "carried": carried, "total": total, "limit": LIMIT_BYTES, "margin": LIMIT_BYTES - total}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.lease_size", description=__doc__.split("\n\n")[0])
    p.add_argument("--carry", nargs="*", default=[], help="the ignored paths the call will carry (e.g. data/gpu)")
    args = p.parse_args(argv)
    try:
        m = measure(args.carry, REPO)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mib = 2**20
    print(f"working tree: {m['tree'] / mib:.1f} MiB")
    for path, size in m["carried"].items():
        print(f"carried {path}: {size / mib:.1f} MiB" + ("" if size else " (not here)"))
    verdict = "fits" if m["margin"] >= 0 else "REFUSED: over the limit"
    print(
        f"total {m['total'] / mib:.1f} MiB of {m['limit'] / mib:.0f} MiB: {verdict} "
        f"({abs(m['margin']) / mib:.1f} MiB {'to spare' if m['margin'] >= 0 else 'too much'})"
    )
    return 0 if m["margin"] >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
