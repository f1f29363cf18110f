"""The ClusterRoles shipped in deploy/cli are enough for the CLI, and no more, against the lab's real RBAC; and
$KUBECONFIG is a path list merged by kubectl's rules, so --context names a context from any of its files.

Each identity is a ServiceAccount with a bound token (TokenRequest), written into its own kubeconfig file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import ROOT, run_cli
from tests.support.lab import start_lab, token_kubeconfig

pytestmark = [pytest.mark.lab, pytest.mark.slow]
NS = "gpualign-cli"


@pytest.fixture(scope="module")
def rbac(tmp_path_factory):
    work = tmp_path_factory.mktemp("rbac")
    lab = start_lab(work / "state")
    assert lab.kubectl("apply", "-f", str(ROOT / "deploy" / "cli")).returncode == 0
    lab.kubectl("create", "namespace", NS, check=True)
    for sa in ("reader", "upgrader"):
        lab.kubectl("create", "serviceaccount", sa, "-n", NS, check=True)  # bound below, before their tokens
    lab.kubectl("create", "clusterrolebinding", "t-reader", "--clusterrole", "gpualign-cli-reader",
                f"--serviceaccount={NS}:reader", f"--serviceaccount={NS}:upgrader", check=True)
    lab.kubectl("create", "clusterrolebinding", "t-upgrader", "--clusterrole", "gpualign-cli-upgrader",
                f"--serviceaccount={NS}:upgrader", check=True)
    lab.kubectl("create", "rolebinding", "t-driver", "-n", "gpu-operator", "--clusterrole",
                "gpualign-cli-upgrade-driver", f"--serviceaccount={NS}:upgrader", check=True)
    lab.kubectl("create", "rolebinding", "t-lock", "-n", "kube-system", "--clusterrole",
                "gpualign-cli-upgrade-lock", f"--serviceaccount={NS}:upgrader", check=True)
    files = {sa: token_kubeconfig(lab, NS, sa, work / f"{sa}.yaml", sa) for sa in ("reader", "upgrader")}
    yield lab, files
    run_cli("lab", "down", env=lab.env)


def cli(lab, kubeconfig: str, *args: str):
    return run_cli(*args, env={"GPUALIGN_LAB_DIR": str(lab.state_dir), "KUBECONFIG": kubeconfig}, timeout=300)


def test_the_reader_role_runs_every_read_only_command_and_nothing_else(rbac):
    lab, files = rbac
    ledger = f"registry://{lab.registry}/nvidia/driver"
    # The reader's file comes second: --context still finds its context there (kubectl's merge).
    path_list = f"{lab.kubeconfig}:{files['reader']}"
    res = cli(lab, path_list, "check", "--context", "reader", "--ledger", ledger, "-o", "json")
    assert res.code in (0, 1), res.err
    report = json.loads(res.out)
    assert report["apiVersion"] == "gpualign.io/v1" and report["kind"] == "CheckReport"
    assert report["source"]["cluster"]["context"] == "reader"
    assert report["source"]["cluster"]["server"] == lab.apiserver and report["nodes"]
    for args in (["plan", "--kernel", "5.15.0-125-generic", "--ledger", ledger,
                  "-l", "kubernetes.io/hostname in (gpu-a1,gpu-a2)"],
                 ["cuda", "check", "--cuda", "12.4"],
                 ["status", "--ledger", ledger],
                 ["why", "gpu-a1", "--ledger", ledger]):
        res = cli(lab, path_list, *args, "--context", "reader")
        assert res.code in (0, 1), (args, res.err)
        assert "403" not in res.err and "Forbidden" not in res.err, (args, res.err)
    # Without the first file's admin identity, the reader cannot cordon: the walk is refused by RBAC, in one line.
    res = cli(lab, str(files["reader"]), "upgrade", "--yes", "-l", "kubernetes.io/hostname=gpu-a1",
              "--to-branch", "595", "--ledger", ledger)
    assert res.code == 2 and "403" in res.err, res.err
    # The refusal names what was refused and the rule that would allow it, in its one error line.
    (line,) = [x for x in res.err.splitlines() if x.startswith("gpualign: error: ")]
    assert "forbidden (HTTP 403)" in line and "RBAC allows it with a rule apiGroups: [" in line, line
    assert "verbs: [" in line and "deploy/cli/" in line, line


def test_the_first_file_wins_for_the_current_context_and_a_missing_context_is_named(rbac):
    lab, files = rbac
    res = cli(lab, f"{files['reader']}:{files['upgrader']}", "cuda", "check", "--cuda", "12.4", "-o", "json")
    assert res.code in (0, 1), res.err
    assert json.loads(res.out)["source"]["cluster"]["context"] == "reader"
    res = cli(lab, f"{files['reader']}:{files['upgrader']}", "cuda", "check", "--cuda", "12.4", "--context", "nope")
    assert res.code == 2 and res.err.strip() == (
        f"gpualign: error: kubeconfig {files['reader']}:{files['upgrader']}: no context 'nope' (known: reader, "
        "upgrader)")


@pytest.mark.timeout(600)
def test_the_upgrader_roles_walk_a_node_end_to_end(rbac):
    lab, files = rbac
    ledger = f"registry://{lab.registry}/nvidia/driver"
    assert lab.cli("lab", "push-image", "595-5.15.0-124-generic-ubuntu22.04").code == 0
    lab.kube().patch("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/trainer-pdb", {"spec": {"minAvailable": 0}})
    res = cli(lab, str(files["upgrader"]), "upgrade", "--yes", "-l", "kubernetes.io/hostname=gpu-a1",
              "--to-branch", "595", "--ledger", ledger, "--timeout", "400")
    assert res.code == 0, res.out[-2000:] + res.err[-2000:]
    node = lab.kube().get("/api/v1/nodes/gpu-a1")
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    assert not node["spec"].get("unschedulable")


def test_build_state_is_unknown_without_the_builds_role_and_read_with_it(rbac):
    """The review's #9: with the reader role alone, status and why dropped the build line and told the user to run
    `gpualign ensure` by hand, racing the controller's Job; and no role covered `build list`."""
    from gpualign.controller.build_trigger import job as J

    lab, files = rbac
    ledger = f"registry://{lab.registry}/nvidia/driver"
    kernel, ns = "6.1.0-77-amd64", J.DEFAULT_NAMESPACE
    tag = f"535-{kernel}-debian12"
    added = lab.cli("lab", "add-node", "deb-r", "--kernel", kernel, "--os", "debian12", "--branch", "535")
    assert added.code == 0, added.err
    lab.kubectl("create", "namespace", ns)
    job = J.build_job(tag, 1, ["deb-r"], J.BuildSettings(
        image=f"{lab.registry}/gpualign:test", ledger=ledger, service_account="default",
        node_selector={"gpualign.io/no-such-node": "true"}), "test")  # its pod stays Pending: a build running
    assert lab.kube().request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job).status_code == 201
    lab.kubectl("create", "serviceaccount", "watcher", "-n", NS, check=True)
    lab.kubectl("create", "clusterrolebinding", "t-watcher", "--clusterrole", "gpualign-cli-reader",
                f"--serviceaccount={NS}:watcher", check=True)
    lab.kubectl("create", "rolebinding", "t-builds", "-n", ns, "--clusterrole", "gpualign-cli-builds",
                f"--serviceaccount={NS}:watcher", check=True)
    watcher = str(token_kubeconfig(lab, NS, "watcher", lab.state_dir.parent / "watcher.yaml", "watcher"))

    why = cli(lab, str(files["reader"]), "why", "deb-r", "--ledger", ledger)
    assert why.code in (0, 1), why.err
    assert (f"build state unknown (no permission to list jobs in {ns}: bind deploy/cli/builds.yaml's role "
            "there)") in why.out, why.out
    assert "gpualign ensure" not in why.out  # never an invitation to race the controller
    listed = cli(lab, str(files["reader"]), "build", "list", "-n", ns)
    assert listed.code == 2 and len(listed.err.strip().splitlines()) == 1, listed.err
    assert "forbidden" in listed.err and "deploy/cli/" in listed.err, listed.err
    assert f'rule apiGroups: ["batch"], resources: ["jobs"], verbs: ["list"], in namespace {ns}' in listed.err, \
        listed.err

    why = cli(lab, watcher, "why", "deb-r", "--ledger", ledger)
    assert f"image building: Job {ns}/{J.job_name(tag)}" in why.out, why.out
    listed = cli(lab, watcher, "build", "list", "-n", ns, "-o", "json")
    assert listed.code == 0, listed.err
    assert [b["tag"] for b in json.loads(listed.out)["builds"]] == [tag]
    logs = cli(lab, watcher, "build", "logs", tag, "-n", ns)
    assert logs.code == 1 and "has no log yet" in logs.err, logs.err  # its pod is not placed: the API says so


