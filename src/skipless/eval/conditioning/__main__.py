"""``python -m skipless.eval.conditioning key=value ...`` (``make conditioning``): ``skipless.eval.conditioning.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
