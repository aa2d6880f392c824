"""``python -m skipless.eval.pca key=value ...`` (``make pca``): ``skipless.eval.pca.run.main``."""
from .run import main

if __name__ == "__main__":
    main()
