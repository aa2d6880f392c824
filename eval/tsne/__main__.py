"""``python -m eval.tsne key=value ...`` (``make tsne``): ``eval.tsne.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
