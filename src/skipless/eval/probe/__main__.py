"""``python -m skipless.eval.probe key=value ...`` (``make probe``): ``skipless.eval.probe.run.main``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
