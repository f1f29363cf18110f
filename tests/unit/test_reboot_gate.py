"""May this node reboot tonight: one judgement per node (gpualign.model.reboot_gate), over Debian's recorded archive
(every kernel line its metapackages name) and the ledger's verdicts. A node is ready only on a positive judgement;
a neighbour already on the next kernel changes nothing for the others."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpualign.ledger.sources import Ledger
from gpualign.loaders.rules import load_rules
from gpualign.model.audit import DriverPod
from gpualign.model.facts import node_facts
from gpualign.model.ledger import Unsigned, Unverified
from gpualign.model.makers import Maker
from gpualign.model.reboot_gate import BootSource, Hold, ImageVerdict, NextBoot, next_boot, reboot_verdict
from gpualign.usecases import archive_next, tonight
from tests.support import builders
from tests.support.local_suite import RecordedIndexes as Recorded

RULES = load_rules(None)


def _debian(name: str, kernel: str, version: str = "12", **labels: str) -> dict:
    node = builders.node(name, kernel=kernel, os_id="debian", os_version=version)
    node["metadata"]["labels"].update(labels)
    return node


def _nodes(*nodes: dict) -> list:
    return [node_facts(n) for n in nodes]


def _pods(nodes: list, branch: str = "535") -> dict[str, DriverPod]:
    """Each node's driver pod on `branch` (its image's tag names the branch the node keeps)."""
    return {f.name: DriverPod.from_pod({
        "metadata": {"name": f"nvidia-driver-{f.name}", "namespace": "gpu-operator"},
        "spec": {"nodeName": f.name, "containers": [{"image": f"r/driver:{branch}-{f.kernel}-debian{f.os_version}"}]},
        "status": {"phase": "Running"}}) for f in nodes}


# Every line the recorded archive names a next kernel for: (a kernel its nodes run, the OS release)
LINES = [("6.1.0-50-amd64", "12"), ("6.1.0-53-cloud-amd64", "12"), ("6.12.115_deb13.1-amd64", "13"),
         ("6.12.115_deb13.1-cloud-amd64", "13")]


def _next_of(kernel: str, version: str) -> str:
    read = archive_next.read(_nodes(_debian("x", kernel, version)), Recorded())
    return read.kernels["x"]


def test_a_neighbour_on_the_next_kernel_leaves_the_others_held_until_the_image_is_judged():
    """The review's pool: deb-c1 on 6.1.0-53-cloud, deb-c2 already on the next cloud kernel. The image is missing:
    both are held (deb-c2 reboots into it too); once it is in the ledger, both may go."""
    nxt = _next_of("6.1.0-53-cloud-amd64", "12")
    nodes = _nodes(_debian("deb-c1", "6.1.0-53-cloud-amd64"), _debian("deb-c2", nxt))
    read = archive_next.read(nodes, Recorded())
    tag = f"535-{nxt}-debian12"
    empty = tonight.judge(read, nodes, _pods(nodes), Ledger(frozenset(), ("t",)), RULES, {})
    assert {v.node: (v.kernel, v.tag, v.hold) for v in empty.nodes} == {
        "deb-c1": (nxt, tag, Hold.MISSING), "deb-c2": (nxt, tag, Hold.MISSING)}
    present = tonight.judge(read, nodes, _pods(nodes), Ledger(frozenset({tag}), ("t",)), RULES, {})
    assert [v.ready for v in present.nodes] == [True, True]


@settings(max_examples=60, deadline=None)
@given(line=st.sampled_from(LINES), neighbours=st.lists(st.sampled_from(LINES), max_size=4),
       on_next=st.booleans(), present=st.booleans())
def test_a_nodes_verdict_does_not_depend_on_its_neighbours(line, neighbours, on_next, present):
    kernel, version = line
    me = _debian("me", kernel, version)
    others = [_debian(f"n{i}", _next_of(k, v) if on_next else k, v) for i, (k, v) in enumerate(neighbours)]
    alone_nodes = _nodes(me)
    all_nodes = _nodes(me, *others)
    nxt = _next_of(kernel, version)
    os_tag = f"debian{version}"
    branch = "535" if version == "12" else "550"
    ledger = Ledger(frozenset({f"{branch}-{nxt.replace('+', '_')}-{os_tag}"} if present else set()), ("t",))
    alone = tonight.judge(archive_next.read(alone_nodes, Recorded()), alone_nodes, _pods(alone_nodes, branch),
                          ledger, RULES, {})
    crowd = tonight.judge(archive_next.read(all_nodes, Recorded()), all_nodes,
                          {**_pods(all_nodes, "535"), **_pods(alone_nodes, branch)}, ledger, RULES, {})
    mine = next(v for v in crowd.nodes if v.node == "me")
    assert mine == alone.nodes[0]
    assert mine.ready == present and mine.source is BootSource.ARCHIVE


def test_wrong_unsigned_and_unverified_images_hold_as_plan_calls_them():
    nodes = _nodes(_debian("a", "6.1.0-50-amd64"))
    read = archive_next.read(nodes, Recorded())
    nxt = read.kernels["a"]
    tag = f"535-{nxt}-debian12"
    boot = NextBoot(nxt, BootSource.ARCHIVE)
    for why, hold in (("its label version=535-6.1.0-47-amd64 names another build", Hold.WRONG),
                      (Unsigned("unsigned: no signature by a trusted key over its digest (x.sig is not in the "
                                "registry)"), Hold.UNSIGNED),
                      (Unverified("modules not verified: its config carries no labels"), Hold.UNJUDGED)):
        verdict = reboot_verdict("a", boot, ImageVerdict(tag, True, why))
        assert verdict.hold is hold and why in verdict.why
    assert reboot_verdict("a", boot, ImageVerdict(tag, True)).ready
    assert reboot_verdict("a", boot, ImageVerdict(tag, None)).hold is Hold.UNJUDGED
    refused = reboot_verdict("a", boot, ImageVerdict(tag, False, maker=Maker.NONE, why_not="PREEMPT_RT"))
    assert refused.hold is Hold.CANNOT_BE_MADE and "PREEMPT_RT" in refused.why


def test_the_nodes_own_next_kernel_wins_and_an_unread_archive_holds_debian_nodes():
    assert next_boot("6.1.0-50-amd64", "6.1.0-58-amd64", "6.1.0-57-amd64", None, True) == \
        NextBoot("6.1.0-58-amd64", BootSource.LABEL)
    unread = next_boot("6.1.0-50-amd64", None, None, "Debian's archive not read: unreachable", True)
    assert unread.kernel is None and unread.source is BootSource.UNKNOWN
    assert reboot_verdict("a", unread, ImageVerdict("t", True)).hold is Hold.UNJUDGED
    # an Ubuntu node announcing nothing boots the kernel it runs: judged on that
    assert next_boot("5.15.0-124-generic", None, None, None, False) == \
        NextBoot("5.15.0-124-generic", BootSource.RUNNING)
    nodes = _nodes(_debian("a", "6.1.0-50-amd64"), builders.node("u", kernel="5.15.0-124-generic"))
    judged = tonight.judge(None, nodes, {}, Ledger(frozenset(), ("t",)), RULES, {}, archive_error="unreachable")
    by_node = {v.node: v for v in judged.nodes}
    assert by_node["a"].hold is Hold.UNJUDGED and "unreachable" in by_node["a"].why
    assert by_node["u"].source is BootSource.RUNNING and by_node["u"].hold is not None


def test_no_ledger_holds_every_node():
    nodes = _nodes(_debian("a", "6.1.0-50-amd64"))
    judged = tonight.judge(archive_next.read(nodes, Recorded()), nodes, _pods(nodes), None, RULES, {})
    assert [(v.hold, "no ledger" in v.why) for v in judged.nodes] == [(Hold.UNJUDGED, True)]


def test_an_image_whose_registry_does_not_answer_holds_its_nodes():
    """A present image nobody could read is never judged right: its nodes are held (unjudged), not let through."""
    nodes = _nodes(_debian("a", "6.1.0-50-amd64"))
    read = archive_next.read(nodes, Recorded())
    tag = f"535-{read.kernels['a']}-debian12"
    registry = Ledger(frozenset({tag}), ("registry://127.0.0.1:1/nvidia/driver",))
    judged = tonight.judge(read, nodes, _pods(nodes), registry, RULES, {})
    assert [(v.hold, "not judged" in v.why) for v in judged.nodes] == [(Hold.UNJUDGED, True)]
