"""Weighted k-NN classification of frozen global features (``make knn``): ``run`` (the entry point)."""
