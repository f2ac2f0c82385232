"""Progress of long work (calibrate, live, validate, the benches): phase, done/total, time left.

One ``Progress`` per piece of work.  ``step(text)`` says the next unit has started (and so the one
before it has finished); ``close()`` finishes the last.  On a terminal it is one live line (rich:
a bar, done/total, elapsed and time left, rewritten in place); when stderr is not a terminal, or
with ``plain=True`` (the commands' ``--quiet``), it is one plain line per step, so a log file or
CI output reads as it always did.  Time left is the mean time of the finished units times the
units left: live cells and calibration phases are alike enough for that to be useful.

Work that runs in launched ranks (``calibrate``, ``live``) reports from rank 0 through the
launcher, which copies rank 0's stderr to the user (``calibrate.launch.spawn``):
1. the launcher sets ``RELAY_ENV`` in every rank's environment;
2. rank 0's ``rank_progress`` then writes each update as one ``RELAY_PREFIX`` + JSON line instead
   of drawing anything (a rank has no terminal; the launcher's process has the user's);
3. the launcher writes rank 0's stderr into a ``Relay``, which turns those lines back into
   ``Progress.update`` calls and passes any other line (a warning, an error) through ``say``.
Without the launcher (a rank started by torchrun), ``rank_progress`` is a ``Progress`` of its own
on the rank's stderr.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import IO

# Set by the launcher in the ranks' environment: report progress as relay lines.
RELAY_ENV = "COMMSIM_PROGRESS_RELAY"
RELAY_PREFIX = "commsim-progress "


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
        self.steps = 0          # units started (``step``) or finished (``update``): the count shown
        self.finished = 0       # units finished
        # Units already finished when counting started (``update``), and when that was: the
        # time per unit leaves out what came before (resumed work, a launch's start-up).
        self.done_before: int | None = None
        self.counting_since = self.start
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.plain = plain if plain is not None else not isatty()
        self._bar: _RichBar | None = None   # drawn at the first update: an unused one shows nothing

    def left_s(self) -> float | None:
        """Estimated seconds to finish, from the mean of the finished units."""
        timed = self.finished - (self.done_before or 0)
        if not self.total or timed <= 0:
            return None
        per = (self.clock() - self.counting_since) / timed
        return per * max(0, self.total - self.finished)

    def step(self, text: str) -> None:
        """The next unit, named ``text``, has started."""
        self.steps += 1
        self.finished = self.steps - 1
        self._show(text)

    def update(self, done: int, total: int | None, text: str) -> None:
        """``done`` units of ``total`` are finished, the last named ``text`` (the total may
        change as lazily planned work finds out its size).  The time per unit counts from the
        first update, and leaves out the units it says were already done (resumed work)."""
        if self.done_before is None:
            self.done_before, self.counting_since = done, self.clock()
        self.total = total if total is None else max(total, done)
        self.steps = self.finished = done
        self._show(text)

    def _live(self) -> "_RichBar | None":
        if not self.plain and self._bar is None:
            self._bar = _RichBar(self.stream, self.label, self.total)
        return self._bar

    def _show(self, text: str) -> None:
        if self._live() is not None:
            self._bar.update(text, self.finished, self.total)
            return
        count = f" {self.steps}/{self.total}" if self.total else ""
        left = self.left_s()
        eta = f" (~{_fmt_left(left)} left)" if left else ""
        print(f"[{self.label} {self.clock() - self.start:6.0f}s]{count} {text}{eta}",
              file=self.stream, flush=True)

    def say(self, text: str) -> None:
        """A line of information that is not a unit of work."""
        if self._live() is not None:
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


class Relay:
    """A text stream the launcher writes rank 0's stderr into (whole lines): relay lines drive
    ``progress``; every other line is said as it is.  With no ``progress``, updates are dropped
    and the other lines go to ``stream`` (a caller that shows no progress still sees a rank's
    warnings)."""

    def __init__(self, progress: "Progress | None" = None, *, stream: IO[str] | None = None):
        self.progress = progress if progress is not None else _Lines(stream)
        self._partial = ""

    def write(self, data: str) -> int:
        lines = (self._partial + data).split("\n")
        self._partial = lines.pop()
        for line in lines:
            event = parse_relay_line(line)
            if event is not None:
                self.progress.update(*event)
            elif line.strip():
                self.progress.say(line.rstrip())
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._partial.strip():
            self.write("\n")
        self.progress.close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def relay_line(done: int, total: int | None, text: str) -> str:
    """One progress update as the line a launched rank writes (``Relay`` reads it back)."""
    return RELAY_PREFIX + json.dumps({"done": done, "total": total, "text": text}) + "\n"


def parse_relay_line(line: str) -> tuple[int, int | None, str] | None:
    """``(done, total, text)`` of a ``relay_line``, or None for any other line."""
    if not line.startswith(RELAY_PREFIX):
        return None
    try:
        event = json.loads(line[len(RELAY_PREFIX):])
        done, total, text = int(event["done"]), event["total"], str(event["text"])
        return done, None if total is None else int(total), text
    except (ValueError, KeyError, TypeError):
        return None


class _RelayOut:
    """A launched rank's side of ``Relay``: updates as relay lines on stderr."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def update(self, done: int, total: int | None, text: str) -> None:
        self.stream.write(relay_line(done, total, text))
        self.stream.flush()

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        pass


class _Lines:
    """Drops updates, prints what is said."""

    def __init__(self, stream: IO[str] | None):
        self.stream = stream

    def update(self, done: int, total: int | None, text: str) -> None:
        pass

    def say(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        pass


class _Silent:
    def update(self, done: int, total: int | None, text: str) -> None:
        pass

    def say(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def rank_progress(label: str, enabled: bool, *, stream: IO[str] | None = None):
    """What a rank reports its progress to (``update``/``say``/``close``): relay lines when the
    launcher started it (``RELAY_ENV``), a ``Progress`` of its own otherwise (torchrun), nothing
    when not ``enabled`` (ranks other than 0)."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return _Silent()
    if os.environ.get(RELAY_ENV):
        return _RelayOut(stream)
    return Progress(label, stream=stream)


BAR_WIDTH = 20


class _RichBar:
    """The live line on a terminal (rich is a dependency of typer; imported only here)."""

    def __init__(self, stream: IO[str], label: str, total: int | None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)

        self.progress = RichProgress(
            TextColumn(f"[bold]{label}[/bold]"), BarColumn(bar_width=BAR_WIDTH),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"),
            TimeRemainingColumn(), TextColumn("{task.description}", markup=False),
            console=Console(file=stream), transient=False)
        self.label = label
        self.task = self.progress.add_task("", total=total)
        self.progress.start()

    def update(self, text: str, finished: int, total: int | None) -> None:
        # What the fixed columns take (label, bar, "done/total", the two times and the
        # spaces): the description gets the rest of the line, cut here, so that rich never
        # squeezes the counts instead.
        fixed = len(self.label) + BAR_WIDTH + 2 * len(str(total or 0)) + 1 + 25
        room = max(12, self.progress.console.width - fixed)
        text = text if len(text) <= room else text[:room - 1] + "…"
        self.progress.update(self.task, completed=finished, total=total, description=text)

    def print(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False)

    def close(self, steps: int) -> None:
        self.progress.update(self.task, completed=steps)
        self.progress.stop()
