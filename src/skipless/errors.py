"""The one base class of user-facing errors.

An entry point (``make pretrain``, ``make probe`` ...) catches ``SkiplessError`` and nothing else:
its message is printed as one sentence that says what was expected, while any other exception is
an internal bug and keeps its traceback. Each module raises its own subclass (``ConfigError``,
``DatasetNotFoundError``, ``BackboneLoadError``, ``DivergenceError`` ...); a subclass may also derive
from the matching builtin (``ValueError``, ``FileNotFoundError``) so that library callers who catch
those keep working.
"""
from typing import Callable, TypeVar

T = TypeVar("T")

# The exit statuses of the entry points, which a job runner (``make paper``, a cluster script) reads:
EXIT_ERROR = 1        # a SkiplessError: one sentence on stderr
EXIT_BUSY = 73        # another run holds the run folder (sysexits' EX_CANTCREAT): that run is not this one's to mark
EXIT_PREEMPTED = 75   # stopped by a signal after a checkpoint, to be continued (sysexits' EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C (the shell's status for SIGINT)


class SkiplessError(Exception):
    """A problem with the user's input, data or run that one sentence can explain. ``exit_status``: what an
    entry point exits with when it ends on this error."""

    exit_status = EXIT_ERROR


class ModelArgumentError(SkiplessError, ValueError):
    """A model name or argument ``create_vit`` does not know; the message lists the valid ones."""


def user_message(err: SkiplessError) -> str:
    """The error's one sentence, also when it was raised in a DataLoader worker process: PyTorch raises
    it again in the main process with the worker's whole traceback as its message ("Caught
    MalformedDatasetError in DataLoader worker process 0. Original Traceback ..."), whose last line is
    ``<module>.<ErrorName>: <the sentence>``; the sentence is what follows."""
    text = str(err)
    if not (text.startswith("Caught ") and "DataLoader worker process" in text.split("\n", 1)[0]):
        return text
    marker = f"{type(err).__name__}: "
    at = text.rfind(marker)
    return text[at + len(marker):].strip() if at >= 0 else text


def exit_on_user_error(body: Callable[[], T]) -> T:
    """Run an entry point's body: a ``SkiplessError`` ends the program with its one sentence on
    stderr (exit status 1), the same sentence where a loader worker raised it; any other exception
    is a bug and keeps its traceback."""
    try:
        return body()
    except SkiplessError as err:
        raise SystemExit(f"error: {user_message(err)}") from None
