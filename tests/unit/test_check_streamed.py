"""A cluster's GPU nodes decided page by page, while the next page is on the wire, make the check the whole read
makes: the same report, byte for byte, and the same warnings, with or without the GPU Operator's objects. The
pages are decided as they come: the API server here holds the last page until the first has been decided."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from gpualign.base import labels as L
from gpualign.cli.inputs import branch_policy
from gpualign.loaders.rules import load_rules
from gpualign.usecases.check import Setup, check_cluster, stream
from gpualign.usecases.ledgers import load_ledger
from gpualign.usecases.nodes import Reading
from tests.support import builders
from tests.support.loopback_http import loopback_kubeconfig, send

KERNELS = ("5.15.0-124-generic", "5.15.0-125-generic", "6.8.0-48-generic")
REPO = "reg.example/nvidia/driver"


def fleet(count: int) -> list[dict[str, Any]]:
    """GPU nodes of three kernels; every 7th runs its driver on the host, every 11th is arm64."""
    nodes = []
    for i in range(count):
        extra: dict[str, str] = {}
        if i % 7 == 3:
            extra[L.DEPLOY_DRIVER] = "false"
        nodes.append(builders.node(f"gpu-{i:05d}", kernel=KERNELS[i % 3], arch="arm64" if i % 11 == 5 else "amd64",
                                   **extra))
    return nodes


def driver_pod(node: str, kernel: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "gpu-operator", "name": f"nvidia-driver-{node}"},
            "spec": {"nodeName": node, "containers": [{"image": f"{REPO}:580-{kernel}-ubuntu22.04"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def operator_objects() -> dict[str, list[dict[str, Any]]]:
    """A ClusterPolicy handing the driver to two NVIDIADrivers that overlap on one kernel, and their DaemonSet."""
    cp = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
          "spec": {"driver": {"useNvidiaDriverCRD": True, "usePrecompiled": True, "repository": "reg.example/nvidia",
                              "image": "driver", "version": "580"}}}

    def nd(name: str, selector: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name},
                "spec": {"driverType": "gpu", "usePrecompiled": True, "repository": "reg.example/nvidia",
                         "image": "driver", "version": "580", "nodeSelector": selector}}

    ds = {"metadata": {"namespace": "gpu-operator", "name": "nvidia-driver-a"}, "spec": {"template": {"spec": {
        "nodeSelector": {L.KERNEL: KERNELS[1]},
        "containers": [{"name": "nvidia-driver-ctr", "image": f"{REPO}:580-{KERNELS[0]}-ubuntu22.04"}]}}}}
    return {"clusterpolicies": [cp],
            "nvidiadrivers": [nd("a", {L.KERNEL: KERNELS[1]}), nd("b", {L.GPU_PRESENT: "true"})],
            "daemonsets": [ds]}


def api_server(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], operator: dict[str, list[Any]] | None,
               first_decided: threading.Event):
    """Pages of nodes by limit and continue; the last page only once the first has been decided."""
    def answer(h) -> None:
        url = urlsplit(h.path)
        q = parse_qs(url.query)
        if url.path == "/api/v1/nodes":
            start, limit = int(q.get("continue", ["0"])[0]), int(q["limit"][0])
            end = min(start + limit, len(nodes))
            if start and end == len(nodes):
                assert first_decided.wait(20), "the first page was not decided before the last was asked for"
            meta = {"resourceVersion": "7", **({"continue": str(end)} if end < len(nodes) else {})}
            send(h, orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": meta,
                                  "items": nodes[start:end]}))
        elif url.path == "/api/v1/pods":
            send(h, orjson.dumps({"kind": "PodList", "metadata": {}, "items": pods}))
        elif operator is not None and url.path.rsplit("/", 1)[-1] in operator:
            send(h, orjson.dumps({"kind": "List", "metadata": {}, "items": operator[url.path.rsplit("/", 1)[-1]]}))
        else:
            send(h, b'{"kind":"Status","code":404}', status=404)
    return answer


@pytest.mark.parametrize("with_operator", [False, True])
def test_pages_decided_as_they_come_make_the_whole_reads_check(serve, tmp_path: Path, monkeypatch,
                                                                 with_operator: bool) -> None:
    nodes = fleet(1300)  # a first page of 500, then the rest: two pages, at least
    pods = [driver_pod(n["metadata"]["name"], KERNELS[(i + (i % 5 == 0)) % 3])  # every 5th: another kernel's image
            for i, n in enumerate(nodes) if i % 7 != 3 and i % 4 != 1]  # every 4th GPU node has no driver pod
    first_decided = threading.Event()
    srv = serve(api_server(nodes, pods, operator_objects() if with_operator else None, first_decided))
    kubeconfig = str(loopback_kubeconfig(tmp_path, srv.url))
    (tmp_path / "ledger.txt").write_text(f"580-{KERNELS[0]}-ubuntu22.04\n580-{KERNELS[2]}-ubuntu22.04\n")
    flags = {} if with_operator else {"driver_branch": "580", "repository": REPO}
    ledger = [str(tmp_path / "ledger.txt")]
    setup = Setup(branch_policy(flags.get("driver_branch"), None, None), load_rules(None),
                  load_ledger(ledger, None), ledger, bool(flags), False, flags.get("repository"), True, None, None,
                  None)

    from gpualign.model import audit

    decided: list[int] = []
    findings_of = audit.findings_of

    def counted(given, derived=None):  # noqa: ANN001, ANN202
        out = findings_of(given, derived)
        decided.append(len(out[0]))
        first_decided.set()
        return out

    monkeypatch.setattr("gpualign.usecases.check.findings_of", counted)  # where check calls it
    reading = Reading(None, kubeconfig, None, None, with_operator=True, stream=True)
    streamed = stream(reading, setup)
    read = reading.result()
    assert streamed is not None
    by_pages = check_cluster(read, setup, streamed)
    assert len(decided) >= 2 and decided[0] == 500 and sum(decided) == len(nodes), decided

    decided.clear()
    whole_read = Reading(None, kubeconfig, None, None, with_operator=True)
    whole = check_cluster(whole_read.result(), setup)
    assert decided == [len(nodes)]  # decided once, after the read

    assert orjson.dumps(by_pages.as_dict()) == orjson.dumps(whole.as_dict())
    assert by_pages.warnings == whole.warnings
    summary = whole.audit.summary()
    # the fleet holds every kind of finding the pages must agree on
    kinds = ("present", "host_managed", "pod_kernel_mismatch") + \
        (("operator_mismatch", "unknown") if with_operator else ("missing",))
    assert all(summary[k] for k in kinds), summary
    if with_operator:  # an overlap of NVIDIADrivers is found among every node, not one page's
        assert any("both select" in w for w in whole.warnings), whole.warnings


def test_a_dump_or_a_failed_read_is_decided_whole(serve, tmp_path: Path) -> None:
    """Nothing to decide early: stream says so, and result() gives the dump, or raises the read's error."""
    from gpualign.base.errors import GpualignError

    (tmp_path / "ledger.txt").write_text(f"580-{KERNELS[0]}-ubuntu22.04\n")
    ledger = [str(tmp_path / "ledger.txt")]
    setup = Setup(branch_policy("580", None, None), load_rules(None), load_ledger(ledger, None), ledger, True, False,
                  REPO, True, None, None, None)
    dump = tmp_path / "nodes.json"
    dump.write_text(orjson.dumps({"kind": "List", "items": fleet(3)}).decode())
    reading = Reading(dump, None, None, None, with_operator=True, stream=True)
    assert stream(reading, setup) is None
    assert len(reading.result().inventory.nodes) == 3

    srv = serve(lambda h: send(h, b'{"kind":"Status","code":403}', status=403))
    reading = Reading(None, str(loopback_kubeconfig(tmp_path, srv.url)), None, None, with_operator=True, stream=True)
    assert stream(reading, setup) is None
    with pytest.raises(GpualignError, match="403"):
        reading.result()

    # a LIST cut short after its first page: what was decided of it is dropped, and the read's error raised
    nodes, first_decided = fleet(800), threading.Event()
    whole = api_server(nodes, [], None, first_decided)

    def gone_after_the_first_page(h) -> None:
        if "continue=" in h.path:
            send(h, b'{"kind":"Status","code":410,"reason":"Expired"}', status=410)
        else:
            whole(h)

    srv = serve(gone_after_the_first_page)
    reading = Reading(None, str(loopback_kubeconfig(tmp_path, srv.url)), None, None, with_operator=True, stream=True)
    assert stream(reading, setup) is None
    with pytest.raises(GpualignError, match="410"):
        reading.result()


