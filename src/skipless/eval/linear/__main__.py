"""``python -m skipless.eval.linear key=value ...`` (``make linear``): ``skipless.eval.linear.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
