"""The check issue's scenario on its own lab: a new kernel is flagged ahead of time and on arrival, then cleared."""

from __future__ import annotations

import json

import pytest

from gpualign.kube.client import METADATA_ONLY, continue_token
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import wait_for

pytestmark = pytest.mark.lab

NEW_KERNEL = "5.15.0-125-generic"
NEW_TAG = f"580-{NEW_KERNEL}-ubuntu22.04"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state = tmp_path_factory.mktemp("check-lab") / "state"
    lab = start_lab(state)
    yield lab
    run_cli("lab", "down", env=lab.env)


def check(lab, *args: str):
    res = lab.cli("check", "--ledger", f"registry://{lab.registry}/nvidia/driver", "-o", "json", *args)
    return res, (json.loads(res.out) if res.out.strip() else None)


def test_seed_story_new_kernel_is_flagged_only_on_its_node(fleet, tmp_path):
    # 1. The default fleet with its ledger filled: clean.
    res, data = check(fleet)
    assert res.code == 0, res.err
    assert data["summary"] == {"gpu_nodes": 6, "present": 6, "missing": 0, "unknown": 0, "host_managed": 0,
                               "operator_mismatch": 0, "pod_kernel_mismatch": 0, "wrong_image": 0,
                               "missing_images": 0, "driver_pod_failing": 0, "unverified": 0, "unsigned": 0}
    gcp = next(n for n in data["nodes"] if n["name"] == "gpu-e1")
    assert gcp["published"] is False and gcp["reason"] == ("in the ledger; kernel flavour 'gcp' is not published "
                                                           "precompiled by NVIDIA")  # facts, no advice: it is there

    # 3 (ahead of time). Planning the patch for the a-pool names the tag before any node runs that kernel.
    plan = fleet.cli("plan", "-l", "kubernetes.io/hostname in (gpu-a1,gpu-a2)", "--kernel", NEW_KERNEL,
                     "--ledger", f"registry://{fleet.registry}/nvidia/driver", "--build-matrix")
    assert plan.code == 1, plan.err
    assert json.loads(plan.out) == {"include": [{"action": "mirror", "DRIVER_BRANCH": "580",
                                                 "KERNEL_VERSION": NEW_KERNEL, "OS_TAG": "ubuntu22.04",
                                                 "tag": NEW_TAG, "modules": "open"}]}

    # 2. A node arrives with a kernel one patch newer: exactly it, and exactly one tag, is flagged.
    assert fleet.cli("lab", "add-node", "gpu-new", "--kernel", NEW_KERNEL).code == 0
    res, data = check(fleet)
    assert res.code == 1
    assert [n["name"] for n in data["nodes"] if n["status"] != "present"] == ["gpu-new"]
    assert data["missing"] == [{"tag": NEW_TAG, "image": f"{fleet.registry}/nvidia/driver:{NEW_TAG}",
                                "nodes": ["gpu-new"], "action": "mirror", "modules": "open"}]
    new = next(n for n in data["nodes"] if n["name"] == "gpu-new")
    assert new["driver_pod"]["tag"] == NEW_TAG  # the operator-like pool DaemonSet already asks for it…
    assert new["driver_pod"]["state"] == "ImagePullBackOff"  # …and the node has quietly lost its GPUs

    # The table names it in one glance too.
    table = fleet.cli("check", "--ledger", f"registry://{fleet.registry}/nvidia/driver")
    assert table.code == 1
    row = next(line for line in table.out.splitlines() if line.startswith("gpu-new"))
    assert "missing" in row and "ImagePullBackOff" in row and NEW_KERNEL in row

    # 4. Push the image: the image is present at once, but the node has no driver until its pod pulls it (the
    # kubelet retries the pull): check is clean only then.
    assert fleet.cli("lab", "push-image", NEW_TAG).code == 0
    res, data = check(fleet)
    new = next(n for n in data["nodes"] if n["name"] == "gpu-new")
    assert new["status"] == "present"
    assert res.code == (1 if new["driver_pod_failing"] else 0), data
    assert data["summary"]["driver_pod_failing"] == (1 if new["driver_pod_failing"] else 0)
    res, data = wait_for(lambda: (r := check(fleet))[0].code == 0 and r, timeout=30,
                         what="gpu-new's driver pod pulling the pushed image")
    assert data["summary"]["driver_pod_failing"] == 0


def test_a_mistyped_registry_repository_is_named_not_read_as_every_image_missing(fleet):
    res = fleet.cli("check", "--ledger", f"registry://{fleet.registry}/nope/driver")
    assert res.code == 2 and not res.out, res.out
    assert res.err.strip() == (f"gpualign: error: registry {fleet.registry} has no repository nope/driver "
                               "(NAME_UNKNOWN): is the name right? (a repository exists once something is pushed "
                               "to it)")


def test_nodes_dump_gives_the_same_answer_offline(fleet, tmp_path):
    dump = tmp_path / "nodes.json"
    out = fleet.kubectl("get", "nodes", "-o", "json", check=True)
    dump.write_text(out.stdout)
    ledger = tmp_path / "ledger.txt"
    tags = json.loads(fleet.cli("check", "--ledger", f"registry://{fleet.registry}/nvidia/driver",
                                "-o", "json").out)
    ledger.write_text("\n".join(n["tag"] for n in tags["nodes"]) + "\n")
    res = run_cli("check", "--nodes-file", str(dump), "--ledger", str(ledger), "--driver-branch", "580",
                  "-o", "json")
    assert res.code == 0, res.err
    offline = json.loads(res.out)
    assert [(n["name"], n["tag"], n["status"]) for n in offline["nodes"]] == \
        [(n["name"], n["tag"], n["status"]) for n in tags["nodes"]]


