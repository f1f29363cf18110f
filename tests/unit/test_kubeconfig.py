"""A malformed kubeconfig is a usage error (exit 2) with one line naming the file, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualign.base.errors import BadInput
from gpualign.cli.hints import worded
from gpualign.kube.client import Kube
from gpualign.lab import pki
from tests.support.cli import run_cli

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
    ("a: 1\n---\nb: 2\n", {}, "kc.yaml:2: holds more than one YAML document"),
    ("a:\n\t- b\n", {}, "kc.yaml:2: invalid YAML"),
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



def kubeconfig_text(cluster: str, server: str, ca: str | None, context: str, current: str | None) -> str:
    ca_line = f", certificate-authority: {ca}" if ca else ""
    return (f"clusters: [{{name: {cluster}, cluster: {{server: '{server}'{ca_line}}}}}]\n"
            f"users: [{{name: u-{cluster}, user: {{token: t}}}}]\n"
            f"contexts: [{{name: {context}, context: {{cluster: {cluster}, user: u-{cluster}}}}}]\n"
            + (f"current-context: {current}\n" if current else ""))


def test_kubeconfig_path_lists_merge_by_kubectls_rules(tmp_path):
    from gpualign.kube import kubeconfig as kc

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", "kc", kubeconfig_text("shared", "https://first", "ca.crt", "east", None))
    second = write(tmp_path / "b", "kc", kubeconfig_text("shared", "https://second", "ca.crt", "west", "west"))
    env = f"{first}:{tmp_path / 'missing'}:{second}"
    files = kc.files_to_read(None, env=env)
    assert files == [first, second]  # a file that does not exist is skipped, as kubectl skips it
    merged = kc.merge(files)
    assert merged.config["current-context"] == "west"  # the first file that sets it (only the second does)
    (cluster,) = merged.config["clusters"]  # the first file to define a name wins
    assert cluster["cluster"]["server"] == "https://first"
    assert cluster["cluster"]["certificate-authority"] == str(tmp_path / "a" / "ca.crt")  # relative to its file
    assert {c["name"] for c in merged.config["contexts"]} == {"east", "west"}
    assert merged.context_file("east") == first and merged.context_file(None) == second
    with pytest.raises(BadInput, match="no file of \\$KUBECONFIG exists"):
        kc.files_to_read(None, env=f"{tmp_path / 'x'}:{tmp_path / 'y'}")
    assert kc.files_to_read(None, env="", home=tmp_path) == []  # no ~/.kube/config: in-cluster


def test_context_from_the_second_file_of_kubeconfig_is_used(tmp_path, monkeypatch):
    first = write(tmp_path, "one.yaml", kubeconfig_text("c1", "https://127.0.0.1:1", None, "one", "one"))
    second = write(tmp_path, "two.yaml", kubeconfig_text("c2", "https://127.0.0.1:2", None, "two", "two"))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    kube = Kube(None, "two")
    assert (kube.context, kube.server) == ("two", "https://127.0.0.1:2")
    kube.close()
    kube = Kube(None, None)
    assert (kube.context, kube.server) == ("one", "https://127.0.0.1:1")
    kube.close()
    with pytest.raises(BadInput, match="no context 'three' \\(known: one, two\\)"):
        Kube(None, "three")


def test_a_context_naming_an_undefined_cluster_is_a_sentence_not_an_exception_name(tmp_path):
    text = CONFIG.format(ca="insecure-skip-tls-verify: true").replace("{cluster: c, user: u}",
                                                                       "{cluster: missing, user: u}")
    path = write(tmp_path, "kc.yaml", text)
    with pytest.raises(BadInput) as err:
        Kube(str(path))
    assert err.value.message == (f"kubeconfig {path}: the current context refers to 'missing', which no cluster or "
                                 "user entry defines")


def test_a_server_that_does_not_answer_in_time_is_named_so_not_unreachable(tmp_path):
    import socket

    from gpualign.base.errors import Unreachable

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts the connection in the kernel, never answers the TLS handshake
    port = silent.getsockname()[1]
    path = write(tmp_path, "kc.yaml", CONFIG.replace("127.0.0.1:9", f"127.0.0.1:{port}").format(
        ca="insecure-skip-tls-verify: true"))
    kube = Kube(str(path), timeout=0.5)
    try:
        with pytest.raises(Unreachable) as err:
            kube.get_json("/api")
        assert err.value.message == f"API server https://127.0.0.1:{port} did not answer within 0.5s (connecting)"
    finally:
        kube.close()
        silent.close()


def test_a_fleet_report_says_when_a_kubeconfig_file_it_was_given_is_gone(tmp_path, monkeypatch, capsys):
    from gpualign.cli import fleet

    one = write(tmp_path, "a.yaml", kubeconfig_text("a", "https://127.0.0.1:9", None, "ctx-a", "ctx-a"))
    two = write(tmp_path, "b.yaml", kubeconfig_text("b", "https://127.0.0.1:10", None, "ctx-b", None))
    gone = tmp_path / "gone.yaml"
    monkeypatch.setenv("KUBECONFIG", f"{one}:{gone}:{two}")
    assert fleet.contexts(None, None, True) == ["ctx-a", "ctx-b"]
    assert f"$KUBECONFIG lists {gone}, which does not exist: the clusters it named are not in this report" in \
        capsys.readouterr().err
    assert fleet.kubeconfig_read(None) == f"{one}:{two}"  # the report's source names the files it read


@pytest.mark.parametrize(("old", "new", "message"), [
    ("current-context: x\n", "", "no current-context is set: pass --context NAME (known: x)"),
    ("current-context: x", "current-context: y", "no context 'y' (known: x)"),
    ('server: "https://127.0.0.1:9", ', "", "cluster 'c' has no server"),
    ("user: u}", "user: v}", "the current context refers to 'v', which no cluster or user entry defines"),
])
def test_a_context_that_cannot_be_used_is_named_in_one_line(tmp_path, old, new, message):
    text = CONFIG.format(ca="insecure-skip-tls-verify: true")
    assert old in text
    path = write(tmp_path, "kc.yaml", text.replace(old, new))
    with pytest.raises(BadInput) as err:
        Kube(str(path))
    assert worded(err.value) == f"kubeconfig {path}: {message}"  # as the command line says it


def test_in_a_pod_the_service_account_is_read_and_outside_one_nothing_is(tmp_path):
    from gpualign.kube import kubeconfig as kc

    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert kc.in_cluster(tmp_path, env) is None  # no token
    (tmp_path / "token").write_text("t\n")
    assert kc.in_cluster(tmp_path, {}) is None  # not in a pod
    picked = kc.in_cluster(tmp_path, env)
    assert picked is not None and (picked.context, picked.server, picked.where) == (
        "in-cluster", "https://10.96.0.1:443", "in-cluster service account")
    assert picked.cluster["certificate-authority"] == str(tmp_path / "ca.crt")
    assert picked.user == {"tokenFile": str(tmp_path / "token")}
    six = kc.in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert six is not None and six.server == "https://[fd00::1]:6443"


def test_in_a_pod_kube_reads_with_the_service_accounts_ca_and_token(tmp_path, monkeypatch):
    from gpualign.kube import kubeconfig as kc

    made = pki.create(tmp_path / "pki")
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("t\n")
    (account / "ca.crt").write_bytes(made.ca_cert.read_bytes())
    monkeypatch.setattr(kc, "SERVICE_ACCOUNT", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "9")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    kube = Kube(None)
    assert (kube.context, kube.server) == ("in-cluster", "https://127.0.0.1:9")
    kube.close()
    (account / "ca.crt").write_text("not a certificate\n")
    with pytest.raises(BadInput, match="kubeconfig in-cluster service account: certificate-authority .* is not PEM"):
        Kube(None)


def test_a_kubeconfig_is_read_as_kubectl_reads_it_field_by_field(tmp_path):
    """Kubernetes decodes a kubeconfig by each field's type, with go-yaml v2 (YAML 1.1): a boolean field takes `yes`
    and `off`; a name or a namespace `no` or `on` stays text."""
    from gpualign.kube.kubeconfig import read_file

    text = CONFIG.format(ca="insecure-skip-tls-verify: yes, disable-compression: off").replace(
        "contexts: [{name: x, context: {cluster: c, user: u}}]",
        "contexts: [{name: no, context: {cluster: c, user: u, namespace: on}}]")
    data = read_file(write(tmp_path, "kc.yaml", text))
    cluster = data["clusters"][0]["cluster"]
    assert cluster["insecure-skip-tls-verify"] is True and cluster["disable-compression"] is False
    assert data["contexts"][0]["name"] == "no" and data["contexts"][0]["context"]["namespace"] == "on"
    bad = write(tmp_path, "bad.yaml", CONFIG.format(ca="insecure-skip-tls-verify: maybe"))
    with pytest.raises(BadInput, match="insecure-skip-tls-verify: 'maybe' is not a boolean"):
        read_file(bad)
