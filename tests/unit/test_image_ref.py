"""An image reference taken apart once (gpualign.model.image_ref), against the reference grammar of the distribution
project (name, `:tag`, `@digest`; a registry's port before the first `/`), written here as one regular expression:
over every reference NVIDIA's GPU Operator writes (tests/data/operator-image-references.txt) and over references
generated from the grammar."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.model.driver_tag import of_image
from gpualign.model.image_ref import ImageRef, repository_of, sha256_hex, tag_of

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
GRAMMAR = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")

RECORDED = [line for line in (Path(__file__).resolve().parent.parent / "data" / "operator-image-references.txt")
            .read_text().splitlines() if line and not line.startswith("#")]


def oracle(text: str) -> tuple[str, str, str]:
    m = GRAMMAR.fullmatch(text)
    assert m is not None, text
    return m.group("name"), m.group("tag") or "", m.group("digest") or ""


def test_the_operators_references_are_recorded():
    assert len(RECORDED) >= 300 and any("@sha256:" in r for r in RECORDED) and any("@" not in r for r in RECORDED)


@pytest.mark.parametrize("text", RECORDED)
def test_every_reference_the_operator_writes_is_taken_apart_as_the_grammar_says(text):
    ref = ImageRef.parse(text)
    assert (ref.name, ref.tag, ref.digest) == oracle(text)
    assert str(ref) == text and tag_of(text) == ref.tag and repository_of(text) == ref.name
    if ref.digest.startswith("sha256:"):
        assert sha256_hex(ref.digest) == ref.digest.removeprefix("sha256:")


_component = st.from_regex(rf"\A{_COMPONENT}\Z").filter(lambda s: len(s) < 30)
_host = st.from_regex(r"\A[a-z0-9]+(\.[a-z0-9]+)+(:[0-9]{1,5})?\Z|\Alocalhost:[0-9]{1,5}\Z")
_tag = st.from_regex(rf"\A{_TAG}\Z").filter(lambda s: len(s) < 60)
_digest = st.from_regex(r"\Asha256:[0-9a-f]{64}\Z")


@given(st.one_of(st.none(), _host), st.lists(_component, min_size=1, max_size=4), st.one_of(st.none(), _tag),
       st.one_of(st.none(), _digest))
def test_a_generated_reference_is_taken_apart_as_the_grammar_says(host, path, tag, digest):
    text = "/".join(([host] if host else []) + path) + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    ref = ImageRef.parse(text)
    assert (ref.name, ref.tag, ref.digest) == oracle(text)
    assert str(ref) == text and ref.with_tag("x").tag == "x"


def test_a_driver_tag_is_read_from_a_reference_with_a_registry_port():
    spec = of_image("registry.local:5000/nvidia/driver:535-6.12.117_deb12-amd64-debian12")
    assert spec is not None and (spec.branch, spec.kernel, spec.os_tag) == ("535", "6.12.117+deb12-amd64", "debian12")
    assert of_image("registry.local:5000/nvidia/driver") is None  # no tag: the port is not one
    assert of_image("nvcr.io/nvidia/driver:580.105.08-ubuntu22.04") is None  # not a precompiled tag
