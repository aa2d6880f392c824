"""PCA maps of patch features (``make pca``): ``run`` (the entry point) and the maps themselves (``maps``)."""
