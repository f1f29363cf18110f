"""The reading of an OS named as ID and VERSION_ID: a node's announced move (gpualign.io/os.next), `plan --os`."""

from __future__ import annotations

import pytest

from gpualign.model.tags import parse_os


@pytest.mark.parametrize(("value", "expected"), [
    ("debian-13", ("debian", "13")), ("debian13", ("debian", "13")), ("ubuntu-24.04", ("ubuntu", "24.04")),
    ("ubuntu24.04", ("ubuntu", "24.04")), ("rhel-9.4", ("rhel", "9.4")),
    ("", None), (None, None), ("debian", None), ("13", None), ("debian-", None), ("Debian-13", None),
])
def test_os_next_is_read_as_os_release_id_and_version(value, expected):
    assert parse_os(value) == expected
