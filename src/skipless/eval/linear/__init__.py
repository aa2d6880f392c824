"""Linear classification of frozen global features (``make linear``): ``run`` (the entry point), the
classifier heads (``heads``), the recipe a preset states (``recipe``), its optimizer (``optimizers``, with
MAE's ``lars``) and lr schedule (``schedule``)."""
