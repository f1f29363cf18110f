"""Tag derivation from node labels (REFERENCE §1), including the properties: total and deterministic."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base import labels as L
from gpualign.base.errors import BadInput
from gpualign.loaders.rules import load_rules
from gpualign.model.facts import node_facts
from gpualign.model.tags import (
    kernel_flavour,
    normalize_branch,
    os_tag,
    required_image,
    sanitize_kernel,
)
from tests.support import builders

RULES = load_rules()


node = functools.partial(builders.node, kernel="5.15.0-69-generic")


def test_precompiled_tag_matches_nvidias_example():
    req = required_image(node_facts(node()), "525", RULES)
    assert req.tag == "525-5.15.0-69-generic-ubuntu22.04"


def test_published_combination_and_in_house_reasons():
    assert required_image(node_facts(node()), "580", RULES).published
    gcp = required_image(node_facts(node(**{L.KERNEL: "6.8.0-1015-gcp"})), "580", RULES)
    assert not gcp.published and "build it in-house" in gcp.told and "'gcp'" in gcp.reason
    old_branch = required_image(node_facts(node()), "535", RULES)
    assert not old_branch.published and "branch 535" in old_branch.reason
    rhel = required_image(node_facts(node(**{L.KERNEL: "5.14.0-427.37.1.el9_4.x86_64", L.OS_ID: "rhel",
                                             L.OS_VERSION: "9.4"})), "580", RULES)
    assert rhel.tag == "580-5.14.0-427.37.1.el9_4.x86_64-rhel9"  # raw kernel in the tag, major-only OS
    assert not rhel.published


def test_os_tag_rules_are_data():
    assert os_tag("ubuntu", "22.04", RULES) == "ubuntu22.04"
    assert os_tag("rhcos", "4.18", RULES) == "rhcos4.18"
    for os_id in ("rhel", "rocky", "ol"):
        assert os_tag(os_id, "9.4", RULES) == f"{os_id}9"
    assert os_tag("talos", "1.12.6", RULES) == "talos1.12.6"  # unknown OS: never rejected, like the operator


def test_rules_override_file(tmp_path: Path):
    f = tmp_path / "rules.yaml"
    f.write_text("os_tag:\n  major_version_only: []\n")
    assert os_tag("rhel", "9.4", load_rules(f)) == "rhel9.4"
    bad = tmp_path / "bad.yaml"
    bad.write_text("os_tag: [\n")
    with pytest.raises(BadInput, match=r"bad.yaml:\d+: invalid YAML"):
        load_rules(bad)


def test_regular_tag_uses_full_version():
    req = required_image(node_facts(node()), "580", RULES, precompiled=False)
    assert req.tag == "580.173.02-ubuntu22.04"
    req = required_image(node_facts(node()), "550", RULES, precompiled=False, driver_version="550.90.07")
    assert req.tag == "550.90.07-ubuntu22.04"


def test_sanitized_kernel_and_flavour():
    assert sanitize_kernel("5.14.0-427.37.1.el9_4.x86_64") == "5.14.0-427.37.1.el9.4"
    assert sanitize_kernel("5.14.0-427.13.1.el9_4.aarch64_64k") == "5.14.0-427.13.1.el9.4"
    assert kernel_flavour("6.8.0-1017-azure-fde") == "azure-fde"
    assert kernel_flavour("5.14.0-427.el9.x86_64") is None


def test_branch_normalization_refuses_digests():
    assert normalize_branch("580.95.05") == "580"
    with pytest.raises(BadInput, match="digest"):
        normalize_branch("sha256:abc")
    with pytest.raises(BadInput):
        normalize_branch("latest")


@pytest.mark.parametrize("labels,needle", [
    ({L.KERNEL: None}, "no kernel-version.full label: is Node Feature Discovery running?"),
    ({L.OS_ID: None}, "no system-os_release.ID label"),
    ({L.OS_VERSION: None}, "no system-os_release.VERSION_ID label"),
    ({L.KERNEL: "not a kernel"}, "unparsable kernel label"),
    ({L.DRIVER_CURRENT_FULL: "5x0"}, "unparsable driver label"),
])
def test_missing_or_bad_labels_make_the_node_unknown_with_a_reason(labels, needle):
    req = required_image(node_facts(node(**labels)), "580", RULES)
    assert req.tag is None
    assert needle in req.reason


label_text = st.one_of(st.none(), st.text(max_size=40), st.from_regex(r"[0-9]\.[0-9]{1,2}\.[0-9]-[0-9]{1,4}-[a-z]{1,8}",
                                                                     fullmatch=True))


@given(kernel=label_text, os_id=label_text, version=label_text, major=label_text, branch=st.sampled_from(
    [None, "535", "580", "595"]), precompiled=st.booleans())
def test_tag_derivation_is_total_and_deterministic(kernel, os_id, version, major, branch, precompiled):
    n = node(**{L.KERNEL: kernel, L.OS_ID: os_id, L.OS_VERSION: version, L.DRIVER_LEGACY["major"]: major})
    first = required_image(node_facts(n), branch, RULES, precompiled=precompiled)
    again = required_image(node_facts(n), branch, RULES, precompiled=precompiled)
    assert first == again
    if precompiled:
        assert (first.tag is None) == bool(node_facts(n).problems or not branch)
    assert first.reason


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                    max_leaves=12))
def test_node_facts_never_raise_on_arbitrary_objects(obj):
    facts = node_facts(obj if isinstance(obj, dict) else {"metadata": obj})
    required_image(facts, "580", RULES)
