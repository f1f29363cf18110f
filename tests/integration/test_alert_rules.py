"""The reboot gate's alerts, evaluated by Prometheus' own rule engine (`promtool test rules`, built from Prometheus'
Go module by `gpualign lab build`), on series shaped as the controller exports them. kured holds every reboot while an
alert its filter `^GPUAlignReboot` matches fires, so each way the gate fails closed must fire one: a node held, no
controller leading (none running, or every replica standing by), Debian's archive not read for two polls. And none
fires when the gate has judged every node ready. The chart's rules and deploy/monitoring's are the same rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpualign.lab import versions
from tests.support.cli import ROOT
from tests.support.cosign_keys import lab_tool

pytestmark = pytest.mark.lab

RULES = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
CHART_RULES = ROOT / "charts" / "gpualign" / "files" / "prometheusrule-spec.yaml"
KURED_FILTER = "^GPUAlignReboot"


def rule_file(tmp_path: Path) -> Path:
    """The PrometheusRule's spec, as a plain Prometheus rule file."""
    spec = YAML(typ="safe").load(RULES.read_text())["spec"]
    out = tmp_path / "rules.yaml"
    YAML().dump(spec, out)
    return out


def promtool(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess[str]:
    rules = rule_file(tmp_path)
    test_file = tmp_path / "tests.yaml"
    YAML().dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}, test_file)
    return subprocess.run([str(lab_tool(versions.promtool_binary())), "test", "rules", test_file.name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def annotations(name: str, labels: dict) -> dict:
    """The alert's annotations as Prometheus renders them: each {{ $labels.NAME }} replaced by the label's value
    (the gate's three alerts use no other template)."""
    import re

    spec = YAML(typ="safe").load(RULES.read_text())["spec"]
    rule = next(r for g in spec["groups"] for r in g["rules"] if r.get("alert") == name)
    return {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), v)
            for k, v in (rule.get("annotations") or {}).items()}


def alerts(name: str, at: str, *fired: dict) -> dict:
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": {"severity": "warning", **labels},
                            "exp_annotations": annotations(name, labels)} for labels in fired]}


def names_matching_the_kured_filter() -> set[str]:
    import re

    spec = YAML(typ="safe").load(RULES.read_text())["spec"]
    return {r["alert"] for g in spec["groups"] for r in g["rules"] if re.search(KURED_FILTER, r.get("alert", ""))}


def test_the_kured_filter_matches_exactly_the_gates_three_alerts():
    assert names_matching_the_kured_filter() == {"GPUAlignRebootHeld", "GPUAlignRebootGateBlind",
                                                 "GPUAlignRebootGateStale"}
    # the chart renders the same rules: what is tested here is what the chart installs
    assert YAML(typ="safe").load(CHART_RULES.read_text()) == YAML(typ="safe").load(RULES.read_text())["spec"]


def test_each_way_the_gate_fails_closed_fires_an_alert_kured_obeys(tmp_path):
    held = {"node": "deb-1", "kernel": "6.1.0-57-amd64", "tag": "535-6.1.0-57-amd64-debian12", "hold": "missing"}
    series = "gpualign_node_reboot_held{" + ",".join(f'{k}="{v}"' for k, v in held.items()) + "}"
    tests = [
        {   # a node held: fires at once (no `for`), with the node, its next kernel, its image and why
            "interval": "1m",
            "input_series": [{"series": series, "values": "1x10"},
                             {"series": 'gpualign_leader{pod="a"}', "values": "1x10"}],
            "alert_rule_test": [alerts("GPUAlignRebootHeld", "1m", held),
                                alerts("GPUAlignRebootGateBlind", "1m")],
        },
        {   # no controller at all (no series): blind, at once
            "interval": "1m",
            "input_series": [{"series": 'gpualign_gpu_nodes{pod="x"}', "values": "3x10"}],
            "alert_rule_test": [alerts("GPUAlignRebootGateBlind", "1m", {})],
        },
        {   # every replica standing by: blind too
            "interval": "1m",
            "input_series": [{"series": 'gpualign_leader{pod="a"}', "values": "0x10"},
                             {"series": 'gpualign_leader{pod="b"}', "values": "0x10"}],
            "alert_rule_test": [alerts("GPUAlignRebootGateBlind", "1m", {})],
        },
        {   # the archive read at 0s, polled every 15 minutes: fine at 20m, stale past 30m
            "interval": "5m",
            "input_series": [{"series": 'gpualign_leader{pod="a"}', "values": "1x20"},
                             {"series": 'gpualign_archive_read_timestamp_seconds{pod="a"}', "values": "0x20"},
                             {"series": 'gpualign_archive_poll_seconds{pod="a"}', "values": "900x20"}],
            "alert_rule_test": [alerts("GPUAlignRebootGateStale", "20m"),
                                alerts("GPUAlignRebootGateStale", "35m", {})],
        },
        {   # every node ready, the controller leading, the archive fresh: nothing for kured to wait on
            "interval": "1m",
            "input_series": [{"series": 'gpualign_leader{pod="a"}', "values": "1x10"},
                             {"series": 'gpualign_node_reboot_ready{node="deb-1"}', "values": "1x10"},
                             {"series": 'gpualign_archive_read_timestamp_seconds{pod="a"}',
                              "values": "0+60x10"},
                             {"series": 'gpualign_archive_poll_seconds{pod="a"}', "values": "900x10"}],
            "alert_rule_test": [alerts(name, "5m") for name in sorted(names_matching_the_kured_filter())],
        },
    ]
    res = promtool(tmp_path, tests)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout, res.stdout


def test_promtool_refuses_a_wrong_expectation(tmp_path):
    """The check can fail: an alert said to fire where it does not is reported by promtool."""
    tests = [{"interval": "1m",
              "input_series": [{"series": 'gpualign_leader{pod="a"}', "values": "1x10"}],
              "alert_rule_test": [alerts("GPUAlignRebootGateBlind", "1m", {})]}]
    res = promtool(tmp_path, tests)
    assert res.returncode != 0 and "GPUAlignRebootGateBlind" in res.stdout + res.stderr