def test_shipped_roles_are_read_only_where_they_say_so():
    from ruamel.yaml import YAML

    reader = YAML(typ="safe").load((ROOT / "deploy" / "cli" / "reader.yaml").read_text())
    assert {v for rule in reader["rules"] for v in rule["verbs"]} <= {"get", "list"}
    builds = YAML(typ="safe").load((ROOT / "deploy" / "cli" / "builds.yaml").read_text())
    # one write, for `build retry`: a stamp on the Job; nothing creates or deletes
    assert {v for rule in builds["rules"] for v in rule["verbs"]} == {"get", "list", "patch"}
    assert [r["resources"] for r in builds["rules"] if "patch" in r["verbs"]] == [["jobs"]]
    assert Path(ROOT / "deploy" / "cli" / "upgrader.yaml").exists()


def test_the_upgraders_may_repoint_a_driver_daemonsets_image_and_nothing_else(rbac):
    """deploy/cli/upgrader-admission.yaml, on the lab's real API server: a member of the upgraders' group (gpu-ops)
    bound to gpualign-cli-upgrade-driver may change a driver DaemonSet's image, as `upgrade --to-branch` does, and
    nothing else: not another DaemonSet, not the container's command, not the pod's host namespaces or volumes."""
    import time

    lab, _ = rbac
    lab.kubectl("create", "rolebinding", "t-driver-ops", "-n", "gpu-operator", "--clusterrole",
                "gpualign-cli-upgrade-driver", "--group", "gpu-ops", check=True)
    lab.kubectl("create", "clusterrolebinding", "t-reader-ops", "--clusterrole", "gpualign-cli-reader", "--group",
                "gpu-ops", check=True)

    def daemonset(name: str, labels: dict[str, str]) -> str:
        return json.dumps({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
            "name": name, "namespace": "gpu-operator", "labels": labels},
            "spec": {"selector": {"matchLabels": {"t": name}}, "updateStrategy": {"type": "OnDelete"},
                     "template": {"metadata": {"labels": {"t": name}}, "spec": {
                         "containers": [{"name": "nvidia-driver-ctr", "image": "r/driver:535-6.1.0-50-amd64-debian12",
                                         "command": ["nvidia-driver"], "args": ["init"]}]}}}})

    for name, labels in (("t-driver", {"app.kubernetes.io/component": "nvidia-driver"}), ("t-other", {})):
        applied = subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "apply", "-f",
                                  "-"], input=daemonset(name, labels), capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr

    def patch(name: str, body: dict) -> subprocess.CompletedProcess[str]:
        return lab.kubectl("patch", "daemonset", name, "-n", "gpu-operator", "--type", "strategic", "-p",
                           json.dumps(body), "--as", "alice", "--as-group", "gpu-ops", "--dry-run=server")

    def container(**fields: object) -> dict:
        return {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr", **fields}]}}}}

    image = container(image="r/driver:595-6.1.0-50-amd64-debian12")
    deadline = time.monotonic() + 60
    while "driver DaemonSets only" not in patch("t-other", image).stderr:  # the binding takes a few seconds
        assert time.monotonic() < deadline, "the upgraders' policy never took effect"
        time.sleep(1)
    walked = patch("t-driver", image)
    assert walked.returncode == 0, walked.stderr
    for name, body, words in (
            ("t-other", image, "driver DaemonSets only"),
            ("t-driver", container(command=["sh", "-c", "id"]), "a driver container's image only"),
            ("t-driver", {"spec": {"template": {"spec": {"hostPID": True}}}}, "not the pod's volumes, host"),
            ("t-driver", {"spec": {"template": {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}}},
             "not the pod's volumes, host"),
            ("t-driver", {"metadata": {"labels": {"app.kubernetes.io/component": "other"}}}, "driver DaemonSets only")):
        refused = patch(name, body)
        assert refused.returncode != 0 and words in refused.stderr, (name, body, refused.stderr)
