"""Which data gpualign's answers rest on, for `gpualign --version` and the `source` of every JSON report: the image
naming rules (as of which GPU Operator release) and the CUDA minimum-driver table."""

from __future__ import annotations

from functools import cache

from gpualign import rules as data_files
from gpualign.model.cuda import table


@cache
def rules_version() -> str:
    """The GPU Operator release whose naming rules are built in, e.g. v26.7.0."""
    import re

    # the top-level key, read without parsing the whole rules file (every report's envelope names it)
    text = data_files.text("driver_images.yaml")
    found = re.search(r"^operator_version:\s*[\"']?([^\s\"'#]+)", text, re.M)
    return found.group(1) if found else "unknown"


def cuda_table_version() -> str:
    """The newest CUDA toolkit the built-in minimum-driver table knows, e.g. 13.2."""
    return table().known[-1]


def describe() -> str:
    return (f"rules: driver images named as GPU Operator {rules_version()} names them (built in)\n"
            f"cuda table: minimum drivers up to CUDA {cuda_table_version()} (built in)")
