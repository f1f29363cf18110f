"""A lab started for a test (its state dir, kubeconfig, registry, an admin client), and identities on it: a
ServiceAccount's token in a kubeconfig of its own, so requests run with exactly that account's RBAC."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import CliResult, run_cli


@dataclass
class Lab:
    """A running lab: its state dir, kubeconfig, registry address and an admin Kube client."""

    state_dir: Path
    kubeconfig: Path
    registry: str
    apiserver: str
    bin_dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {"GPUALIGN_LAB_DIR": str(self.state_dir), "KUBECONFIG": str(self.kubeconfig)}

    def cli(self, *args: str, timeout: float = 120, input: str | None = None) -> CliResult:
        return run_cli(*args, env=self.env, timeout=timeout, input=input)

    def kube(self):  # noqa: ANN201 - gpualign.kube.client.Kube, imported lazily
        from gpualign.kube.client import Kube

        return Kube(str(self.kubeconfig))

    def kubectl(self, *args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc


def start_lab(state_dir: Path, scenario: str = "default", *, real_node: bool = False,
              env: dict[str, str] | None = None) -> Lab:
    """env: more of `lab up`'s environment (GPUALIGN_LAB_PULL_BACKOFF=kubelet: pulls retried as a kubelet does)."""
    from gpualign.lab import cluster, versions

    res = run_cli("lab", "up", "--scenario", scenario, *(["--real-node"] if real_node else []),
                  env={"GPUALIGN_LAB_DIR": str(state_dir), **(env or {})}, timeout=300)
    if res.code != 0:
        raise RuntimeError(f"lab up failed ({res.code}):\n{res.err}")
    state = cluster.LabState.load(state_dir)
    assert state is not None
    stopped = [name for name, alive in state.running().items() if not alive]
    assert not stopped, f"lab up returned with {', '.join(stopped)} not running:\n{res.err}"
    return Lab(state_dir, state.kubeconfig, state.registry, state.apiserver, versions.default_bin_dir())


def token_kubeconfig(lab, namespace: str, account: str, path, name: str):  # noqa: ANN001, ANN201 - Lab, Path
    """A kubeconfig file for a ServiceAccount (created if missing) with a bound token, its cluster/user/context all
    called `name`, for the lab's API server."""
    lab.kubectl("create", "namespace", namespace)
    lab.kubectl("create", "serviceaccount", account, "-n", namespace)
    token = lab.kubectl("create", "token", account, "-n", namespace, "--duration", "1h", check=True).stdout.strip()
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster: {{server: "{lab.apiserver}", certificate-authority: {lab.state_dir}/pki/ca.crt}}
users:
- name: {name}
  user: {{token: "{token}"}}
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
""")
    return path
