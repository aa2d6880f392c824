"""``python -m eval.conditioning key=value ...`` (``make conditioning``): ``eval.conditioning.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
