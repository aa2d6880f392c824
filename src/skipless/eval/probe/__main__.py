"""``python -m skipless.eval.probe [key=value ...]`` (``make probe``):
dense linear-probe segmentation on frozen patch features.

The entry point is ``skipless.eval.probe.run.main``; ``--help`` lists the keys and their defaults."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
