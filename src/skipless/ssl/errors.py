"""Errors of a pretraining run that the user must see as one clear sentence."""

from ..errors import SkiplessError


class DivergenceError(SkiplessError, RuntimeError):
    """The loss or the parameters became non-finite: the run stopped, its last good checkpoint is kept."""


class NothingToResumeError(SkiplessError, FileNotFoundError):
    """RESUME=1 was asked for a run that has no checkpoint to continue from."""
