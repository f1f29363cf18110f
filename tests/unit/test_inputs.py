"""Ledger files, node dumps and selectors: good input parsed, bad input named by file and line."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base.errors import BadInput
from gpualign.kube.inventory import from_file, load_nodes_file
from gpualign.ledger.file import read
from gpualign.model import selectors


def test_text_ledger_with_comments_tags_and_references(tmp_path: Path):
    f = tmp_path / "images.txt"
    f.write_text("# in-house builds\n580-5.15.0-69-generic-ubuntu22.04\n\n"
                 "nvcr.io/nvidia/driver:580-6.8.0-48-generic-ubuntu24.04  # mirrored\n"
                 "registry.local:5000/nvidia/driver:535-5.15.0-1-generic-ubuntu22.04\n")
    assert read(f) == {(None, "580-5.15.0-69-generic-ubuntu22.04"),
                       ("nvcr.io/nvidia/driver", "580-6.8.0-48-generic-ubuntu24.04"),
                       ("registry.local:5000/nvidia/driver", "535-5.15.0-1-generic-ubuntu22.04")}


def test_yaml_and_json_lists(tmp_path: Path):
    y = tmp_path / "l.yaml"
    y.write_text("images:\n  - 580-a-ubuntu22.04\n  - nvcr.io/nvidia/driver:580-b-ubuntu22.04\n")
    j = tmp_path / "l.json"
    j.write_text(json.dumps(["580-c-ubuntu22.04"]))
    assert read(y) == {(None, "580-a-ubuntu22.04"), ("nvcr.io/nvidia/driver", "580-b-ubuntu22.04")}
    assert read(j) == {(None, "580-c-ubuntu22.04")}


def test_a_full_reference_answers_only_for_its_own_repository(tmp_path: Path):
    from gpualign.ledger.sources import load

    f = tmp_path / "images.txt"
    f.write_text("quay.io/other/thing:580-k-ubuntu24.04\n580-bare-ubuntu22.04\n")
    ledger = load([str(f)])
    assert not ledger.for_repository("nvcr.io/nvidia/driver").has("580-k-ubuntu24.04")
    assert ledger.for_repository("quay.io/other/thing").has("580-k-ubuntu24.04")
    assert ledger.for_repository("nvcr.io/nvidia/driver").has("580-bare-ubuntu22.04")  # a bare tag: any repo


@pytest.mark.parametrize("name,text,message", [
    ("empty.txt", "", "holds no tags"),
    ("comments.txt", "# nothing yet\n\n", "holds no tags"),
    ("empty.yaml", "images: []\n", "holds no tags"),
    ("two.yaml", "- a\n---\n- b\n", "one YAML document"),
])
def test_an_empty_or_multi_document_ledger_is_refused(tmp_path: Path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(BadInput, match=message):
        read(f)


@pytest.mark.parametrize("name,text,message", [
    ("a.txt", "ok-tag\nnvcr.io/nvidia/driver@sha256:abc\n", r"a.txt:2: .*digest"),
    ("b.txt", "ok\nhas space here\n", r"b.txt:2: .* is not a tag"),
    ("c.json", '["x",\n 3]', r"c.json: item 2 is not a string"),
    ("d.json", '["x",\n', r"d.json:2: invalid JSON"),
    ("e.yaml", "- a\n- [b\n", r"e.yaml:\d+: invalid YAML"),
    ("f.yaml", "just: a map\n", r"expected a list"),
    ("g.yaml", "[a, {b\n", r"g.yaml:\d+: invalid YAML"),  # flow style is YAML too: never called "invalid JSON"
])
def test_bad_ledgers_name_file_and_line(tmp_path: Path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(BadInput, match=message):
        read(f)


def test_unreadable_ledger(tmp_path: Path):
    with pytest.raises(BadInput, match="cannot read") as err:
        read(tmp_path / "nope.txt")
    assert "registry://" not in err.value.message
    with pytest.raises(BadInput, match=r"cannot read: .* \(a registry is named with its scheme: --ledger "
                                       r"registry://127.0.0.1:5000/nvidia/driver\)"):
        read(Path("127.0.0.1:5000/nvidia/driver"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInput, match="not a text file"):
        read(tmp_path / "bin")


def test_nodes_dump_json_and_yaml(tmp_path: Path):
    nodes = {"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "g", "labels": {"nvidia.com/gpu.present": "true", "pool": "a"}}},
        {"kind": "Node", "metadata": {"name": "c", "labels": {}}}]}
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(nodes))
    inv = from_file(f, None)
    assert [n.name for n in inv.nodes] == ["g"] and inv.pods is None
    assert from_file(f, "pool=b").nodes == ()
    y = tmp_path / "nodes.yaml"
    y.write_text("kind: List\nitems:\n- kind: Node\n  metadata:\n    name: g\n")
    assert len(load_nodes_file(y)) == 1


@pytest.mark.parametrize("text,message", [
    ('{"items": [', r"nodes.json:1: invalid JSON"),
    ('{"kind": "PodList", "items": [{"kind": "Pod", "metadata": {}}]}', "a PodList, not a node list"),
    ('{"kind": "PodList", "items": [{"metadata": {"name": "p"}}]}', "a PodList, not a node list"),  # items w/o kind
    ('{"items": [{"kind": "Pod", "metadata": {}}]}', "item 1 is a Pod, not a Node"),
    ('{"foo": 1}', "not a node list"),
    ('{"items": [42]}', "item 1 is not a Node object"),
])
def test_bad_dumps(tmp_path: Path, text, message):
    f = tmp_path / "nodes.json"
    f.write_text(text)
    with pytest.raises(BadInput, match=message):
        load_nodes_file(f)


def test_selectors():
    labels = {"pool": "train", "zone": "a", "gpu": "true"}
    assert selectors.parse("pool=train,zone!=b").matches(labels)
    assert selectors.parse("pool in (train, infer),!spot").matches(labels)
    assert not selectors.parse("pool notin (train)").matches(labels)
    assert selectors.parse("gpu").matches(labels) and not selectors.parse("spot").matches(labels)
    assert selectors.parse("").matches({})
    with pytest.raises(BadInput, match="invalid label value at column 6"):
        selectors.parse("pool=(")


@pytest.mark.parametrize("text,message", [
    ("pool in (train", "expected ')' at column 15"),
    ("pool=train,", "expected a requirement after ',' at column 12"),
    ("a=b,,c", "expected a label key at column 5"),
    ("a=b c", "expected ',' at column 5"),
])
def test_selector_errors_name_the_real_column(text, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        selectors.parse(text)


@given(st.text(max_size=30))
def test_selector_parser_is_total(text):
    with contextlib.suppress(BadInput):
        selectors.parse(text).matches({"a": "b"})
