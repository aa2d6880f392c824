"""The language model of seed 000 (App. A.8, ``make lm``): next-token training of ``models/causal_lm.py``'s
``CausalLM`` on packed text, beside the self-supervised methods (``ssl``) and the classifier (``supervised``) and
sharing their parts (run folders, resume, precision, accumulation, the divergence guard, optimizers, TensorBoard).

- ``module.py``: the LightningModule (loss, schedule, validation, tokens/s);
- ``data.py``: the text a run reads, built on first use (corpus, tokenizer, packed streams), and its loaders;
- ``schema.py``: what each key of ``configs/lm.yaml`` may hold.
"""
