"""`gpualign`: the root command. Errors become one line on stderr and an exit code (0 ok, 1 findings, 2 bad input).

Installed as `gpualign` and as `kubectl-gpualign`, so `kubectl gpualign …` works too.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpualign import __version__
from gpualign.errors import EXIT_INTERNAL, GpualignError

app = typer.Typer(
    name="gpualign",
    help="Keep a Kubernetes GPU fleet's drivers aligned with its kernels.\n\n"
         "Exit codes: 0 all good, 1 findings (an image missing, a node blocked or failed), "
         "2 bad usage or input (one line on stderr says what and where), 3 an internal error (a bug: please report).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="rich",
)
_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        print(f"gpualign {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks for unexpected errors")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    _state["debug"] = debug


def _register() -> None:
    if _state.get("registered"):
        return
    _state["registered"] = True
    from gpualign.cli import check, controller, cuda, lab, upgrade

    app.add_typer(lab.app, name="lab")
    app.add_typer(cuda.app, name="cuda")
    check.register(app)
    upgrade.register(app)
    controller.register(app)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        result = app(args=argv, standalone_mode=False)
    except GpualignError as err:
        print(f"gpualign: error: {err.message}", file=sys.stderr)
        if err.detail:
            print(err.detail, file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Exit as err:
        sys.exit(err.exit_code)
    except typer.Abort:
        print("gpualign: aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("gpualign: interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as err:  # usage errors (typer's own click) carry their exit code, 2
        show = getattr(err, "show", None)
        if callable(show):
            show()
        else:
            print(f"gpualign: error: {err}", file=sys.stderr)
        sys.exit(getattr(err, "exit_code", 2))
    except Exception as err:
        if _state["debug"]:
            raise
        print(f"gpualign: internal error: {err.__class__.__name__}: {err} (rerun with --debug for a traceback)",
              file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    sys.exit(result if isinstance(result, int) else 0)
