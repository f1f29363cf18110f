"""`gpualign --version` reads the CUDA table's newest toolkit without loading the table: the same answer as the
loaded table's, over the file gpualign ships and over tables written with other spellings."""

from __future__ import annotations

import pytest

from gpualign import rules as data_files
from gpualign.model import data_versions
from gpualign.model.cuda import table


def test_the_shipped_tables_newest_toolkit_is_read_as_the_loaded_table_says():
    data_versions.cuda_table_version.cache_clear()
    assert data_versions.cuda_table_version() == table().known[-1]


@pytest.mark.parametrize(("text", "newest"), [
    ('schema: 1\nminimum_driver:\n  "11.8": "520.61.05"\n  "13.10": "600.1"\n  "13.2": "595.1"\nupdates: {}\n',
     "13.10"),
    ("minimum_driver:\n  # a comment\n  12.4: 550.54.14\n\n  12.10: 570.1\nother:\n  \"99.9\": x\n", "12.10"),
])
def test_a_table_written_otherwise_is_read_by_version_not_by_text(monkeypatch, text, newest):
    monkeypatch.setattr(data_files, "text", lambda name: text)
    data_versions.cuda_table_version.cache_clear()
    try:
        assert data_versions.cuda_table_version() == newest
    finally:
        data_versions.cuda_table_version.cache_clear()
