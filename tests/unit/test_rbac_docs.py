"""docs/security.md's RBAC table says exactly what deploy/'s roles grant: every right, and no other (the review found
the docs giving the controller evictions and Job reads it no longer held, and hiding a pod delete it did)."""

from __future__ import annotations

from ruamel.yaml import YAML

from tests.support.cli import ROOT
from tests.support.rbac_docs import rights_of, rules_rights, table


def test_each_role_in_deploy_grants_what_the_docs_say():
    rows = table()
    checked = set()
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        for obj in YAML(typ="safe").load_all(path.read_text()):
            if not obj or obj.get("kind") not in ("ClusterRole", "Role"):
                continue
            name = obj["metadata"]["name"]
            assert name in rows, f"{path.relative_to(ROOT)}: {name} is not in docs/security.md's table"
            stated, manifest = rows[name]
            assert manifest == str(path.relative_to(ROOT)), (name, manifest)
            assert stated == rules_rights(obj["rules"]), (name, stated ^ rules_rights(obj["rules"]))
            checked.add(name)
    assert {"gpualign-cli-reader", "gpualign-cli-upgrader", "gpualign-cli-upgrade-driver", "gpualign-cli-upgrade-lock",
            "gpualign-cli-builds", "gpualign-controller", "gpualign-leader-election"} <= checked


def test_the_table_reader_takes_verbs_resources_and_names():
    assert rights_of("get, list `nodes`; create `leases` (why); get `leases` named x") == {
        ("get", "nodes", None), ("list", "nodes", None), ("create", "leases", None), ("get", "leases", "x")}
