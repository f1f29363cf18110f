"""`gpualign`: the root command. Errors become one line on stderr and an exit code (0 ok, 1 findings, 2 bad input).

Installed as `gpualign` and as `kubectl-gpualign`, so `kubectl gpualign …` works too.

Start-up is kept near the interpreter's own: `--version` never imports the CLI framework, and only the module of
the command named on the command line is imported and registered (all of them for help and shell completion).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

from gpualign import __version__
from gpualign.base.errors import EXIT_INTERNAL, EXIT_USAGE, GpualignError
from gpualign.cli.hints import worded

TYPE_CHECKING = False  # typing's own flag, without importing typing (about a tenth of `--version`'s time)
if TYPE_CHECKING:
    from typing import Any

    import typer

# command name -> the module under gpualign.cli that registers it
COMMANDS = {"check": "check", "plan": "plan", "ensure": "ensure", "rules": "rules", "cuda": "cuda",
            "upgrade": "upgrade", "status": "status", "why": "status", "controller": "controller", "gate": "gate",
            "build": "build", "verify": "verify",
            "lab": "lab", "completion": "completion"}
HELP = ("Keep a Kubernetes GPU fleet's drivers aligned with its kernels.\n\n"
        "Exit codes: 0 all good; 1 findings (an image missing, a node blocked or failed; a line 'gpualign: "
        "refused: …' or 'gpualign: failed: …' says why when gpualign would not or could not act); 2 bad usage or "
        "input (one line 'gpualign: error: …' on stderr says what and where); 3 an internal error (a bug: please "
        "report it); over several clusters (--context A --context B, --all-contexts) the codes are bits: 4 some "
        "cluster could not be read, 5 that and findings in another.\n\n"
        "Global flags, accepted anywhere on the line: --debug (tracebacks for unexpected errors). `gpualign "
        "--version` prints the version and those of the data it carries (the rules, the CUDA table).")
_state = {"debug": False}


def version_text() -> str:
    from gpualign.model.data_versions import describe

    return f"gpualign {__version__}\n" + describe()


def _prog_name() -> str:
    """`kubectl gpualign` when run as kubectl's plugin, as kubectl users type it."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "gpualign"
    return "kubectl gpualign" if base == "kubectl-gpualign" else "gpualign"


def _completing() -> bool:
    from gpualign.cli.errors import COMPLETE_VAR

    return bool(os.environ.get(COMPLETE_VAR))


def build(args: list[str]) -> typer.Typer:
    """The root app with only the command module `args` names registered (every one for help or completion)."""
    import typer

    from gpualign.cli.groups import Group

    app = typer.Typer(name="gpualign", help=HELP, no_args_is_help=True, add_completion=False, cls=Group,
                      pretty_exceptions_enable=False, rich_markup_mode=None,
                      context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})

    @app.callback()
    def root(debug: bool = typer.Option(False, "--debug", help="show tracebacks for unexpected errors")) -> None:
        """The global flags (--debug is also taken out of the line before parsing, so it works anywhere)."""

    if _completing():  # the shell asks for completions: typer's per-shell completion classes answer
        from typer._completion_classes import completion_init

        completion_init()
    first = next((a for a in args if not a.startswith("-")), None)
    wanted = {COMMANDS[first]} if first in COMMANDS and not _completing() else set(COMMANDS.values())
    import importlib

    for name in dict.fromkeys(m for m in COMMANDS.values() if m in wanted):  # help lists them in this order
        importlib.import_module(f"gpualign.cli.{name}").register(app)
    return app


def _usage_error(err: Any) -> str:
    """click's four-line usage error as one line: what is wrong, and where to read more."""
    from typer._click.exceptions import BadParameter, MissingParameter

    ctx = getattr(err, "ctx", None)
    param = getattr(err, "param", None)
    if isinstance(err, BadParameter) and not isinstance(err, MissingParameter) and param is not None:
        name = max(param.opts, key=len) if getattr(param, "opts", None) else (param.metavar or param.name)
        message = f"{name}: {err.message}"
    else:
        message = err.format_message()
    message = message.rstrip(".")
    message = message[:1].lower() + message[1:]
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"gpualign: error: {message}{where}"


