"""A failed compile's cause in one line (gpualign.ensure.compile_log), read from real logs: the make trailer is never
the reason, and a cause the log names is permanent."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpualign.ensure.compile_log import first_error

LOGS = Path(__file__).resolve().parent.parent / "data" / "compile-logs"


def test_nvidias_preempt_rt_refusal_is_named_from_a_real_compile():
    """The log of `bench/prove_kernel_kind.py 6.1.0-57-rt-amd64`: NVIDIA 535.309.01 against Debian's rt kernel."""
    lines = (LOGS / "535.309.01-6.1.0-57-rt-amd64.log").read_text().splitlines()
    failure = first_error(lines)
    assert failure is not None and failure.permanent
    assert failure.line == ("The NVIDIA driver does not support real-time kernels (Failed PREEMPT_RT sanity "
                            "check)")
    assert "Error" not in failure.line and "make" not in failure.line


def test_a_compiler_error_is_named_and_a_log_without_a_cause_is_not_claimed():
    lines = ["  CC [M]  nvidia/nv.o",
             "nvidia/nv.c:1234:5: error: implicit declaration of function 'foo'",
             "make[3]: *** [scripts/Makefile.build:250: nvidia/nv.o] Error 1",
             "nvidia/nv.c:1300:1: error: later"]
    failure = first_error(lines)
    assert failure is not None and failure.line == "nvidia/nv.c:1234:5: error: implicit declaration of function 'foo'"
    killed = ["gcc: fatal error: Killed signal terminated program cc1", "make[3]: *** [x.o] Error 1"]
    assert first_error(killed) is None  # the compiler killed (memory): says nothing of the inputs, retried


@given(st.lists(st.sampled_from(["make[2]: *** [Makefile:10: all] Error 2", "make: *** [modules] Error 2",
                                 "  CC [M]  a.o", "", "make[1]: Leaving directory '/x'"]), max_size=30))
def test_make_trailers_alone_never_make_a_cause(lines):
    assert first_error(lines) is None
