"""The controller's reboot gate (gpualign.controller.reboot_gate) over its archive watch and the findings it keeps:
each node judged on its own; held until the image of the kernel it boots next is present and judged; held when the
archive was not read or its reading went stale; and exported as the gauges kured's alerts are made of."""

from __future__ import annotations

from prometheus_client import generate_latest

from gpualign.controller.archive_watch import ArchiveWatch
from gpualign.controller.metrics import Metrics
from gpualign.controller.reboot_gate import RebootGate
from gpualign.model.audit import Status
from gpualign.model.facts import node_facts
from gpualign.model.reboot_gate import BootSource, Hold
from tests.support import builders
from tests.support.findings import node_finding
from tests.support.local_suite import RecordedIndexes as Recorded
from tests.support.local_suite import UnreadableIndexes as Unreadable


def _gate(tmp_path, nodes, ledger: set[str], wrong: dict[str, str] | None = None, index=None, clock=None):  # noqa: ANN001, ANN202
    by_name = {n.name: n for n in nodes}

    def judged(name: str, label: str):  # noqa: ANN202
        tag = f"535-{label}-debian12"
        if tag in (wrong or {}):
            return node_finding(tag, Status.WRONG_IMAGE, name=name, reason=wrong[tag])
        return node_finding(tag, Status.PRESENT if tag in ledger else Status.MISSING, name=name)

    watch = ArchiveWatch(lambda: nodes, lambda f, label: judged(f.name, label), index or Recorded(),
                         seen=tmp_path / "seen.json", every=300.0, **({"clock": clock} if clock else {}))
    gate = RebootGate(by_name.get, lambda: sorted(by_name), lambda n: judged(n, by_name[n].kernel or ""),
                      lambda n: None, lambda f, label: judged(f.name, label), archive=watch)
    watch.on_read.append(gate.judge_all)
    return watch, gate


def _debian(name: str, kernel: str, **labels: str):  # noqa: ANN202
    node = builders.node(name, kernel=kernel, os_id="debian", os_version="12")
    node["metadata"]["labels"].update(labels)
    return node_facts(node)


def test_each_node_held_until_its_next_kernels_image_is_present_whatever_its_neighbours_run(tmp_path):
    nodes = [_debian("deb-c1", "6.1.0-53-cloud-amd64"), _debian("deb-c2", "6.1.0-57-cloud-amd64")]
    ledger: set[str] = set()
    watch, gate = _gate(tmp_path, nodes, ledger)
    gate.judge_all()
    assert {v.node: v.hold for v in gate.snapshot()} == {"deb-c1": Hold.UNJUDGED, "deb-c2": Hold.UNJUDGED}
    watch.poll()
    assert {v.node: (v.kernel, v.hold) for v in gate.snapshot()} == {
        "deb-c1": ("6.1.0-57-cloud-amd64", Hold.MISSING), "deb-c2": ("6.1.0-57-cloud-amd64", Hold.MISSING)}
    ledger.add("535-6.1.0-57-cloud-amd64-debian12")
    gate.judge_all()
    assert all(v.ready for v in gate.snapshot())


def test_a_wrong_image_holds_and_the_node_s_own_next_kernel_wins(tmp_path):
    nodes = [_debian("a", "6.1.0-50-amd64"), _debian("b", "6.1.0-50-amd64", **{"gpualign.io/kernel.next":
                                                                              "6.1.0-58-amd64"})]
    watch, gate = _gate(tmp_path, nodes, {"535-6.1.0-57-amd64-debian12", "535-6.1.0-58-amd64-debian12"},
                        wrong={"535-6.1.0-57-amd64-debian12": "its config carries no labels"})
    watch.poll()
    verdicts = {v.node: v for v in gate.snapshot()}
    assert verdicts["a"].hold is Hold.WRONG and "no labels" in verdicts["a"].why
    assert verdicts["b"].source is BootSource.LABEL and verdicts["b"].ready


def test_an_unreadable_archive_or_a_stale_reading_holds_every_debian_node(tmp_path):
    nodes = [_debian("a", "6.1.0-50-amd64")]
    watch, gate = _gate(tmp_path, nodes, set(), index=Unreadable())
    watch.poll()
    (v,) = gate.snapshot()
    assert v.hold is Hold.UNJUDGED and "HTTP 503" in v.why
    clock = [1000.0]
    watch, gate = _gate(tmp_path, nodes, {"535-6.1.0-57-amd64-debian12"}, clock=lambda: clock[0])
    watch.poll()
    assert gate.snapshot()[0].ready
    clock[0] += 601  # two polls of 300 s missed
    gate.judge_all()
    assert gate.snapshot()[0].hold is Hold.UNJUDGED and "more than two polls" in gate.snapshot()[0].why


def test_the_gauges_kured_reads(tmp_path):
    nodes = [_debian("a", "6.1.0-50-amd64"), _debian("b", "6.1.0-57-amd64")]
    watch, gate = _gate(tmp_path, nodes, set())
    watch.poll()
    metrics = Metrics(lambda: {"nodes": [], "missing": {}, "upgrade_counts": {}, "blocked": [], "leader": 1,
                               "updated": "", "ledger_sources": [], "gated_for": {}, "wrong": {}})
    metrics.watch_reboots(gate.snapshot, lambda: (watch.read_at, watch.every))
    text = generate_latest(metrics.registry).decode()
    for node in ("a", "b"):
        assert (f'gpualign_node_reboot_held{{hold="missing",kernel="6.1.0-57-amd64",node="{node}",'
                f'tag="535-6.1.0-57-amd64-debian12"}} 1.0') in text
    assert "gpualign_archive_poll_seconds 300.0" in text
    (stamp,) = [line for line in text.splitlines() if line.startswith("gpualign_archive_read_timestamp_seconds ")]
    assert float(stamp.split()[1]) == watch.read_at > 0
