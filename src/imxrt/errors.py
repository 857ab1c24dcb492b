"""User-facing errors: one exception family, one actionable line each.

Every error a user can cause (bad option, bad model, bad file) is an ``ImxrtError``; the CLI prints its
message and exits non-zero. Our own invariants stay ``assert``s.
"""

from __future__ import annotations

from collections.abc import Iterable


class ImxrtError(Exception):
    """Base of every error a user can cause. ``str(e)`` is the one line the CLI prints."""

    def __reduce__(self):
        # The constructors take structured fields, not the message that ``args`` holds: pickle rebuilds the
        # error from its message and fields, so one raised in a worker process arrives whole.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(kind: type[ImxrtError], args: tuple, fields: dict) -> ImxrtError:
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class BadOption(ImxrtError):
    """An option (CLI flag or keyword argument) has a value we cannot use."""

    def __init__(self, option: str, value: object, allowed: Iterable[object] | str):
        allowed_text = allowed if isinstance(allowed, str) else ", ".join(str(a) for a in allowed)
        super().__init__(f"{option}: {value!r} is not valid; use {allowed_text}")
        self.option, self.value = option, value


class BadSource(ImxrtError):
    """The model SOURCE (a Python file or ``package.module:function``) cannot provide a model."""

    def __init__(self, source: str, problem: str):
        super().__init__(f"{source}: {problem}")
        self.source = source


class BadModel(ImxrtError):
    """The model itself cannot be compiled (export failure, dynamic shapes, non-float, ...)."""

    def __init__(self, problem: str, node: str | None = None):
        where = f"node {node}: " if node else ""
        super().__init__(f"model: {where}{problem}")
        self.node = node


class BadFile(ImxrtError):
    """A file the user gave us is missing, truncated or of the wrong kind."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


class BadInput(ImxrtError):
    """Inputs given to a compiled program do not match what it takes (count, shape, dtype)."""


class CompilerBug(ImxrtError):
    """An internal error: a model we should compile or refuse with a reason made the compiler itself fail.
    The cause stays chained (``__cause__``) for the bug report."""

    def __init__(self, stage: str, cause: BaseException):
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(f"internal compiler error in the {stage} stage ({type(cause).__name__}: {first}); this is "
                         "an imxrt bug: please report it with the model")
        self.stage = stage
