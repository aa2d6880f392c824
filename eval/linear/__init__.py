"""Linear classification of frozen global features (``make linear``): ``run`` (the entry point) and the
classifier heads (``heads``)."""