def test_bad_inputs_are_one_line_exit_2(fleet, tmp_path):
    bad = tmp_path / "nodes.json"
    bad.write_text('{"items": [\n')
    cases = [
        (["check", "--nodes-file", str(bad), "--ledger", str(bad)], "invalid JSON"),
        (["check", "--ledger", "registry://127.0.0.1:1/nvidia/driver"], "registry 127.0.0.1:1 unreachable"),
        (["check", "--ledger", f"registry://{fleet.registry}/nvidia/driver", "-l", "pool=("], "label selector"),
        (["check", "--ledger", f"registry://{fleet.registry}/nvidia/driver", "--driver-branch", "latest"],
         "expected a major driver number"),
        (["check"], "no ledger"),
    ]
    for args, needle in cases:
        res = fleet.cli(*args)
        assert res.code == 2, (args, res.err)
        lines = res.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpualign: error: ") and needle in lines[0], res.err


def test_a_list_read_page_by_page_with_the_next_page_in_flight_is_the_whole_list_once(fleet):
    """The API server's own pages: each page's continue token is read from the head of its body, the next page is
    asked for before this one is parsed, and the pages add up to the unpaged list, in order, each object once."""
    kube = fleet.kube()
    try:
        whole = kube.get_json("/api/v1/nodes", accept=METADATA_ONLY)["items"]
        pages = list(kube.list_pages("/api/v1/nodes", metadata_only=True, limit=2, page_bytes=None))
        assert len(whole) > 4 and len(pages) == -(-len(whole) // 2)
        assert all(len(p) == 2 for p in pages[:-1])
        assert [n["metadata"]["name"] for p in pages for n in p] == [n["metadata"]["name"] for n in whole]
        # Pages sized by bytes: after a first page of 2, pages of about 4 objects' worth.
        first = kube._page("/api/v1/nodes", {"limit": 2}, METADATA_ONLY)
        grown = list(kube.list_pages("/api/v1/nodes", metadata_only=True, limit=2, page_bytes=2 * len(first)))
        assert len(grown[0]) == 2 and all(len(p) >= 3 for p in grown[1:-1]) and len(grown) < len(pages)
        assert [n["metadata"]["name"] for p in grown for n in p] == [n["metadata"]["name"] for n in whole]
        assert continue_token(json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "1"},
                                          "items": []}).encode()) == ""
    finally:
        kube.close()


def test_a_node_the_operator_calls_a_gpu_node_is_checked_without_gpu_present(fleet):
    """Review 5's H1: in the operator's DRA mode no gpu-feature-discovery runs, so a GPU node carries NFD's NVIDIA
    PCI label and no nvidia.com/gpu.present. Its driver pod cannot pull: check, status and why must see it (they
    read 0 GPU nodes and exited 0)."""
    kernel = "5.15.0-126-generic"
    assert fleet.cli("lab", "add-node", "dra-2", "--kernel", kernel).code == 0
    try:
        fleet.kubectl("label", "node", "dra-2", "nvidia.com/gpu.present-", check=True)
        res, data = wait_for(lambda: (r := check(fleet, "-l", "kubernetes.io/hostname=dra-2"))[1] and
                             r[1]["nodes"] and r[1]["nodes"][0]["driver_pod"] and r, timeout=60,
                             what="dra-2's driver pod, read by check")
        assert res.code == 1, res.err
        (node,) = data["nodes"]
        assert node["name"] == "dra-2" and node["status"] == "missing"
        assert data["summary"]["gpu_nodes"] == 1
        why = fleet.cli("why", "dra-2")
        assert "not a GPU node" not in why.out + why.err
        wide = fleet.cli("why", "dra-2", "-o", "wide")  # the same lines, then the node's `status -o wide` row
        assert wide.out.startswith(why.out + "\n"), wide.out
        head, row = wide.out[len(why.out) + 1:].splitlines()
        assert head.split() == ["NODE", "STATE", "FOR", "WALKER", "CORDONED", "DRIVER", "TARGET", "IMAGE",
                                "BLOCKER", "RUNNING", "HOLD", "NO", "DRIVER", "BUILD"], head
        assert row.split()[0] == "dra-2"
        status = wait_for(lambda: (r := fleet.cli("status", "--fail-on-stuck", "-o", "json", "-l",
                                                  "kubernetes.io/hostname=dra-2")).code == 1 and r, timeout=60,
                          what="status --fail-on-stuck failing on dra-2's driver pod")
        (row,) = json.loads(status.out)["nodes"]
        assert row["name"] == "dra-2" and row["stuck"], row
    finally:
        fleet.kubectl("delete", "node", "dra-2", "--wait=false")
    empty = check(fleet, "-l", "kubernetes.io/hostname=nobody")[1]
    assert empty is not None and any("no GPU nodes" in w for w in empty["warnings"])  # JSON carries stderr's warning
