"""The fleet report's pure parts: merging per-cluster reports, the exit bits, and kubectl's --request-timeout."""

from __future__ import annotations

import pytest

from gpualign.base.errors import BadInput, Unreachable
from gpualign.cli.fleet import parse_timeout
from gpualign.model.fleet_report import ClusterRead, exit_code, merge_check
from gpualign.usecases.read_clusters import read_all

SUMMARY = {"gpu_nodes": 1, "present": 0, "missing": 1, "unknown": 0, "host_managed": 0, "operator_mismatch": 0,
           "pod_kernel_mismatch": 0}


def body(node: str, image: str) -> dict:
    return {"nodes": [{"name": node, "status": "missing"}], "summary": dict(SUMMARY),
            "missing": [{"tag": image.rsplit(":", 1)[1], "image": image, "nodes": [node], "action": "mirror"}]}


def test_missing_images_are_deduplicated_and_grouped_by_cluster():
    reads = [ClusterRead("east", "https://e", body("e1", "r/d:580-k-ubuntu22.04"), clean=False),
             ClusterRead("west", "https://w", body("w1", "r/d:580-k-ubuntu22.04"), clean=False),
             ClusterRead("south", None, None, "API server https://s unreachable: ConnectError")]
    merged = merge_check(reads)
    assert merged["missing"] == [{"tag": "580-k-ubuntu22.04", "image": "r/d:580-k-ubuntu22.04", "action": "mirror",
                                  "clusters": {"east": ["e1"], "west": ["w1"]}}]
    assert [n["cluster"] for n in merged["nodes"]] == ["east", "west"]
    assert merged["summary"]["total"]["missing"] == 2 and merged["summary"]["unreadable"] == ["south"]
    assert exit_code(reads) == 5 and exit_code(reads[:2]) == 1 and exit_code(reads[2:]) == 4
    assert exit_code([ClusterRead("a", "s", body("n", "r/d:t"), clean=True)]) == 0


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("1m", 60), ("90", 90), ("1m30s", 90), ("500ms", 0.5),
                                               ("1h", 3600), ("0", None), ("0s", None), (None, None)])
def test_request_timeout_reads_as_kubectl_does(text, seconds):
    assert parse_timeout(text) == seconds


@pytest.mark.parametrize("text", ["5x", "s", "-1s", "1d", ""])
def test_a_bad_request_timeout_is_a_usage_error(text):
    with pytest.raises(BadInput, match="--request-timeout"):
        parse_timeout(text)


def test_one_bad_or_slow_cluster_does_not_hold_the_others():
    import threading

    release = threading.Event()

    def read_one(name: str):
        if name == "hung":
            release.wait(30)
        if name == "denied":
            raise Unreachable("GET /api/v1/nodes on https://d: HTTP 403: forbidden")
        return {"nodes": []}, True, f"https://{name}"

    reads = read_all(["ok", "denied", "hung"], read_one, limit=0.5)
    release.set()
    assert [r.readable for r in reads] == [True, False, False]
    assert reads[1].error == "GET /api/v1/nodes on https://d: HTTP 403: forbidden"
    assert reads[2].error == "no complete answer within --request-timeout 0.5s"


def test_several_contexts_are_checked_against_the_kubeconfig_once(tmp_path):
    from gpualign.cli.fleet import contexts

    kc = tmp_path / "kc.yaml"
    kc.write_text("clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: t}}]\n"
                  "contexts: [{name: east, context: {cluster: c, user: u}},\n"
                  "           {name: west, context: {cluster: c, user: u}}]\n")
    assert contexts(str(kc), ["east"], False) is None  # one cluster: the single-cluster path
    assert contexts(str(kc), ["east", "west", "east"], False) == ["east", "west"]
    assert contexts(str(kc), None, True) == ["east", "west"]
    with pytest.raises(BadInput, match=r"no context 'north' \(known: east, west\)"):
        contexts(str(kc), ["east", "north"], False)
    with pytest.raises(BadInput, match="does not exist"):
        contexts(str(tmp_path / "missing.yaml"), ["east", "west"], False)
