"""`plan --kernel next`: each Debian pool planned onto the kernel Debian's archive will install next, read through
the verified door from an archive laid out and signed as Debian's (the archive's own recorded metapackages, signed
here with a key trusted as apt trusts a signed-by key), and since when it was named."""

from __future__ import annotations

import json

from gpualign.model.reboot_gate import Hold
from gpualign.usecases import archive_next
from tests.support import builders
from tests.support.cli import run_cli
from tests.support.local_suite import DATA, LocalArchive, serve_directory


class Recorded:
    """The recorded stanzas, as the door would hand them over."""

    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str:
        return (DATA / f"{suite}_{arch}.Packages").read_text()


def debian(name: str, kernel: str, version: str, arch: str = "amd64") -> dict:
    return builders.node(name, kernel=kernel, os_id="debian", os_version=version, arch=arch)


def test_each_pool_gets_its_own_lines_next_kernel_and_the_first_sighting_is_kept(tmp_path):
    from gpualign.model.facts import node_facts

    nodes = [node_facts(n) for n in (debian("a", "6.12.115_deb13.1-amd64", "13"), debian("b", "6.1.0-50-amd64", "12"),
                                     debian("c", "6.1.0-53-cloud-amd64", "12"),
                                     debian("d", "6.12.111_deb12-arm64", "12", "arm64"),
                                     debian("e", "7.2.11_deb13-amd64", "13"),
                                     builders.node("u", kernel="5.15.0-124-generic"))]
    seen = tmp_path / "first-seen.json"
    tonight = archive_next.read(nodes, Recorded(), seen=seen, now=1000.0)
    assert tonight.kernels == {"a": "6.12.118+deb13-amd64", "b": "6.1.0-57-amd64", "c": "6.1.0-57-cloud-amd64",
                               "d": "6.12.118+deb12-arm64"}
    assert set(tonight.unknown) == {"e", "u"} and "backports" in tonight.unknown["e"]
    assert {p.name for p in tonight.pools} >= {"debian13 6.12 generic-amd64", "debian12 6.1 cloud-amd64"}
    later = archive_next.read(nodes, Recorded(), seen=seen, now=5000.0)
    assert {p.since for p in later.pools if p.next} == {1000.0}  # first read here the first read, not the last


def test_an_architecture_the_mirror_does_not_carry_leaves_only_its_pools_unknown(tmp_path, serve):
    """A mirror of amd64 alone (an internal one, cut to what the fleet ran) still announces the amd64 pools' next
    kernels; the arm64 pool is unknown, saying why."""
    from gpualign.archive.indexes import ArchiveIndex
    from gpualign.model.facts import node_facts

    with LocalArchive(tmp_path / "archive") as archive:
        archive.publish_recorded("bookworm", "amd64")
        server = serve_directory(serve, archive.root)
        index = ArchiveIndex(mirror=f"{server.url}/debian", security=f"{server.url}/debian-security",
                             keyring=str(archive.keyring), cache=tmp_path / "cache")
        nodes = [node_facts(n) for n in (debian("a", "6.1.0-50-amd64", "12"),
                                         debian("g", "6.1.0-50-arm64", "12", "arm64"))]
        tonight = archive_next.read(nodes, index)
    assert tonight.kernels == {"a": "6.1.0-57-amd64"}
    assert tonight.unknown == {"g": "the archive carries no arm64 index in bookworm, bookworm-updates or "
                                    "bookworm-security"}


def test_plan_kernel_next_reads_a_signed_archive_and_plans_every_pool_at_once(tmp_path, serve):
    with LocalArchive(tmp_path / "archive") as archive, LocalArchive(tmp_path / "other") as other:
        _plan_next(tmp_path, serve, archive, other)


