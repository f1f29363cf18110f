"""The shipped monitoring files refer to metrics the controller really exports, and the base is least-privilege."""

from __future__ import annotations

import json
import re

from ruamel.yaml import YAML

from gpualign.controller.metrics import Metrics
from gpualign.controller.page import render
from tests.support.cli import ROOT

DEPLOY = ROOT / "deploy"


def exported_names() -> set[str]:
    from prometheus_client import generate_latest

    view = {"nodes": [], "missing": {}, "upgrade_counts": {"none": 1}, "blocked": [("n", "r", 1.0)], "leader": 1,
            "updated": "", "ledger_sources": [], "gated_for": {"n": 1.0}, "wrong": {"t": ["n"]}}
    m = Metrics(lambda: view)
    m.image_missing.labels("n", "t").set(1)
    m.next_kernel_missing.labels("n", "t").set(1)
    from gpualign.controller.archive_watch import Pending

    m.watch_archive(lambda: [Pending("debian13 6.12 rt-amd64", ("n",), "6.12.118+deb13-rt-amd64",
                                     "550-6.12.118_deb13-rt-amd64-debian13", False, "PREEMPT_RT")])
    m.archive_to_image.observe(120.0)
    from gpualign.model.reboot_gate import BootSource, Hold, RebootVerdict

    m.watch_reboots(lambda: [RebootVerdict("n", "6.1.0-57-amd64", BootSource.ARCHIVE, "t", Hold.MISSING, "why")],
                    lambda: (1000.0, 900.0))
    text = generate_latest(m.registry).decode()
    return set(re.findall(r"(?m)^(gpualign_[a-z_]+?)(?:_bucket|_count|_sum|_created)?[{ ]", text))


def test_alerts_and_dashboard_use_exported_metrics():
    names = exported_names()
    assert {"gpualign_gpu_nodes", "gpualign_node_driver_image_missing", "gpualign_missing_driver_images",
            "gpualign_upgrade_nodes", "gpualign_upgrade_blocked_seconds", "gpualign_check_duration_seconds",
            "gpualign_leader", "gpualign_wrong_driver_images", "gpualign_stuck_nodes", "gpualign_gate_held_seconds",
            "gpualign_leader_election_failing"} <= names
    rule = YAML(typ="safe").load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dash = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for expr in exprs:
        for used in re.findall(r"gpualign_[a-z_]+", expr):
            assert used in names, f"{used} in {expr!r} is not exported"
    alerted = {m for r in rule["spec"]["groups"][0]["rules"] for m in re.findall(r"gpualign_[a-z_]+", r["expr"])}
    # every fleet-health gauge has an alert (the review found three without one)
    assert {"gpualign_wrong_driver_images", "gpualign_stuck_nodes", "gpualign_gate_held_seconds",
            "gpualign_leader_election_failing", "gpualign_node_driver_image_missing",
            "gpualign_next_kernel_driver_image_missing", "gpualign_archive_kernel_driver_image_missing",
            "gpualign_archive_kernel_not_buildable"} <= alerted
    # kured is told one alert name: the archive's kernels hold reboots under it too
    gate = [r for r in rule["spec"]["groups"][0]["rules"] if r.get("alert") == "GPUDriverImageMissingForNextKernel"]
    assert {m for r in gate for m in re.findall(r"gpualign_[a-z_]+", r["expr"])} == {
        "gpualign_next_kernel_driver_image_missing", "gpualign_archive_kernel_driver_image_missing"}
    # the reboot gate that fails closed: kured's filter '^GPUAlignReboot' takes a held node, no leading controller
    # (an absent series), and a stale reading of Debian's archive; each fires at once (no `for`: no pending window)
    closed = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]
              if re.match("^GPUAlignReboot", r.get("alert", ""))}
    assert set(closed) == {"GPUAlignRebootHeld", "GPUAlignRebootGateBlind", "GPUAlignRebootGateStale"}
    assert all("for" not in r for r in closed.values())
    assert "absent(" in closed["GPUAlignRebootGateBlind"]["expr"]
    assert {m for r in closed.values() for m in re.findall(r"gpualign_[a-z_]+", r["expr"])} == {
        "gpualign_node_reboot_held", "gpualign_leader", "gpualign_archive_read_timestamp_seconds",
        "gpualign_archive_poll_seconds"}


def test_deployment_is_hardened_and_the_role_least_privilege():
    docs = {p.stem: YAML(typ="safe").load(p.read_text()) for p in (DEPLOY / "base").glob("*.yaml")}
    pod = docs["deployment"]["spec"]["template"]["spec"]
    assert docs["deployment"]["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"]
    verbs = {(r.get("apiGroups", [""])[0], res): set(r["verbs"]) for r in docs["clusterrole"]["rules"]
             for res in r["resources"]}
    assert verbs[("", "nodes")] == {"get", "list", "watch", "patch"}
    assert verbs[("", "pods")] == {"list", "watch"}
    assert ("", "pods/eviction") not in verbs and ("batch", "jobs") not in verbs  # never evicts; Jobs: its namespace
    assert not any("delete" in v or "*" in v for v in verbs.values())


def test_page_escapes_what_it_shows():
    html = render({"nodes": [], "missing": {"<script>": ["n"]}, "upgrade_counts": {}, "blocked": [],
                   "leader": 0, "updated": "", "ledger_sources": ["<x>"]})
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_the_board_shows_tonight_per_pool_with_each_images_state():
    """What Debian's archive installs next on each pool, since when, and whether its image exists, is building or
    cannot be built (issue: the fleet's view of tonight)."""
    pool = {"nodes": ["a", "b"], "running": ["6.12.115_deb13.1-amd64"], "suite": "trixie-security",
            "since": "2026-12-05T06:00:00Z", "action": "build", "reason": None}
    data = {"nodes": [], "missing": {}, "upgrade_counts": {}, "blocked": [], "leader": 1, "updated": "",
            "ledger_sources": [], "builds": {"running": ["t-build"], "queued": [], "jobs": {
                "t-build": {"phase": "running", "line": "building: Job gpualign-builds/b-1, for 40s (attempt 1)"}}},
            "archive": {"error": None, "pools": [
                {**pool, "pool": "debian13 6.12 generic-amd64", "next": "6.12.118+deb13-amd64", "tag": "t-build",
                 "status": "missing"},
                {**pool, "pool": "debian13 6.12 rt-amd64", "next": "6.12.118+deb13-rt-amd64", "tag": "t-rt",
                 "status": "missing", "action": "none", "reason": "NVIDIA's driver refuses PREEMPT_RT kernels"},
                {**pool, "pool": "debian13 6.12 cloud-amd64", "next": "6.12.118+deb13-cloud-amd64", "tag": "t-ok",
                 "status": "present"}]}}
    html = render(data)
    assert "Tonight: the kernels Debian's archive installs next" in html
    rows = {r.split("</td>")[0].removeprefix("<td>"): r for r in html.split("<tr>") if r.startswith("<td>debian13")}
    assert "building: Job gpualign-builds/b-1" in rows["debian13 6.12 generic-amd64"]
    assert "cannot be built: NVIDIA&#x27;s driver refuses PREEMPT_RT" in rows["debian13 6.12 rt-amd64"]
    assert ">present<" in rows["debian13 6.12 cloud-amd64"] and "2026-12-05T06:00:00Z" in html
