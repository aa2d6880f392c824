"""What each key of DINO's ``dino:`` section may hold, and how it meets the shared keys.

The shared keys (run, model, optim, train, diagnostics, data) are ``training/schema.py``'s; these rules
join them when ``ssl=dino`` (``skipless.ssl.Method.rules``), so a bad value is refused in the same one
sentence (``dino.local_crops_number must be an integer >= 0, got -1``).
"""
from __future__ import annotations

from ...config.rules import Rule
from ...training.schema import BOOL, COUNT, CROP_SCALE, POSITIVE, POSITIVE_INT, UNIT, tiles_patches, warmup_of

RULES: dict[str, Rule] = {
    "dino.out_dim": POSITIVE_INT,
    "dino.hidden_dim": POSITIVE_INT,
    "dino.bottleneck_dim": POSITIVE_INT,
    "dino.norm_last_layer": BOOL,
    "dino.use_bn_in_head": BOOL,
    "dino.student_temp": POSITIVE,
    "dino.warmup_teacher_temp": POSITIVE,
    "dino.teacher_temp": POSITIVE,
    "dino.warmup_teacher_temp_epochs": COUNT,
    "dino.center_momentum": UNIT,
    "dino.momentum_teacher": UNIT,
    "dino.freeze_last_layer_epochs": COUNT,
    "dino.global_crops_scale": CROP_SCALE,
    "dino.local_crops_scale": CROP_SCALE,
    "dino.local_crops_number": COUNT,
    "dino.global_crop_size": POSITIVE_INT,
    "dino.local_crop_size": POSITIVE_INT,
}

RELATIONS = (warmup_of("dino.warmup_teacher_temp_epochs"), tiles_patches("dino.global_crop_size", "dino.local_crop_size"))