def kubectl_complete() -> None:
    """`kubectl_complete-gpualign ARGS… PARTIAL`: what kubectl runs to complete `kubectl gpualign …` (its plugin
    completion protocol): one candidate a line, then `:4` (no file completion)."""
    import contextlib
    import io

    from gpualign.cli.errors import COMPLETE_VAR

    words = ["gpualign", *sys.argv[1:]]
    os.environ.update({COMPLETE_VAR: "complete_bash", "COMP_WORDS": " ".join(words),
                       "COMP_CWORD": str(len(words) - 1)})
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(sys.argv[1:])
    for line in out.getvalue().split():
        print(line)
    print(":4")


TERMINATION_LOG = "GPUALIGN_TERMINATION_LOG"


def _termination_record(err: GpualignError) -> None:
    """In a Kubernetes container whose spec names a termination-message file ($GPUALIGN_TERMINATION_LOG, e.g.
    /dev/termination-log), the failure as one JSON line there: what the controller reads from a failed build Job's
    pod (its status carries the file, up to 4 KiB) to decide whether to retry."""
    path = os.environ.get(TERMINATION_LOG)
    if not path:
        return
    import json

    record = {"word": err.word, "exit": err.exit_code, "retryable": bool(err.retryable),
              "error": type(err).__name__, "message": worded(err)[:3000]}
    try:
        with open(path, "w") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError:
        pass  # the message on stderr stands; the controller falls back to the log's last lines


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # a process of its own: at exit, the collector need not scan what the OS is about to reclaim
        atexit.register(gc.freeze)  # (its last pass over every imported object was ~16 ms of each run's ~20 ms exit)
        gc.disable()  # and a one-shot read runs without it (collector.py); any other command gets it back
        from gpualign.base.collector import for_command

        for_command(args)
    try:
        code = _command(args)
    except SystemExit as end:
        if argv is not None:
            raise
        code = end.code
    if argv is None:
        _leave(code)
    sys.exit(code)


def _leave(code: Any) -> None:
    """A command that ends while one of its background threads is still at work (an error found while the cluster's
    LISTs were on the wire, a cluster past --request-timeout, a build that failed while the image's inputs were being
    fetched) leaves without finalizing the interpreter: the thread may be importing a module or inside OpenSSL, and
    tearing the interpreter down under it can crash the process (SIGSEGV) after its message was printed. What was
    written is flushed first; every file the command writes is renamed into place or removed by the command itself,
    so nothing else is pending at that point. A one-shot read (check, status, why, plan) always leaves so: tearing
    down its modules and the objects it read is work for memory the OS takes back whole (collector.one_shot)."""
    from gpualign.base.collector import one_shot

    if not one_shot() and not _busy_threads():
        return
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(status)


def _busy_threads() -> bool:
    """Whether a background thread is still at work."""
    threading = sys.modules.get("threading")
    if threading is None:
        return False
    main_thread = threading.main_thread()
    return any(t is not main_thread and t.daemon and t.is_alive() for t in threading.enumerate())


def _command(args: list[str]) -> Any:
    """The command's exit code (or SystemExit raised with it)."""
    cut = args.index("--") if "--" in args else len(args)
    _state["debug"] = "--debug" in args[:cut]  # a global flag, accepted anywhere (as kubectl's are)
    args = [a for a in args[:cut] if a != "--debug"] + args[cut:]
    if args[:1] == ["--version"]:
        print(version_text())
        return 0
    try:
        from gpualign.cli.errors import run

        return run(build(args), args, _prog_name())
    except GpualignError as err:
        print(f"gpualign: {err.word}: {worded(err)}", file=sys.stderr)
        if err.detail:
            print(err.detail, file=sys.stderr)
        _termination_record(err)
        return err.exit_code
    except KeyboardInterrupt:
        print("gpualign: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as err:
        from gpualign.cli.errors import usage_error_of

        usage = usage_error_of(err)
        if usage is not None:
            print(_usage_error(usage), file=sys.stderr)
            return EXIT_USAGE
        if _state["debug"]:
            raise
        print(f"gpualign: internal error: {err.__class__.__name__}: {err} (rerun with --debug for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
