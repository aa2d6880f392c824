"""``python -m eval.pca key=value ...`` (``make pca``): ``eval.pca.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
