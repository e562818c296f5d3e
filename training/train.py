"""Entry point: ``python -m training.train --out runs/NAME [options]`` (also under ``torchrun``); see
:mod:`training.cli` for the options and the run folder, :mod:`training.loop` for the loop."""

import sys

from training.cli import main

if __name__ == "__main__":
    sys.exit(main())
