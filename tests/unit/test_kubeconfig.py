"""A malformed kubeconfig is a usage error (exit 2) with one line naming the file, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualign.errors import BadInput
from gpualign.kube import Kube
from gpualign.lab import pki
from tests.conftest import run_cli

CONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:9", {ca}}}}}]
users: [{{name: u, user: {{token: abc}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "files", "message"), [
    ("", {}, "not a kubeconfig (empty; expected a mapping with clusters, contexts and users)"),
    ("- a\n- b\n", {}, "not a kubeconfig (a list;"),
    ("clusters: {a: 1}\n", {}, "clusters must be a list of entries with a name"),
    ("a: [\n", {}, "invalid YAML"),
    (CONFIG.format(ca="certificate-authority: ca.crt"), {"ca.crt": ""}, "certificate-authority {dir}/ca.crt is empty"),
    (CONFIG.format(ca="certificate-authority: ca.crt"), {"ca.crt": "hello\n"}, "ca.crt is not PEM"),
    (CONFIG.format(ca="certificate-authority: nope.crt"), {}, "certificate-authority {dir}/nope.crt does not exist"),
])
def test_bad_kubeconfigs_are_named_in_one_line(tmp_path, text, files, message):
    for name, content in files.items():
        write(tmp_path, name, content)
    path = write(tmp_path, "kc.yaml", text)
    with pytest.raises(BadInput) as err:
        Kube(str(path))
    assert message.format(dir=tmp_path) in err.value.message and str(path) in err.value.message
    ledger = write(tmp_path, "ledger.txt", "580-5.15.0-124-generic-ubuntu22.04\n")
    res = run_cli("check", "--kubeconfig", str(path), "--ledger", str(ledger), "--driver-branch", "580")
    assert res.code == 2 and res.err.count("\n") == 1 and res.err.startswith("gpualign: error: kubeconfig ")


def test_a_good_kubeconfig_with_a_relative_ca_path_is_read_from_its_own_directory(tmp_path, monkeypatch):
    made = pki.create(tmp_path / "pki")
    path = write(tmp_path, "kc.yaml", CONFIG.format(ca=f"certificate-authority: pki/{made.ca_cert.name}"))
    monkeypatch.chdir("/")
    kube = Kube(str(path))
    assert kube.server == "https://127.0.0.1:9"
    kube.close()
