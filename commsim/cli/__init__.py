"""The ``commsim`` command line.  It only parses, calls the library and prints.

Each command group lives in its own module with a ``register(app)`` function.  ``main`` is the one
boundary for errors: bad input is one line on stderr with exit code 2; what the environment does
(a folder missing or unwritable, a full disk, standard output closed or full) is one line naming
the path with exit code 1; a closed pipe (``| head -1``) ends quietly.  Never a traceback.
"""
from __future__ import annotations

import importlib
import io
import os
import sys

import typer

from commsim.errors import EnvironmentFault, RunFailed, UserError
from commsim.files import reason
from commsim.profile import ProfileError
from commsim.units import UnitError

# Modules that register commands, in help order.  Missing optional ones are skipped so the core
# works while other parts are still being built.
COMMAND_MODULES = ("predict", "calibrate", "cluster", "live", "validate", "report", "trace",
                   "profile")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict, measure and explain the communication cost of data-parallel "
                       "training (VGG-11 on CIFAR-10 over Gloo, or your own model).")

def _version(value: bool) -> None:
    if value:
        from commsim import __version__

        typer.echo(f"commsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print commsim's version and exit.")) -> None:
    """Predict, measure and explain the communication cost of data-parallel training."""


def _numpy_on_one_blas_thread() -> None:
    """Import numpy with OpenBLAS on one thread, unless the user set its thread count.  The
    commands' numpy work is elementwise; OpenBLAS starts a thread per core at import, and on a
    2-core machine that costs about 0.1 s of CPU a command.  The setting is taken back once
    numpy is loaded, so the processes a command starts (torchrun, the emulated cluster's ranks)
    inherit the user's environment as it was."""
    name = "OPENBLAS_NUM_THREADS"
    if "numpy" in sys.modules or name in os.environ:
        return
    os.environ[name] = "1"
    try:
        import numpy  # noqa: F401  (OpenBLAS reads the variable when numpy loads it)
    finally:
        del os.environ[name]


_numpy_on_one_blas_thread()
for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"commsim.cli.{_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"commsim.cli.{_name}":
            raise
        continue
    _mod.register(app)


USER_ERRORS = (UserError, ProfileError, UnitError, FileExistsError)


def _click_exceptions():
    """typer >= 0.24 vendors click as typer._click; older typer uses click itself."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions
    return exceptions


def _one_line(text) -> str:
    return " ".join(str(text).split())


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the typer app and map every error to one line and an exit code."""
    real_stdout = sys.stdout
    sys.stdout = _GuardedStdout.wrap(real_stdout)
    try:
        code = _run(argv)
        sys.stdout.flush()
    except (StdoutClosed, BrokenPipeError):
        return _quiet_stdout(0)
    except StdoutFailed as exc:
        typer.echo(f"commsim: error: cannot write standard output: {exc}", err=True)
        return _quiet_stdout(1)
    except OSError as exc:
        where = f" {exc.filename}:" if exc.filename else ""
        typer.echo(f"commsim: error:{where} {reason(exc)}", err=True)
        return 1
    finally:
        guarded, sys.stdout = sys.stdout, real_stdout
        if guarded is not real_stdout:
            try:
                guarded.detach()  # leave the real stream open (closing the wrapper would close it)
            except (OSError, ValueError):
                pass
    return code


class StdoutClosed(Exception):
    """The reader of standard output went away (``| head -1``): stop quietly, as Unix tools do.
    Not an OSError, so that click's own EPIPE handling (exit 1) does not take it first."""


class StdoutFailed(Exception):
    """Writing standard output failed (a full disk, /dev/full, an I/O error); the reason."""


class _GuardedStdout(io.TextIOWrapper):
    """Standard output that says so when it is what failed, so that a full disk behind
    ``> file`` is reported as standard output, not as an anonymous OSError."""

    @classmethod
    def wrap(cls, stream):
        try:
            stream.fileno()
            stream.flush()
            return cls(stream.buffer, encoding=stream.encoding, errors=stream.errors,
                       line_buffering=stream.line_buffering)
        except (AttributeError, OSError, ValueError):  # captured or replaced (tests): as it is
            return stream

    def write(self, text):
        return _guarded(super().write, text)

    def flush(self):
        return _guarded(super().flush)


def _guarded(call, *args):
    """``call(*args)`` on standard output, its failures told apart from other OSErrors."""
    try:
        return call(*args)
    except BrokenPipeError:
        raise StdoutClosed() from None
    except OSError as exc:
        raise StdoutFailed(reason(exc)) from None


def _run(argv: list[str] | None) -> int:
    cx = _click_exceptions()
    try:
        app(args=argv, prog_name="commsim", standalone_mode=False)
    except cx.NoArgsIsHelpError as exc:
        # A bare command group prints its help: that is an answer, not an error.
        exc.show()
        return 0
    except cx.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "commsim"
        typer.echo(f"commsim: error: {_one_line(exc.format_message())} "
                   f"(see '{where} --help')", err=True)
        return 2
    except cx.ClickException as exc:
        typer.echo(f"commsim: error: {_one_line(exc.format_message())}", err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("commsim: interrupted", err=True)
        return 130
    except USER_ERRORS as exc:
        typer.echo(f"commsim: error: {_one_line(exc)}", err=True)
        return 2
    except EnvironmentFault as exc:
        typer.echo(f"commsim: error: {_one_line(exc)}", err=True)
        return 1
    except RunFailed as exc:
        typer.echo(f"commsim: run failed: {_one_line(exc)}", err=True)
        return 1
    return 0


def _quiet_stdout(code: int) -> int:
    """Point standard output at /dev/null so that the interpreter's own flush at exit cannot
    print a second error about the stream that already failed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (captured in tests)
        pass
    return code


def entry() -> None:
    sys.exit(main())
