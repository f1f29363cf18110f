from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.model.version import DriverVersion


def test_gfd_spellings():
    assert DriverVersion.from_parts("580", "65", "06") == DriverVersion(580, 65, 6)
    assert DriverVersion.from_parts("570", "26", "") == DriverVersion(570, 26, None)
    assert str(DriverVersion.parse("580.65.06")) == "580.65.06"
    assert str(DriverVersion.parse("570.26")) == "570.26"


@pytest.mark.parametrize("bad", ["", "580", "580.x", "580.1.2.3", "-1.2", "580..1"])
def test_unparsable(bad):
    with pytest.raises(ValueError):
        DriverVersion.parse(bad)


@given(st.tuples(st.integers(0, 999), st.integers(0, 999), st.none() | st.integers(0, 999)),
       st.tuples(st.integers(0, 999), st.integers(0, 999), st.none() | st.integers(0, 999)))
def test_ordering_is_numeric(a, b):
    va, vb = DriverVersion(*a), DriverVersion(*b)
    ka = (a[0], a[1], -1 if a[2] is None else a[2])
    kb = (b[0], b[1], -1 if b[2] is None else b[2])
    assert (va < vb) == (ka < kb)
    assert DriverVersion.parse(str(va)) == va


def test_the_rules_version_in_every_report_is_the_rules_files_own():
    from importlib import resources

    from gpualign.base import yamlio
    from gpualign.model import data_versions

    parsed = yamlio.parse(resources.files("gpualign.rules").joinpath("driver_images.yaml").read_text(),
                          "driver_images.yaml")
    assert data_versions.rules_version() == parsed["operator_version"] != "unknown"
