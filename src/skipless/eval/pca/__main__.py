"""``python -m skipless.eval.pca [key=value ...]`` (``make pca``):
PCA images of patch features per block.

The entry point is ``skipless.eval.pca.run.main``; ``--help`` lists the keys and their defaults."""
from .run import main

if __name__ == "__main__":
    main()
