"""Errors the CLI turns into one line on stderr: bad input (exit 2), the environment and failed
runs (exit 1).  Never a traceback."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input: an argument, a file, a cluster that is not there.  The message is the whole
    explanation, one line, naming the argument, field, rank or address at fault."""


class BeyondReach(UserError):
    """No engine answers in reasonable time: the fast engine has no exact path for the run and
    the DES's work, which grows with the square of the ranks there, is too large for
    ``--engine auto`` to start.  ``--engine des`` runs it anyway.  ``why``: the same without
    the run's own numbers (a sweep names it once for all such cells)."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


class RunFailed(RuntimeError):
    """A distributed run ended badly (a rank died, a link went down, a timeout).  Exit code 1."""


class EnvironmentFault(RuntimeError):
    """The machine refused: a folder that is missing or cannot be made, permission denied, a
    read-only or full file system.  Exit code 1; the message names the path and the reason."""
