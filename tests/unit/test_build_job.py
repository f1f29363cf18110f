"""The build Job a tag gets, and how a Job and its pod read back (controller/build_trigger/job.py)."""

from __future__ import annotations

import json

from gpualign.controller.build_trigger import decisions as B
from gpualign.controller.build_trigger import job as J
from gpualign.model.audit import Status
from gpualign.usecases.archive_next import PoolNext
from tests.support.findings import node_finding

TAG = "535-6.1.0-50-amd64-debian12"
SETTINGS = J.BuildSettings(image="registry.local/gpualign:0.1.0", ledger="registry://registry.local/nvidia/driver",
                           node_selector={"gpualign.io/builder": "true"},
                           tolerations=[{"key": "gpualign.io/builder", "operator": "Exists", "effect": "NoSchedule"}],
                           resources={"requests": {"cpu": "2", "memory": "2Gi"}}, push_secret="push",
                           sign_secret="kube-system/mok")


def test_one_tag_one_job_running_gpualigns_own_ensure():
    job = J.build_job(TAG, 2, ["deb-b", "deb-a"], SETTINGS, "gpualign 0.1.0")
    assert job["metadata"]["name"] == B.job_name(TAG, 2) == B.job_name(TAG) + "-2"  # attempt 2: its own Job
    assert job["metadata"]["labels"][J.BUILD_LABEL] == "true"
    assert job["metadata"]["annotations"][J.TAG_ANNOTATION] == TAG
    assert job["metadata"]["annotations"][J.NODES_ANNOTATION] == "deb-a,deb-b"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 86400  # gpualign decides retries
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "gpualign.io/builder": "true"}
    (c,) = pod["containers"]
    assert c["image"] == SETTINGS.image
    assert c["args"] == ["ensure", TAG, "--ledger", SETTINGS.ledger, "--sign-secret", "kube-system/mok"]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "GPUALIGN_TERMINATION_LOG", "value": "/dev/termination-log"} in c["env"]
    assert {"name": "DOCKER_CONFIG", "value": "/etc/gpualign/docker"} in c["env"]
    assert not any("hostPath" in v for v in pod["volumes"])  # nothing from the host


def pod_terminated(message: str, code: int = 1) -> dict:
    return {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code, "message": message}}}]}}


def job_obj(**status: object) -> dict:
    return {"metadata": {"name": B.job_name(TAG), "annotations": {J.TAG_ANNOTATION: TAG, J.ATTEMPT_ANNOTATION: "3",
                                                                  J.RECIPE_ANNOTATION: "gpualign 0.1.0"}},
            "status": status}


def test_a_running_job_reads_as_running():
    read = J.read_job(job_obj(active=1), None)
    assert (read.tag, read.phase, read.attempt, read.recipe) == (TAG, B.BuildPhase.RUNNING, 3, "gpualign 0.1.0")


def test_a_failed_job_takes_its_kind_from_gpualigns_record():
    failed = job_obj(conditions=[{"type": "Failed", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}])
    record = {"word": "error", "exit": 2, "retryable": False, "error": "BadInput",
              "message": "kernel 6.1.0-99-amd64: no linux-headers-6.1.0-99-amd64 in bookworm"}
    read = J.read_job(failed, pod_terminated(json.dumps(record)))
    assert read.phase == B.BuildPhase.FAILED and read.failure == B.BuildFailure.PERMANENT
    assert "no linux-headers" in read.reason
    assert read.finished is not None
    transient = J.read_job(failed, pod_terminated(json.dumps({**record, "retryable": True, "message": "503"})))
    assert transient.failure == B.BuildFailure.TRANSIENT


def test_a_failed_job_without_a_record_is_transient_with_its_logs_last_lines():
    failed = job_obj(conditions=[{"type": "Failed", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}])
    read = J.read_job(failed, pod_terminated("line one\nSegmentation fault\n", code=139))
    assert read.failure == B.BuildFailure.TRANSIENT and read.reason == "line one | Segmentation fault"
    gone = J.read_job(failed | {"status": {"conditions": [{"type": "Failed", "status": "True",
                                                           "reason": "DeadlineExceeded"}]}}, None)
    # its pod gone, the condition says why
    assert gone.failure == B.BuildFailure.TRANSIENT and gone.reason == "DeadlineExceeded"


def test_a_completed_job_reads_as_succeeded_and_a_retry_stamp_is_read():
    done = job_obj(conditions=[{"type": "Complete", "status": "True"}], completionTime="2026-12-01T10:05:00Z")
    done["metadata"]["annotations"][J.RETRY_ANNOTATION] = "2026-12-01T11:00:00Z"
    read = J.read_job(done, None)
    assert read.phase == B.BuildPhase.SUCCEEDED and read.finished is not None and read.retry_asked > read.finished


