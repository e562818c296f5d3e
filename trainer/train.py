"""Entry point: ``python -m trainer.train --out runs/NAME [options]`` (also under ``torchrun``); see
:mod:`trainer.cli` for the options and the run folder, :mod:`trainer.loop` for the loop."""

import sys

from trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
