"""Which backbones an evaluator runs on: ``CKPT="runs/a runs/b random"`` -> loaded, frozen models.

The grammar of ``CKPT`` items (run folders, backbone files, ``<state dict>:<arch>``, ``timm:<name>``,
``init:<model>[:<arch>]``, ``random``, the newest run when empty), where each backbone's results go and
how a backbone is loaded frozen, live in ``skipless.models.backbone_items``: the model layer, so that
fine-tuning (``make finetune``) reads a ``CKPT`` exactly as every evaluator does. Evaluators import the
names from here.
"""
from skipless.models.backbone_items import (INIT_PREFIX, RANDOM, TIMM_PREFIX, BackboneNotFoundError, BackboneSpec,
                                            backbone_key, load_spec, newest_run, resolve_backbones, run_config_value,
                                            split_items)

__all__ = ["INIT_PREFIX", "RANDOM", "TIMM_PREFIX", "BackboneNotFoundError", "BackboneSpec", "backbone_key",
           "load_spec", "newest_run", "resolve_backbones", "run_config_value", "split_items"]