def test_a_build_in_one_line_says_where_it_is_for_how_long_and_what_happens_next():
    tag = "535-6.1.0-50-amd64-debian12"
    name = B.job_name(tag)
    running = B.BuildJob(name, tag, B.BuildPhase.RUNNING, attempt=1, started=1000.0)
    assert J.describe(running, "ops", 1130.0) == f"image building: Job ops/{name}, for 2m10s (attempt 1)"
    pending = B.BuildJob(name, tag, B.BuildPhase.RUNNING)
    assert J.describe(pending, "ops", 1130.0).endswith("created, its pod not started yet (attempt 1)")
    held = B.BuildJob(name, tag, B.BuildPhase.FAILED, attempt=2, failure=B.BuildFailure.PERMANENT,
                      reason="gpualign: bad input: no headers")
    assert J.describe(held, "ops", 0) == (f"image build failed: gpualign: bad input: no headers (Job ops/{name}, "
                                          f"attempt 2; not retried until something changes: gpualign build retry "
                                          f"{tag})")
    again = B.BuildJob(name, tag, B.BuildPhase.FAILED, attempt=1, failure=B.BuildFailure.TRANSIENT,
                       reason="registry 503")
    assert J.describe(again, "ops", 0).endswith("attempt 1; retried after a backoff)")
    assert J.describe(B.BuildJob(name, tag, B.BuildPhase.SUCCEEDED), "ops", 0) == f"image built by Job ops/{name}"


def test_a_present_but_wrong_image_is_made_again_only_when_the_value_says_so():
    from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger

    tag = "535-6.1.0-50-amd64-debian12"
    findings = {"gpu-1": node_finding(tag, Status.WRONG_IMAGE, name="gpu-1"),
                "gpu-2": node_finding("535-6.1.0-47-amd64-debian12", name="gpu-2")}
    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver")
    off = BuildTrigger(kube=None, options=BuildOptions(settings), findings=lambda: findings)  # type: ignore[arg-type]
    assert [w.tag for w in off.wanted(0.0)] == ["535-6.1.0-47-amd64-debian12"]  # alarmed only, never rebuilt
    on = BuildTrigger(kube=None, options=BuildOptions(settings, replace_wrong=True),  # type: ignore[arg-type]
                      findings=lambda: findings)
    wanted = {w.tag: w for w in on.wanted(0.0)}
    assert wanted[tag].action == "replace" and wanted[tag].nodes == ("gpu-1",)
    job = J.build_job(tag, 1, ["gpu-1"], settings, "gpualign 1", replace_wrong=True)
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "ensure", tag, "--ledger", "registry://reg/nvidia/driver", "--replace-wrong"]


