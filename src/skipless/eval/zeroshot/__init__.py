"""Zero-shot scoring of causal language models on PIQA, HellaSwag, WinoGrande, ARC-Easy and ARC-Challenge as
lm-evaluation-harness 0.4.x scores them (``make zeroshot``): ``run`` (the entry point), ``harness`` (the
log-likelihood requests and their scoring), ``tasks`` (each task's requests and metrics)."""
