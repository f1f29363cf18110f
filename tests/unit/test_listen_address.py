"""The controller's --listen HOST:PORT: every address it can bind is read back as it was given, and anything else is
one line of bad input."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.cli.controller import _address

ports = st.integers(min_value=0, max_value=65535)


@given(st.ip_addresses(v=4), ports)
def test_an_ipv4_address_and_port_are_read_back(ip: ipaddress.IPv4Address, port: int) -> None:
    assert _address(f"{ip}:{port}") == (str(ip), port)


@given(st.ip_addresses(v=6), ports)
def test_a_bracketed_ipv6_address_is_read_without_its_brackets(ip: ipaddress.IPv6Address, port: int) -> None:
    assert _address(f"[{ip}]:{port}") == (str(ip), port)


@given(ports)
def test_an_empty_host_listens_everywhere(port: int) -> None:
    assert _address(f":{port}") == ("0.0.0.0", port)


@pytest.mark.parametrize("listen", ["8080", "host", "host:", "host:http", "host:65536", "host:-1", "a/b:1",
                                    "user@host:1", ""])
def test_anything_else_is_bad_input_naming_the_flag(listen: str) -> None:
    with pytest.raises(BadInput, match=r"^--listen .*: expected HOST:PORT$"):
        _address(listen)
