"""Progress of long work (calibrate, live, validate, the benches): phase, done/total, time left.

One ``Progress`` per piece of work.  ``step(text)`` says the next unit has started (and so the one
before it has finished); ``close()`` finishes the last.  On a terminal it is one live line (rich:
a bar, done/total, elapsed and time left, rewritten in place); when stderr is not a terminal, or
with ``plain=True`` (the commands' ``--quiet``), it is one plain line per step, so a log file or
CI output reads as it always did.  Time left is the mean time of the finished units times the
units left: live cells and calibration phases are alike enough for that to be useful.
"""
from __future__ import annotations

import sys
import time
from typing import IO


def _fmt_left(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class Progress:
    def __init__(self, label: str, total: int | None = None, *, stream: IO[str] | None = None,
                 plain: bool | None = None, clock=time.monotonic):
        self.label, self.total = label, total
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.start = clock()
        self.steps = 0
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.plain = plain if plain is not None else not isatty()
        self._bar = None
        if not self.plain:
            self._bar = _RichBar(self.stream, label, total)

    @property
    def finished(self) -> int:
        """Units done: every step before the current one."""
        return max(0, self.steps - 1)

    def left_s(self) -> float | None:
        """Estimated seconds to finish, from the mean of the finished units."""
        if not self.total or not self.finished:
            return None
        per = (self.clock() - self.start) / self.finished
        return per * max(0, self.total - self.finished)

    def step(self, text: str) -> None:
        self.steps += 1
        if self._bar is not None:
            self._bar.update(text, self.finished)
            return
        count = f" {self.steps}/{self.total}" if self.total else ""
        left = self.left_s()
        eta = f" (~{_fmt_left(left)} left)" if left is not None else ""
        print(f"[{self.label} {self.clock() - self.start:6.0f}s]{count} {text}{eta}",
              file=self.stream, flush=True)

    def say(self, text: str) -> None:
        """A line of information that is not a unit of work."""
        if self._bar is not None:
            self._bar.print(text)
        else:
            print(f"[{self.label} {self.clock() - self.start:6.0f}s] {text}", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close(self.steps)
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _RichBar:
    """The live line on a terminal (rich is a dependency of typer; imported only here)."""

    def __init__(self, stream: IO[str], label: str, total: int | None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)

        self.progress = RichProgress(
            TextColumn(f"[bold]{label}[/bold]"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
            TextColumn("{task.description}"), console=Console(file=stream), transient=False)
        self.task = self.progress.add_task("", total=total)
        self.progress.start()

    def update(self, text: str, finished: int) -> None:
        self.progress.update(self.task, completed=finished, description=text)

    def print(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False)

    def close(self, steps: int) -> None:
        self.progress.update(self.task, completed=steps)
        self.progress.stop()
