"""Running the click command behind the typer app, with click's errors turned into gpualign's: a usage error is one
line and exit 2, a bare group prints its help (exit 0, as kubectl does)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

COMPLETE_VAR = "_GPUALIGN_COMPLETE"


def run(app: typer.Typer, args: list[str], prog_name: str) -> int:
    """Run the command line; returns the exit code (0, or the code a command raised with typer.Exit)."""
    import typer
    from typer._click.exceptions import NoArgsIsHelpError

    command = typer.main.get_command(app)
    try:
        result: Any = command.main(args=args, prog_name=prog_name, complete_var=COMPLETE_VAR,
                                   standalone_mode=False)
    except NoArgsIsHelpError as err:  # `gpualign`, `gpualign cuda`: help on stdout, like kubectl
        sys.stdout.write(err.format_message() + "\n")
        return 0
    except typer.Exit as err:
        return err.exit_code
    except typer.Abort:
        print("gpualign: aborted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


def usage_error_of(err: BaseException) -> Any:
    """The click usage error in `err`, or None when it is not one."""
    if "typer" not in sys.modules:
        return None
    from typer._click.exceptions import UsageError

    return err if isinstance(err, UsageError) else None
