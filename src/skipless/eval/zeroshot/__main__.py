"""``python -m skipless.eval.zeroshot [key=value ...]`` (``make zeroshot``): zero-shot PIQA, HellaSwag,
WinoGrande, ARC-Easy and ARC-Challenge of causal language models, as lm-evaluation-harness 0.4.x scores them.

The entry point is ``skipless.eval.zeroshot.run.main``; ``--help`` lists the keys and their defaults."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
