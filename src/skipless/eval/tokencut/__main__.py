"""``python -m skipless.eval.tokencut [key=value ...]`` (``make tokencut``):
TokenCut object discovery (CorLoc) on frozen features.

The entry point is ``skipless.eval.tokencut.run.main``; ``--help`` lists the keys and their defaults."""
from .run import main

if __name__ == "__main__":
    main()
