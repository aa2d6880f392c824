"""``python -m skipless.eval.tokencut key=value ...`` (``make tokencut``): ``skipless.eval.tokencut.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
