"""``python -m skipless.eval.conditioning [key=value ...]`` (``make conditioning``):
Jacobian condition numbers, embedding kappa and effective rank per block.

The entry point is ``skipless.eval.conditioning.run.main``; ``--help`` lists the keys and their defaults."""
from .run import main

if __name__ == "__main__":
    main()
