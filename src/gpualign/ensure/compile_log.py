"""What a failed module compile's log says went wrong, in one line. Pure.

make's own last lines (`make[2]: *** [...] Error 2`) name only the step that stopped; the cause is earlier: one of
NVIDIA's sanity checks (conftest.sh: a PREEMPT_RT kernel, a kernel the driver does not support), or the compiler's
first `error:`. A failure found there is permanent: the same source and headers fail the same way until one of
them changes. A log with neither (the compiler killed, a disk that filled) says nothing of the inputs, and the
same compile may pass when run again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# NVIDIA's refusals, as conftest.sh prints them over several lines: "The NVIDIA driver does not support real-time
# kernels. If you ...", then "*** Failed PREEMPT_RT sanity check. Bailing out! ***"
_REFUSAL = re.compile(r"(?P<sentence>The NVIDIA driver does not support [^.]+)\..*")
_CHECK = re.compile(r"\**\s*(?P<check>Failed \S+ sanity check)\b.*")
_COMPILER = re.compile(r"(?:[^\s:]+:\d+(?::\d+)?: )?(?:fatal )?error: .+")
_MAKE = re.compile(r"make(?:\[\d+\])?: .*")


@dataclass(frozen=True)
class CompileFailure:
    line: str  # the first line that names the cause
    permanent: bool  # the same inputs fail the same way


def first_error(lines: Iterable[str]) -> CompileFailure | None:
    """The cause of a failed compile, from its log; None when the log names none."""
    refusal: str | None = None
    compiler: str | None = None
    for raw in lines:
        line = raw.strip()
        if refusal is None and (m := _REFUSAL.fullmatch(line)):
            refusal = m.group("sentence")
        elif (m := _CHECK.fullmatch(line)) is not None:
            return CompileFailure(f"{refusal} ({m.group('check')})" if refusal else m.group("check"), True)
        elif compiler is None and _COMPILER.fullmatch(line) and not _MAKE.fullmatch(line):
            compiler = line
    found = refusal or compiler
    return CompileFailure(found, True) if found is not None else None
