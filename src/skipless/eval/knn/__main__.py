"""``python -m skipless.eval.knn key=value ...`` (``make knn``): ``skipless.eval.knn.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
