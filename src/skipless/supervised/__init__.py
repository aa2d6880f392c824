"""Supervised classification of the ViT family (``make train``): the paper's Section 6.1 experiment and
the seeds/003 ablations (which shortcut is removed), beside the self-supervised methods and sharing their
parts (data readers, optimizers, schedules, checkpoints, resume, divergence guard, TensorBoard)."""
