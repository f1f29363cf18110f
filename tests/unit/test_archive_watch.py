"""The controller's read of Debian's archive (gpualign.controller.archive_watch): each pool's next kernel judged as
its nodes would be on it, handed to the build trigger under the pool's key; a pool already on it, nothing."""

from __future__ import annotations

from gpualign.controller.archive_watch import PREFIX, ArchiveWatch
from gpualign.model.audit import Status
from gpualign.model.facts import node_facts
from tests.support import builders
from tests.support.findings import node_finding
from tests.support.local_suite import RecordedIndexes as Recorded
from tests.support.local_suite import UnreadableIndexes as Unreadable


def test_each_pool_not_yet_on_its_next_kernel_is_handed_on_once(tmp_path):
    nodes = [node_facts(builders.node(n, kernel=k, os_id="debian", os_version=v)) for n, k, v in
             (("a", "6.12.115_deb13.1-amd64", "13"), ("b", "6.12.115_deb13.1-amd64", "13"),
              ("c", "6.1.0-57-amd64", "12"),  # c and d are on their lines' next kernel already
              ("d", "6.12.118_deb13-cloud-amd64", "13"))]
    asked = []

    def future(facts, label):  # noqa: ANN001, ANN202
        asked.append((facts.name, label))
        return node_finding(f"550-{label}-debian13", Status.MISSING, name=facts.name)

    woken = []
    watch = ArchiveWatch(lambda: nodes, future, Recorded(), seen=tmp_path / "seen.json",
                         on_change=lambda: woken.append(1))
    watch.poll()
    assert asked == [("a", "6.12.118_deb13-amd64")]  # one judgement a pool, on its first node
    (key, finding), = watch.snapshot().items()
    assert key == PREFIX + "debian13 6.12 generic-amd64" and "/" in key  # never a node's name
    assert finding.pool is not None and finding.pool.nodes == ("a", "b") and finding.kernel == "6.12.118+deb13-amd64"
    assert finding.as_dict()["archive"]["nodes"] == ["a", "b"]
    assert woken == [1]
    watch.poll()
    assert woken == [1]  # nothing changed: the trigger is not woken again


def test_an_archive_that_cannot_be_read_is_said_once_and_hands_on_nothing(tmp_path, caplog):
    nodes = [node_facts(builders.node("a", kernel="6.12.115_deb13.1-amd64", os_id="debian", os_version="13"))]
    watch = ArchiveWatch(lambda: nodes, lambda f, k: node_finding(None), Unreadable(), seen=tmp_path / "seen.json")
    watch.poll()
    watch.poll()
    assert watch.snapshot() == {} and watch.error and "HTTP 503" in watch.error
    assert sum("Debian's archive" in r.getMessage() for r in caplog.records) == 1


def test_a_pool_waits_for_its_image_until_the_ledger_has_it_and_the_wait_is_measured_from_the_first_read(tmp_path):
    """The reboot gate's input: each node of a pool whose next kernel has no image; a changed ledger re-judges the
    pools without reading the archive again, and the seconds from the archive's first naming to the image are told."""
    nodes = [node_facts(builders.node(n, kernel="6.12.115_deb13.1-amd64", os_id="debian", os_version="13"))
             for n in ("a", "b")]
    ledger: set[str] = set()

    def future(facts, label):  # noqa: ANN001, ANN202
        tag = f"550-{label}-debian13"
        return node_finding(tag, Status.PRESENT if tag in ledger else Status.MISSING, name=facts.name)

    clock = [1000.0]
    landed: list[tuple[str, float]] = []
    reads = Counting()
    watch = ArchiveWatch(lambda: nodes, future, reads, seen=tmp_path / "seen.json", clock=lambda: clock[0],
                         on_landed=lambda pool, s: landed.append((pool, s)))
    watch.poll()
    (pending,) = watch.pending()
    assert pending.nodes == ("a", "b") and pending.tag == "550-6.12.118_deb13-amd64-debian13"
    assert pending.buildable and pending.kernel == "6.12.118+deb13-amd64"
    read_before = reads.count
    clock[0] = 1150.0
    ledger.add(pending.tag)
    watch.rejudge()
    assert reads.count == read_before  # the ledger's change alone: no archive read
    assert watch.pending() == [] and landed == [("debian13 6.12 generic-amd64", 150.0)]
    watch.rejudge()
    assert len(landed) == 1  # told once


def test_a_kernel_nobody_can_make_stays_pending_with_its_reason():
    nodes = [node_facts(builders.node("r", kernel="6.12.115_deb13.1-rt-amd64", os_id="debian", os_version="13"))]

    def future(facts, label):  # noqa: ANN001, ANN202
        return node_finding(f"550-{label}-debian13", Status.MISSING, name=facts.name, action="none",
                            why="NVIDIA's driver refuses PREEMPT_RT kernels")

    watch = ArchiveWatch(lambda: nodes, future, Recorded())
    watch.poll()
    (pending,) = watch.pending()
    assert not pending.buildable and "PREEMPT_RT" in pending.why


class Counting(Recorded):
    def __init__(self) -> None:
        self.count = 0

    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str:
        self.count += 1
        return super().kernel_images(suite, arch, component)


def test_a_node_already_on_the_next_kernel_keeps_its_pool_judged_for_the_others(tmp_path):
    """Review 6's H1: deb-c2 joined on the next cloud kernel; deb-c1 still boots into it tonight, so the pool stays
    judged (on deb-c1) and handed on, and every node of it is named while the image is missing."""
    nodes = [node_facts(builders.node(n, kernel=k, os_id="debian", os_version="12")) for n, k in
             (("deb-c1", "6.1.0-53-cloud-amd64"), ("deb-c2", "6.1.0-57-cloud-amd64"))]
    asked = []

    def future(facts, label):  # noqa: ANN001, ANN202
        asked.append(facts.name)
        return node_finding(f"535-{label}-debian12", Status.MISSING, name=facts.name)

    watch = ArchiveWatch(lambda: nodes, future, Recorded(), seen=tmp_path / "seen.json")
    watch.poll()
    assert asked == ["deb-c1"]
    (pending,) = watch.pending()
    assert pending.nodes == ("deb-c1", "deb-c2") and pending.kernel == "6.1.0-57-cloud-amd64"
    last, error = watch.reading()
    assert error is None and last is not None and last.kernels == {"deb-c1": "6.1.0-57-cloud-amd64",
                                                                   "deb-c2": "6.1.0-57-cloud-amd64"}


def test_a_reading_older_than_two_polls_is_no_reading(tmp_path):
    nodes = [node_facts(builders.node("a", kernel="6.1.0-50-amd64", os_id="debian", os_version="12"))]
    clock = [1000.0]
    watch = ArchiveWatch(lambda: nodes, lambda f, k: node_finding(None), Recorded(), seen=tmp_path / "seen.json",
                         every=300.0, clock=lambda: clock[0])
    assert watch.reading() == (None, None)  # not read yet: no reading
    watch.poll()
    assert watch.reading()[0] is not None and watch.read_at == 1000.0
    clock[0] = 1000.0 + 601
    last, error = watch.reading()
    assert last is None and error is not None and "more than two polls" in error
