"""``python -m skipless.eval.tsne [key=value ...]`` (``make tsne``):
t-SNE of the CLS tokens of a few random classes, per backbone and side by side.

The entry point is ``skipless.eval.tsne.run.main``; ``--help`` lists the keys and their defaults."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
