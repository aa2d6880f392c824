"""``python -m skipless.eval.tsne key=value ...`` (``make tsne``): ``skipless.eval.tsne.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
