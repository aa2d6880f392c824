"""The dense linear-probe evaluator (``make probe``): ``run`` (the entry point), ``settings``, ``compute``,
``outputs``, ``figures``, the feature cache, the linear heads (``linear_probe``) and mIoU (``miou``)."""
