"""``python -m skipless.eval.knn [key=value ...]`` (``make knn``):
weighted k-NN top-1/top-5 of frozen CLS features (DINO's protocol).

The entry point is ``skipless.eval.knn.run.main``; ``--help`` lists the keys and their defaults."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
