"""Errors a user sees as one line on stderr (`gpualign: <word>: <message>`), each with the exit code it maps to.

Every exit code gpualign returns is named here (EXIT_*); nothing else writes a number. The tree:

    GpualignError                exit 2, "error": an expected failure, never a traceback
    ├── BadInput                 a file, flag or label that cannot be used as given
    ├── LabError                 the lab could not be built, started or reached
    ├── Unreachable              retryable: a cluster or registry that did not answer
    │   (ArchiveError and IndexUnreachable, Debian's archive not answering, say the same beside it)
    ├── ApiError                 the API server answered with an error status (retryable: 429, 5xx)
    │   ├── Forbidden            403
    │   ├── NotFound             404
    │   ├── Conflict             409 (retryable: read again)
    │   └── Invalid              422
    ├── Refused                  exit 1, "refused": gpualign will not act, for a reason the user can change
    │   (BlobMismatch, Busy, PushRefused, SharedRefused, IndexRefused, PresentButWrong, NotVerified)
    └── Failed                   exit 1, "failed": the work was tried and did not succeed (BuildError)

Rooms below the command line define their own leaves of this tree, next to the code that raises them; a leaf never
sets an exit code or a word of its own.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class GpualignError(Exception):
    """An expected failure: printed as one line (no traceback) and mapped to an exit code."""

    exit_code = EXIT_USAGE
    word = "error"  # the line reads `gpualign: <word>: …`; exit 1 failures say "refused" or "failed", never "error"
    # Whether the same command may succeed if run again unchanged (a registry's 5xx, an archive that did not
    # answer): a build Job's failure is retried with backoff when it is, and held until something changes when not.
    retryable = False
    final = False  # its message is as the command line says it: worded no more (cli/hints.py)

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class BadInput(GpualignError):
    """A file, flag or label that cannot be used as given (exit 2)."""


class Unreachable(GpualignError):
    """A transport failure: a cluster or registry that did not answer, a connection cut or timed out (exit 2: the
    check could not run). Running it again may succeed."""

    retryable = True


class ApiError(GpualignError):
    """The API server answered, with an error status (`status`). The same request gets the same answer, so it is not
    retryable, but for a server that is there and cannot answer now (429, 5xx)."""

    status = 0

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message, detail=detail)
        if status is not None:
            self.status = status

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.status == 429 or self.status >= 500


class Forbidden(ApiError):
    """HTTP 403: refused for want of permission. Running it again will not help; a role that allows the verb on that
    resource will (the message names both, as an RBAC rule)."""

    status = 403


class NotFound(ApiError):
    """HTTP 404."""

    status = 404


class Conflict(ApiError):
    """HTTP 409: the object changed since it was read; read it again and retry (so: retryable)."""

    status = 409

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return True


class Invalid(ApiError):
    """HTTP 422: the server will not take the object as written."""

    status = 422


def api_error(status: int, message: str) -> ApiError:
    """The ApiError class for a status."""
    kind = {403: Forbidden, 404: NotFound, 409: Conflict, 422: Invalid}.get(status, ApiError)
    return kind(message, status=status)


class LabError(GpualignError):
    """The lab could not be built, started or reached."""


class Refused(GpualignError):
    """gpualign will not act, for a reason the user can change (exit 1): e.g. the GPU Operator walks these nodes."""

    exit_code = EXIT_FINDINGS
    word = "refused"


class Failed(GpualignError):
    """The work was tried and did not succeed (exit 1): a build step, a compile, a push."""

    exit_code = EXIT_FINDINGS
    word = "failed"
