"""Silence the libraries' notices that are not the user's to act on, one message at a time (issue 27, item 12).

Before its first step a run printed, besides its header and Lightning's device lines (kept: they say
which device runs), four notices a user can do nothing about:

- Lightning's advertisements for its cloud logger and model registry (``💡 Tip: ... litlogger`` /
  ``litmodels``), sent through ``rank_zero_info`` to the ``lightning.pytorch.utilities.rank_zero``
  logger: a ``logging.Filter`` on that logger drops records that start with ``💡 Tip:`` and nothing else;
- ```Trainer(limit_train_batches=1.0)` was configured so 100% ...``: Lightning says back the default
  whenever the value is passed; ``build_trainer`` passes None (Lightning's "not set") for 1.0;
- ```isinstance(treespec, LeafSpec)` is deprecated``: a FutureWarning of torch raised by Lightning's own
  ``lightning.pytorch.utilities._pytree``; ignored for that message from that module only;
- ```torch.jit.script` is deprecated``: torch's forward-mode autodiff scripts its own decompositions
  on the first ``jvp`` (``torch/_decomp/decompositions_for_jvp.py``); the conditioning diagnostics
  silence it around that first call only (``analysis/jacobians.py``), so a user's own
  ``torch.jit.script`` still warns;
- ``You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not
  resumable``: Lightning looks for a ``state_dict`` on the loader itself, while the suite's loader keeps its
  position through a callback (``loader_state.LoaderPosition``) and resumes exactly; ignored for that message
  from Lightning's training epoch loop only.

Every other warning and log line goes through unchanged.
"""
from __future__ import annotations

import logging
import warnings

RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
ADVERTISEMENT = "💡 Tip:"


class _DropAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVERTISEMENT)


def silence_library_notices() -> None:
    """Install the filters above (idempotent: a second call adds nothing)."""
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    if not any(isinstance(f, _DropAdvertisements) for f in logger.filters):
        logger.addFilter(_DropAdvertisements())
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")
    warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended",
                            module=r"lightning\.pytorch\.loops\.training_epoch_loop")
