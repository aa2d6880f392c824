"""``python -m skipless.eval.linear [linear-preset=dino|zhang|mae] [key=value ...]`` (``make linear``):
linear classification of frozen CLS (+avgpool) features.

The entry point is ``skipless.eval.linear.run.main``; ``--help`` lists the keys and their defaults."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
