"""Errors of a pretraining run that the user must see as one clear sentence."""

from ..errors import SkiplessError


class NothingToResumeError(SkiplessError, FileNotFoundError):
    """RESUME=1 was asked for a run that has no checkpoint to continue from."""
