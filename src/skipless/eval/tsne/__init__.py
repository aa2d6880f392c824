"""t-SNE of the class tokens of a few classes (``make tsne``, seed 002's Figure 3): ``run`` (the entry
point), the seeded choice of classes and images (``points``), the embedding (``embed``) and the
scatter plots (``figures``)."""
