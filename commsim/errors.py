"""Errors a user can cause.  The CLI turns each into one line on stderr and exit code 2."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input: an argument, a file, a cluster that is not there.  The message is the whole
    explanation, one line, naming the argument, field, rank or address at fault."""


class RunFailed(RuntimeError):
    """A distributed run ended badly (a rank died, a link went down, a timeout).  Exit code 1."""
