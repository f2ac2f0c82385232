"""commsim profile show / diff: what a profile holds, and how two profiles differ."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o


def register(app: typer.Typer) -> None:
    group = typer.Typer(no_args_is_help=True, help="Inspect calibration profiles: the model, "
                        "compute per batch size, link and collective fits, and where and how "
                        "they were measured.")
    group.command("show", help="A short summary of a profile (the bundled one by default).")(
        show)
    group.command("diff", help="What differs between two profiles (fits, compute, "
                  "provenance), with the relative change of every number.")(diff)
    app.add_typer(group, name="profile")


def show(
    path: Optional[Path] = typer.Argument(None, dir_okay=False, readable=False,
                                          help="Profile JSON (default: the bundled profile)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    from commsim.analysis.inspect import format_summary, summary
    from commsim.profile import default_profile_path

    s = summary(o.load_profile(path))
    label = str(path) if path is not None else f"{default_profile_path().name} (bundled)"
    typer.echo(o.dumps(s) if json_out else format_summary(s, label))


def diff(
    a: Path = typer.Argument(..., dir_okay=False, readable=False, help="First profile."),
    b: Path = typer.Argument(..., dir_okay=False, readable=False, help="Second profile."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON rows."),
) -> None:
    from commsim.analysis.inspect import diff as compare, format_diff

    rows = compare(o.load_profile(a), o.load_profile(b))
    typer.echo(o.dumps(rows) if json_out else format_diff(rows, str(a), str(b)))