def test_configs_read_ahead_are_judged_as_the_registry_gives_them(serve) -> None:
    """An image's config read while later pages were on the wire is what judge() reads: the same judgement, and
    the registry asked once. A config read ahead for other architectures is not taken: judge() reads its own."""
    import hashlib

    from gpualign.judging.judge import Ahead, judge

    good, bad = f"580-{KERNELS[0]}-ubuntu22.04", f"580-{KERNELS[1]}-ubuntu22.04"
    configs = {tag: orjson.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {
        "io.gpualign.kernel": kernel, "io.gpualign.branch": "580"}}})
        for tag, kernel in ((good, KERNELS[0]), (bad, KERNELS[2]))}  # bad's labels name another kernel
    digests = {tag: "sha256:" + hashlib.sha256(body).hexdigest() for tag, body in configs.items()}
    blobs = {digests[tag]: body for tag, body in configs.items()}

    def registry(h) -> None:
        path = urlsplit(h.path).path
        tag = path.rsplit("/manifests/", 1)[-1]
        if "/manifests/" in path and tag in configs:
            send(h, orjson.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                             "digest": digests[tag], "size": len(configs[tag])}, "layers": []}),
                 headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        elif "/blobs/" in path and path.rsplit("/", 1)[-1] in blobs:
            send(h, blobs[path.rsplit("/", 1)[-1]])
        else:
            send(h, b"{}", status=404)

    srv = serve(registry)
    repo = srv.url.removeprefix("http://") + "/nvidia/driver"
    needs = {f"{repo}:{good}": {KERNELS[0]}, f"{repo}:{bad}": {KERNELS[1]}}
    archs = {image: ["amd64"] for image in needs}
    alone = judge(needs, archs=archs)
    assert set(alone.wrong) == {f"{repo}:{bad}"}
    asked = len(srv.seen)

    ahead = Ahead()
    try:
        for image in needs:
            ahead.want(image, ["amd64"])
        ahead.want(f"{repo}:{good}", ["amd64"])  # asked twice, read once
        ahead.want(f"{repo}:{bad}", ["amd64", "arm64"])  # other architectures: not what judge() asks for
        taken = judge(needs, archs=archs, ahead=ahead)
    finally:
        ahead.close()
    assert (taken.wrong, taken.platforms, taken.unverified) == (alone.wrong, alone.platforms, alone.unverified)
    # three reads ahead, a manifest and a config each, and none by judge() itself
    assert len(srv.seen) - asked == 3 * 2, srv.seen[asked:]


def test_what_stops_the_decider_early_is_raised_after_the_read(serve, tmp_path: Path) -> None:
    """No ledger and no ClusterPolicy to name one: found before the last page, raised by check_cluster (after the
    read's own notes are said), as the whole read's check raises it."""
    from gpualign.base.errors import BadInput

    nodes = fleet(600)
    first_decided = threading.Event()
    first_decided.set()
    srv = serve(api_server(nodes, [], None, first_decided))
    setup = Setup(branch_policy(None, None, None), load_rules(None), None, [], False, False, None, True, None, None,
                  None)
    reading = Reading(None, str(loopback_kubeconfig(tmp_path, srv.url)), None, None, with_operator=True,
                      stream=True)
    streamed = stream(reading, setup)
    read = reading.result()
    assert streamed is not None and isinstance(streamed.error, BadInput)
    with pytest.raises(BadInput, match="no ledger"):
        check_cluster(read, setup, streamed)
    with pytest.raises(BadInput, match="no ledger"):
        check_cluster(read, setup)
