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


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one line to stderr and return the Exit to raise."""
    line = " ".join(str(message).split())
    typer.echo(f"commsim: error: {line}", err=True)
    return typer.Exit(code)


USER_ERRORS = (UserError, ProfileError, UnitError, FileExistsError)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the typer app and map every user error to exit code 2."""
    import click

    try:
        app(args=argv, prog_name="commsim", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        # typer prints the help for a bare command group: that is an answer, not an error.
        exc.show()
        return 0
    except click.UsageError as exc:
        hint = f" (see 'commsim {exc.ctx.command_path.split(' ', 1)[1] if exc.ctx and ' ' in exc.ctx.command_path else ''} --help')" if exc.ctx else ""
        typer.echo(f"commsim: error: {' '.join(exc.format_message().split())}{hint}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        typer.echo("commsim: interrupted", err=True)
        return 130
    except USER_ERRORS as exc:
        typer.echo(f"commsim: error: {' '.join(str(exc).split())}", err=True)
        return 2
    except RunFailed as exc:
        typer.echo(f"commsim: run failed: {' '.join(str(exc).split())}", err=True)
        return 1
    except KeyboardInterrupt:
        typer.echo("commsim: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    return 0


def entry() -> None:
    sys.exit(main())