def test_build_pods_stay_off_gpu_nodes_on_the_builders_architecture_with_the_charts_pod_settings():
    job = J.build_job(TAG, 1, ["deb-a"], SETTINGS, "gpualign 0.1.0")
    pod = job["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]
    assert "imagePullSecrets" not in pod and "priorityClassName" not in pod
    import dataclasses

    custom = dataclasses.replace(SETTINGS, affinity={"podAntiAffinity": {}}, image_pull_secrets=("harbor-pull",),
                                 priority_class="builds", pod_labels={"team": "gpu"},
                                 pod_annotations={"cost": "batch"})
    job = J.build_job(TAG, 1, ["deb-a"], custom, "gpualign 0.1.0", arch="arm64")
    pod = job["spec"]["template"]["spec"]
    assert pod["affinity"] == {"podAntiAffinity": {}} and pod["imagePullSecrets"] == [{"name": "harbor-pull"}]
    # an arm64 image is compiled across on the builder image's architecture, and recorded as arm64's
    assert pod["priorityClassName"] == "builds" and pod["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    assert job["metadata"]["annotations"][J.ARCH_ANNOTATION] == "arm64"
    native = J.build_job(TAG, 1, ["deb-a"], dataclasses.replace(SETTINGS, node_selector={"kubernetes.io/arch":
                                                                                         "arm64"}),
                         "gpualign 0.1.0", arch="arm64")
    assert native["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    meta = job["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "gpu" and meta["labels"][J.BUILD_LABEL] == "true"
    assert meta["annotations"] == {"cost": "batch"}


def test_a_job_whose_pod_cannot_be_created_is_blocked_never_building_and_permanent_past_its_deadline():
    job = J.build_job(TAG, 3, ["deb-a"], SETTINGS, "gpualign 0.1.0")
    job["status"] = {"startTime": "2026-12-02T10:00:00Z"}
    why = 'pods "x" is forbidden: violates PodSecurity "baseline:latest": privileged'
    read = J.read_job(job, None, J.cannot_create_hint(why, "gpualign-system"))
    assert read.phase == B.BuildPhase.BLOCKED and "pod-security.kubernetes.io/enforce=privileged" in read.reason
    line = J.describe(read, "gpualign-system", 0)
    assert line.startswith("image build cannot start:") and "building" not in line and "attempt 3" in line
    job["metadata"]["annotations"][J.BLOCKED_ANNOTATION] = why  # kept on the Job, the Event long expired
    job["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                    "lastTransitionTime": "2026-12-02T11:00:00Z"}]
    failed = J.read_job(job, None)
    assert failed.phase == B.BuildPhase.FAILED and failed.failure == B.BuildFailure.PERMANENT
    assert failed.reason == f"its pod could never be created: {why}"
    job["status"] = {"active": 1}
    assert J.read_job(job, {"status": {}}).phase == B.BuildPhase.RUNNING  # it has a pod now: the namespace was fixed


def test_builds_go_only_to_a_registry_that_is_yours():
    import pytest

    from gpualign.base.errors import BadInput
    from gpualign.cli.controller import build_target

    assert build_target(None, ["registry://r.local/nvidia/driver"], None) == "r.local/nvidia/driver"
    assert build_target("r.local/x/driver", ["ledger.txt"], None) == "r.local/x/driver"
    with pytest.raises(BadInput, match="no registry to push to"):
        build_target(None, ["ledger.txt"], None)
    with pytest.raises(BadInput, match="NVIDIA's registry, which you cannot push to"):
        build_target("nvcr.io/nvidia/driver", [], None)


def test_a_namespace_under_baseline_refuses_the_privileged_build_pod_and_says_which_label_allows_it():
    from gpualign.controller.build_trigger.preflight import pod_security_problem

    assert pod_security_problem({}, "b") is None
    assert pod_security_problem({"pod-security.kubernetes.io/enforce": "privileged"}, "b") is None
    why = pod_security_problem({"pod-security.kubernetes.io/enforce": "baseline"}, "b")
    assert why and "enforces Pod Security 'baseline'" in why and "enforce=privileged" in why


def test_only_the_leader_collects_the_jobs_the_last_pass_found_stale():
    from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger

    class Jobs:
        deleted: list[str] = []

        def delete(self, name: str) -> None:
            self.deleted.append(name)

    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver")
    leader = [False]
    trigger = BuildTrigger(kube=None, options=BuildOptions(settings), findings=dict,  # type: ignore[arg-type]
                           is_leader=lambda: leader[0])
    trigger.api = Jobs()  # type: ignore[assignment]
    trigger.last = B.Decision(stale=("gpualign-build-a-1", "gpualign-build-b-2"))
    assert trigger.garbage_collect() == [] and Jobs.deleted == []
    leader[0] = True
    assert trigger.garbage_collect() == ["gpualign-build-a-1", "gpualign-build-b-2"] == Jobs.deleted
    assert trigger.status()["running"] == []


def test_an_air_gapped_fleets_debian_mirror_reaches_the_build_pods():
    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver",
                               debian_mirror="http://apt-cache.infra:3142/debian")
    job = J.build_job("535-6.1.0-57-amd64-debian12", 1, ["n1"], settings, "r")
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUALIGN_DEBIAN_MIRROR"] == "http://apt-cache.infra:3142/debian"
    assert "GPUALIGN_DEBIAN_SECURITY_MIRROR" not in env  # the mirror's sibling, as ensure derives it


def test_the_trigger_builds_the_archives_kernel_after_waiting_nodes_and_refuses_one_nobody_can_build():
    from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger

    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver")
    waiting = {"n1": node_finding("535-6.1.0-57-amd64-debian12")}

    def pool(os_tag: str, series: str, variant: str, *nodes: str) -> PoolNext:
        return PoolNext(os_tag, series, variant, "amd64", "", nodes, (), None, None)

    announced = {
        "archive/debian13 6.12 generic-amd64": node_finding("550-6.12.118_deb13-amd64-debian13", name="d13-a",
                                                            pool=pool("debian13", "6.12", "", "d13-a")),
        "archive/debian12 6.1 rt-amd64": node_finding("535-6.1.0-57-rt-amd64-debian12", name="rt-1", action="none",
                                                      why="a PREEMPT_RT kernel",
                                                      pool=pool("debian12", "6.1", "rt", "rt-1", "rt-2"))}
    trigger = BuildTrigger(kube=None, options=BuildOptions(settings), findings=lambda: waiting,  # type: ignore
                           ahead=lambda: announced)
    wanted = {w.tag: w for w in trigger.wanted(now=5.0)}
    assert not wanted["535-6.1.0-57-amd64-debian12"].ahead and wanted["550-6.12.118_deb13-amd64-debian13"].ahead
    assert "535-6.1.0-57-rt-amd64-debian12" not in wanted  # no Job that can only fail
    assert trigger.refused["535-6.1.0-57-rt-amd64-debian12"] == ("none", "a PREEMPT_RT kernel", ("rt-1", "rt-2"))
