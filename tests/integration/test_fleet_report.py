"""One report for a fleet of clusters: two labs at once, in separate state dirs, with different fleets and one
missing image shared by both; checked node by node against single-cluster runs; then an RBAC-denied cluster, a hung
API server bounded by --request-timeout, and a lab stopped mid-way, none of which spoils the rest."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.support.cli import run_cli
from tests.support.lab import start_lab, token_kubeconfig

pytestmark = [pytest.mark.lab, pytest.mark.slow]
MISSING_KERNEL = "5.15.0-125-generic"
MISSING_TAG = f"580-{MISSING_KERNEL}-ubuntu22.04"
EAST, WEST = "gpualign-east", "gpualign-west"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("fleet")
    east = start_lab(work / "east")                    # the default fleet: six GPU nodes, five kernels
    west = start_lab(work / "west", scenario="empty")  # another shape: three nodes added below
    try:
        for name, kernel, os_ in (("w-a1", "5.15.0-124-generic", "ubuntu22.04"),
                                  ("w-b1", "6.8.0-48-generic", "ubuntu24.04"),
                                  ("w-new", MISSING_KERNEL, "ubuntu22.04")):
            assert west.cli("lab", "add-node", name, "--kernel", kernel, "--os", os_).code == 0
        assert east.cli("lab", "add-node", "gpu-new", "--kernel", MISSING_KERNEL).code == 0
        yield east, west, work
    finally:
        run_cli("lab", "down", env=west.env)
        run_cli("lab", "down", env=east.env)


def cli(kubeconfigs, *args: str, timeout: float = 300):
    return run_cli(*args, env={"KUBECONFIG": ":".join(str(k) for k in kubeconfigs)}, timeout=timeout)


def ledger_of(east) -> list[str]:
    return ["--ledger", f"registry://{east.registry}/nvidia/driver", "--driver-branch", "580"]


def test_two_clusters_one_report_node_by_node(fleet):
    east, west, _ = fleet
    kcs = [east.kubeconfig, west.kubeconfig]
    res = cli(kcs, "check", "--all-contexts", *ledger_of(east), "-o", "json")
    assert res.code == 1, res.err  # a missing image, every cluster read
    report = json.loads(res.out)
    assert report["kind"] == "FleetCheckReport" and report["source"]["contexts"] == [EAST, WEST]
    assert [c["name"] for c in report["clusters"]] == [EAST, WEST] and all(c["readable"] for c in report["clusters"])
    # The shared missing image appears once, its nodes grouped by cluster.
    shared = [m for m in report["missing"] if m["tag"] == MISSING_TAG]
    assert len(shared) == 1 and shared[0]["clusters"] == {EAST: ["gpu-new"], WEST: ["w-new"]}
    # Node by node, the merged report is what each cluster gives alone.
    for ctx in (EAST, WEST):
        single = cli(kcs, "check", "--context", ctx, *ledger_of(east), "-o", "json")
        alone = json.loads(single.out)
        mine = [{k: v for k, v in n.items() if k != "cluster"} for n in report["nodes"] if n["cluster"] == ctx]
        assert mine == alone["nodes"] and report["summary"]["clusters"][ctx] == alone["summary"]
    total = report["summary"]["total"]
    assert total["gpu_nodes"] == 7 + 3 and total["missing"] == 2
    # The table: a CLUSTER column, the missing image once, a summary per cluster and in total.
    table = cli(kcs, "check", "--context", EAST, "--context", WEST, *ledger_of(east))
    lines = table.out.splitlines()
    assert table.code == 1 and lines[0].split()[:2] == ["CLUSTER", "NODE"]
    assert sum(MISSING_TAG in line and f"{EAST}:gpu-new {WEST}:w-new" in line for line in lines) == 1
    assert any(line.startswith(f"{WEST}: 3 GPU nodes") for line in lines)
    assert lines[-1].startswith("total: 10 GPU nodes")


def test_plan_and_status_take_the_same_flags(fleet):
    east, west, _ = fleet
    kcs = [east.kubeconfig, west.kubeconfig]
    res = cli(kcs, "plan", "--all-contexts", "--kernel", "5.15.0-126-generic", "-l", "nvidia.com/gpu.present=true",
              *ledger_of(east), "-o", "json")
    plan = json.loads(res.out)
    assert res.code == 1 and plan["kind"] == "FleetPlanReport"
    new_2204 = next(n for n in plan["needed"] if n["tag"] == "580-5.15.0-126-generic-ubuntu22.04")
    assert set(new_2204["clusters"]) == {EAST, WEST} and "w-a1" in new_2204["clusters"][WEST]
    res = cli(kcs, "status", "--all-contexts", "-o", "json")
    status = json.loads(res.out)
    assert res.code == 0 and status["kind"] == "FleetUpgradeStatus"
    assert {n["cluster"] for n in status["nodes"]} == {EAST, WEST}
    assert sum(status["counts"]["total"].values()) == len(status["nodes"])


def test_a_denied_cluster_is_one_line_and_the_rest_is_reported(fleet):
    east, west, work = fleet
    denied = token_kubeconfig(east, "fleet-test", "nobody", work / "denied.yaml", "denied")  # no RoleBinding
    kcs = [east.kubeconfig, west.kubeconfig, denied]
    res = cli(kcs, "check", "--all-contexts", *ledger_of(east), "-o", "json")
    assert res.code == 5, res.err  # 1 (the missing image) | 4 (a cluster unreadable)
    report = json.loads(res.out)
    bad = next(c for c in report["clusters"] if c["name"] == "denied")
    assert not bad["readable"] and "403" in bad["error"]
    assert report["summary"]["unreadable"] == ["denied"] and set(report["summary"]["clusters"]) == {EAST, WEST}
    assert [line for line in res.err.splitlines() if "denied" in line] == [f"gpualign: error: cluster denied: "
                                                                           f"{bad['error']}"]


def apiserver_pid(lab) -> int:
    from gpualign.lab import cluster

    state = cluster.LabState.load(lab.state_dir)
    assert state is not None
    return state.procs["kube-apiserver"].pid


def test_a_hung_api_server_is_bounded_by_request_timeout(fleet):
    east, west, _ = fleet
    pid = apiserver_pid(west)
    os.kill(pid, signal.SIGSTOP)  # accepts connections, answers nothing
    try:
        t0 = time.monotonic()
        res = cli([east.kubeconfig, west.kubeconfig], "check", "--all-contexts", *ledger_of(east),
                  "--request-timeout", "3s", "-o", "json", timeout=60)
        took = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert res.code == 5, res.err
    report = json.loads(res.out)
    assert [c["readable"] for c in report["clusters"]] == [True, False]
    assert took < 20, took  # 3 s for the hung cluster, not the 30 s default per request
    ok = cli([east.kubeconfig, west.kubeconfig], "check", "--all-contexts", *ledger_of(east))
    assert ok.code == 1  # both readable again, the shared image still missing


def test_a_lab_stopped_mid_way_is_unreadable_and_the_other_still_reported(fleet):
    east, west, _ = fleet
    os.kill(apiserver_pid(west), signal.SIGKILL)  # west's control plane loses its API server mid-way
    res = cli([east.kubeconfig, west.kubeconfig], "status", "--context", EAST, "--context", WEST)
    assert res.code == 4, res.err  # east has no upgrade-failed node; west could not be read
    assert f"{WEST}: unreadable: " in res.out and "unreachable" in res.out
    assert any(line.startswith(EAST) for line in res.out.splitlines()[1:])
