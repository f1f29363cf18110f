"""Which data gpualign's answers rest on, for `gpualign --version` and the `source` of every JSON report: the image
naming rules (as of which GPU Operator release) and the CUDA minimum-driver table."""

from __future__ import annotations

from functools import cache

from gpualign import rules as data_files


@cache
def rules_version() -> str:
    """The GPU Operator release whose naming rules are built in, e.g. v26.7.0."""
    import re

    # the top-level key, read without parsing the whole rules file (every report's envelope names it)
    text = data_files.text("driver_images.yaml")
    found = re.search(r"^operator_version:\s*[\"']?([^\s\"'#]+)", text, re.M)
    return found.group(1) if found else "unknown"


@cache
def cuda_table_version() -> str:
    """The newest CUDA toolkit the built-in minimum-driver table knows, e.g. 13.2: the largest key of its
    `minimum_driver` mapping, read without loading the table (`--version` needs no YAML reader; a unit test holds
    it equal to the loaded table's)."""
    import re

    text = data_files.text("cuda.yaml")
    block = re.search(r"^minimum_driver:\n((?:[ \t]+.*\n|\s*#.*\n|\n)*)", text, re.M)
    keys = re.findall(r"^[ \t]+[\"']?(\d+(?:\.\d+)*)[\"']?\s*:", block.group(1), re.M) if block else []
    if not keys:  # a table written otherwise: loaded whole
        from gpualign.model.cuda import table

        return str(table().known[-1])
    return str(max(keys, key=lambda k: tuple(int(p) for p in k.split("."))))


def describe() -> str:
    return (f"rules: driver images named as GPU Operator {rules_version()} names them (built in)\n"
            f"cuda table: minimum drivers up to CUDA {cuda_table_version()} (built in)")
