"""The kill run's 'PDB breach', reproduced deterministically: the witness read the disruption controller's status,
which lags the pods. Right after a rollout that status can still count fewer healthy pods than required while every
pod is Ready, with nothing disrupted (on this machine the lab's serving PDB read 0 healthy 0.18 s after its 12 pods
were all Ready). A recorder started in that window took the rollout's last stale status for a breach.

Here the lag is made certain by pausing kube-controller-manager (SIGSTOP) while the pods become Ready: the status
then says 0 healthy of 3 required with 4 pods Ready. The status-based check alone calls that a breach; the pod-based
check does not; and the recorder refuses to start until the status has caught up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from gpualign.lab import cluster
from tests.recorder import Recorder
from tests.support.cli import run_cli
from tests.support.lab import start_lab
from tests.support.waits import pod_ready, wait_for

pytestmark = [pytest.mark.lab]

DELAY = "pod-ready.stage.kwok.x-k8s.io/delay"


def service() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lag"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "svc", "namespace": "lag"},
         "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "svc"}},
                  "template": {"metadata": {"labels": {"app": "svc"}, "annotations": {DELAY: "6s"}},
                               "spec": {"containers": [{"name": "svc", "image": "nginx:1.27"}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "svc-pdb", "namespace": "lag"},
         "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "svc"}}}},
    ]


@pytest.mark.timeout(300)
def test_a_pdb_status_lagging_its_pods_is_no_breach_and_the_recorder_waits_it_out(tmp_path):
    lab = start_lab(tmp_path / "state")
    state = cluster.LabState.load(lab.state_dir)
    assert state is not None
    kcm = state.procs["kube-controller-manager"].pid
    paused = False
    try:
        kube = lab.kube()
        for obj in service():
            kube.apply(obj)
        path = "/apis/policy/v1/namespaces/lag/poddisruptionbudgets/svc-pdb"
        # the controller has seen the four pods, none Ready yet (kwok makes them Ready after 6 s)
        wait_for(lambda: (kube.get(path) or {}).get("status", {}).get("expectedPods") == 4, timeout=60,
                 what="the PDB counting 4 expected pods")
        os.kill(kcm, signal.SIGSTOP)
        paused = True
        pods = wait_for(lambda: (p if len(p := kube.pods("lag")) == 4 and all(map(pod_ready, p)) else None),
                        timeout=60, what="4 pods Ready")
        status = kube.get(path)["status"]
        assert (status["currentHealthy"], status["desiredHealthy"]) == (0, 3), status  # stale: 4 Ready, says 0
        assert len(pods) == 4

        stale = Recorder(kube).start(settle=0)  # the old witness: no wait
        time.sleep(1)
        stale.stop()
        assert stale.pdb_breaches() == ["lag/svc-pdb: 0 healthy < 3 required"]  # what the kill run reported
        assert stale.pods_below_minimum() == []  # the pods tell the truth: 4 Ready of 3 required
        assert "not healthy: []" in stale.breach_evidence()[0]  # no pod to blame: the status was behind

        with pytest.raises(AssertionError, match="lag/svc-pdb: status says 0 healthy of 4 expected, 4 Ready pods of 4"):
            Recorder(kube).start(settle=3)  # the witness now refuses to start on a status behind its pods

        os.kill(kcm, signal.SIGCONT)
        paused = False
        settled = Recorder(kube).start(settle=60)
        time.sleep(1)
        settled.stop()
        assert settled.pdb_breaches() == [] and settled.pods_below_minimum() == []
    finally:
        if paused:
            os.kill(kcm, signal.SIGCONT)
        run_cli("lab", "down", env=lab.env)
