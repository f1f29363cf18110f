"""Errors a user sees as one line on stderr, each with the exit code it maps to."""

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

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class BadInput(GpualignError):
    """A file, flag or label that cannot be used as given (exit 2)."""


class Unreachable(GpualignError):
    """A cluster or registry that did not answer (exit 2: the check could not run)."""

    retryable = True


class Forbidden(GpualignError):
    """The API server refused the request for want of permission (HTTP 403): running it again will not help; a
    role that allows the verb on that resource will."""


class LabError(GpualignError):
    """The lab could not be built, started or reached."""


class Refused(GpualignError):
    """gpualign will not act, for a reason the user can change (exit 1): e.g. the GPU Operator walks these nodes."""

    exit_code = EXIT_FINDINGS
    word = "refused"
