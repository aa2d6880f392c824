"""``python -m eval.linear key=value ...`` (``make linear``): ``eval.linear.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
