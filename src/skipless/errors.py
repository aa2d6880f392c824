"""The one base class of user-facing errors.

An entry point (``make pretrain``, ``make probe`` ...) catches ``SkiplessError`` and nothing else:
its message is printed as one sentence that says what was expected, while any other exception is
an internal bug and keeps its traceback. Each module raises its own subclass (``ConfigError``,
``DatasetNotFoundError``, ``BackboneLoadError``, ``DivergenceError`` ...); a subclass may also derive
from the matching builtin (``ValueError``, ``FileNotFoundError``) so that library callers who catch
those keep working.
"""


class SkiplessError(Exception):
    """A problem with the user's input, data or run that one sentence can explain."""
