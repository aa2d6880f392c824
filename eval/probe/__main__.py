"""``python -m eval.probe key=value ...`` (``make probe``): ``eval.probe.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
