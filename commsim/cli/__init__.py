"""The ``commsim`` command line.  It only parses, calls the library and prints.

Each command group lives in its own module with a ``register(app)`` function.  Errors a user can
cause are printed as one line on stderr with exit code 2; there is never a traceback.
"""
from __future__ import annotations

import importlib
import sys

import typer

from commsim.errors import RunFailed, UserError
from commsim.profile import ProfileError
from commsim.units import UnitError

# Modules that register commands, in help order.  Missing optional ones are skipped so the core
# works while other parts are still being built.
COMMAND_MODULES = ("predict", "calibrate", "cluster", "live", "validate", "report", "trace")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict, measure and explain the communication cost of data-parallel "
                       "training (VGG-11 on CIFAR-10 over Gloo, or your own model).")

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
    """Console entry point: run the typer app and map every user error to exit code 2."""
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
    except RunFailed as exc:
        typer.echo(f"commsim: run failed: {_one_line(exc)}", err=True)
        return 1
    except BrokenPipeError:
        return 0
    return 0


def entry() -> None:
    sys.exit(main())
