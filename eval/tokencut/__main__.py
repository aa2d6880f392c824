"""``python -m eval.tokencut key=value ...`` (``make tokencut``): ``eval.tokencut.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
