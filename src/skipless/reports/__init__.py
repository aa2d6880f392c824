"""What the suite writes for people to read: a run's header before it starts (``summary``: the model, the
method, the global batch and the peak lr), the one markdown table writer of every report (``tables``), and
the short TensorBoard names of runs (``tensorboard_names``)."""