def _plan_next(tmp_path, serve, archive, other):  # noqa: ANN001, ANN202
    archive.publish_recorded("trixie", "amd64")
    archive.publish_recorded("bookworm", "amd64")
    server = serve_directory(serve, archive.root)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"items": [debian("d13-a", "6.12.115_deb13.1-amd64", "13"),
                                           debian("d13-b", "6.12.117_deb13-amd64", "13"),
                                           debian("d12-cloud", "6.1.0-53-cloud-amd64", "12"),
                                           debian("d12-rt", "6.1.0-53-rt-amd64", "12")]}))
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("550-6.12.117_deb13-amd64-debian13\n")
    env = {**archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")}
    res = run_cli("plan", "--kernel", "next", "--nodes-file", str(nodes), "--ledger", str(ledger),
                  "--branch-policy", str(_policy(tmp_path)), "-o", "json", env=env)
    assert res.code == 1, res.err
    body = json.loads(res.out)
    pools = {p["pool"]: p for p in body["archive"]}
    assert pools["debian13 6.12 generic-amd64"]["next"] == "6.12.118+deb13-amd64"
    assert pools["debian13 6.12 generic-amd64"]["suite"] == "trixie-security"
    assert pools["debian13 6.12 generic-amd64"]["nodes"] == ["d13-a", "d13-b"]
    assert pools["debian12 6.1 rt-amd64"]["next"] == "6.1.0-57-rt-amd64"
    needed = {n["tag"]: n for n in body["needed"]}
    assert needed["550-6.12.118_deb13-amd64-debian13"]["action"] == "build"
    assert needed["535-6.1.0-57-cloud-amd64-debian12"]["action"] == "build"
    assert needed["535-6.1.0-57-rt-amd64-debian12"]["action"] == "none"
    assert body["cannot_make"] == [{"tag": "535-6.1.0-57-rt-amd64-debian12", "kind": "preempt-rt",
                                    "reason": needed["535-6.1.0-57-rt-amd64-debian12"]["action_reason"]}]
    assert "Debian's archive installs 6.12.118+deb13-amd64 next" not in res.err  # said on a terminal only
    # the same archive signed by another key is refused, in one line, naming the keyring
    bad = run_cli("plan", "--kernel", "next", "--nodes-file", str(nodes), "--ledger", str(ledger), "--driver-branch",
                  "550", env={**env, "GPUALIGN_DEBIAN_KEYRING": str(other.keyring)})
    assert bad.code == 1 and len(bad.err.strip().splitlines()) == 1, bad.err
    assert "is not signed by a key of" in bad.err and str(other.keyring) in bad.err


def _policy(tmp_path):  # noqa: ANN001, ANN202
    path = tmp_path / "pools.yaml"
    path.write_text('pools:\n  - selector: "feature.node.kubernetes.io/system-os_release.ID=debian,'
                    'feature.node.kubernetes.io/system-os_release.VERSION_ID=13"\n    branch: "550"\n'
                    '  - selector: ""\n    branch: "535"\n')
    return path


def test_tonight_tells_each_pools_next_image_present_building_missing_or_refused():
    """`status --tonight`: the same judgement as `plan --kernel next`, per pool, with the controller's build Jobs."""
    from gpualign.ledger.sources import Ledger
    from gpualign.loaders.rules import load_rules
    from gpualign.model.audit import DriverPod
    from gpualign.model.facts import node_facts
    from gpualign.usecases import tonight

    nodes = [node_facts(n) for n in (debian("a", "6.1.0-50-amd64", "12"), debian("b", "6.1.0-53-cloud-amd64", "12"),
                                     debian("c", "6.1.0-53-rt-amd64", "12"),
                                     debian("d", "6.12.115_deb13.1-amd64", "13"))]

    def pod(node: str, tag: str) -> DriverPod:
        return DriverPod.from_pod({"metadata": {"name": f"nvidia-driver-{node}", "namespace": "gpu-operator"},
                                   "spec": {"nodeName": node, "containers": [{"image": f"r/driver:{tag}"}]},
                                   "status": {"phase": "Running"}})

    pods = {"a": pod("a", "535-6.1.0-50-amd64-debian12"), "b": pod("b", "535-6.1.0-53-cloud-amd64-debian12"),
            "c": pod("c", "535-6.1.0-53-rt-amd64-debian12"), "d": pod("d", "550-6.12.115_deb13.1-amd64-debian13")}
    read = archive_next.read(nodes, Recorded(), now=1_764_900_000.0)
    ledger = Ledger(frozenset({"535-6.1.0-57-amd64-debian12"}), ("test",))
    builds = {"535-6.1.0-57-cloud-amd64-debian12": "image building: Job gpualign-builds/b-1, for 2m (attempt 1)"}
    judged = {p.pool.name: p for p in tonight.judge(read, nodes, pods, ledger, load_rules(None), builds).pools}
    states = {name: [(i["tag"], i["state"]) for i in p.as_dict()["images"]] for name, p in judged.items()}
    assert states["debian12 6.1 generic-amd64"] == [("535-6.1.0-57-amd64-debian12", "present")]
    assert states["debian12 6.1 cloud-amd64"] == [("535-6.1.0-57-cloud-amd64-debian12", "missing; image building: "
                                                   "Job gpualign-builds/b-1, for 2m (attempt 1)")]
    (rt,) = states["debian12 6.1 rt-amd64"]
    assert rt[1].startswith("cannot be made: ") and "PREEMPT_RT" in rt[1]
    (d13,) = states["debian13 6.12 generic-amd64"]
    assert d13 == ("550-6.12.118_deb13-amd64-debian13", "missing: build it before any node reboots into it")
    assert judged["debian12 6.1 generic-amd64"].line().startswith(
        "debian12 6.1 generic-amd64 (1 node): 6.1.0-57-amd64 next (bookworm-security, first read here "
        "2025-12-05 02:00 UTC); 535-6.1.0-57-amd64-debian12 present")
    unjudged = tonight.judge(read, nodes, pods, None, load_rules(None), {})
    assert all(i["state"] == "not judged (no ledger read)" and i["in_ledger"] is None
               for p in unjudged.pools for i in p.as_dict()["images"])
    assert {v.node: v.hold for v in unjudged.nodes} == dict.fromkeys("abcd", Hold.UNJUDGED)
