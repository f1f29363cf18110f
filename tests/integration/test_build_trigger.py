"""The controller's build trigger (`gpualign controller --build`) against the lab's real API server and Job
controller: one Job per missing tag however many nodes wait, the cap and the join order, a restarted controller
adopting the Job that exists, and a failed Job retried after its backoff with an Event on every waiting node.

The build pods are pinned to a node that does not exist, so they stay Pending (the Job active) for as long as a test
needs, or fail at their deadline: what the trigger decides is tested here; a build that really runs is the real
node's."""

from __future__ import annotations

import json
import signal
import time

import pytest

from gpualign.controller.build_trigger import job as J
from gpualign.controller.build_trigger.decisions import job_name
from gpualign.lab.scenarios import NodeSpec
from gpualign.lab.seed import add_node
from tests.support.cli import run_cli
from tests.support.controller import Controller, events
from tests.support.lab import start_lab
from tests.support.local_suite import serve_directory
from tests.support.waits import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
# Debian 12 kernels: gpualign builds their images (gpualign.model.makers: build), and none is in the ledger
K1, K2, K3 = "6.1.0-91-amd64", "6.1.0-92-amd64", "6.1.0-93-amd64"
NS = "gpualign-system"


def tag(kernel: str) -> str:
    return f"535-{kernel}-debian12"


@pytest.fixture(scope="module")
def blab(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("builds") / "state"
    lab = start_lab(state_dir, "empty")
    lab.kube().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    lab.kube().apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpualign-builder",
                                                                             "namespace": NS}})
    # the ledger's repository exists (an empty lab has pushed nothing), holding none of the tags the tests need
    assert lab.cli("lab", "push-image", "535-6.1.0-47-amd64-debian12").code == 0
    try:
        yield lab
    finally:
        run_cli("lab", "down", env={"GPUALIGN_LAB_DIR": str(state_dir)})


def settings_file(tmp_path, **extra: object) -> str:
    import json

    path = tmp_path / f"build-pods-{len(extra)}-{time.monotonic_ns()}.yaml"
    path.write_text(json.dumps({"nodeSelector": {"gpualign.io/no-such-node": "true"}, **extra}))
    return str(path)


def build_jobs(lab) -> list[dict]:
    return lab.kube().list_raw(f"/apis/batch/v1/namespaces/{NS}/jobs", label_selector=f"{J.BUILD_LABEL}=true")


def trigger(lab, tmp_path, *extra: str, identity: str = "ctl", **pod: object) -> Controller:
    return Controller(lab, "--driver-branch", "535", "--build", "--build-image", f"{lab.registry}/gpualign:test",
                      "--build-namespace", NS, "--no-build-ahead-from-archive",
                      "--build-pod-settings", settings_file(tmp_path, **pod), *extra, identity=identity)


def add(lab, name: str, kernel: str, os_id: str = "debian", version: str = "12", branch: str = "535") -> None:
    add_node(lab.kube(), NodeSpec(name, kernel, os_id, version, driver=f"{branch}.261.03"), branch=branch,
             registry=lab.registry)


def test_one_job_per_tag_the_cap_the_order_and_a_restart_adopts(blab, tmp_path):
    for i in range(3):
        add(blab, f"b1-{i}", K1)  # three nodes on one kernel
    time.sleep(1.1)  # they began to wait first
    add(blab, "b2-0", K2)
    ctl = trigger(blab, tmp_path, "--max-concurrent-builds", "1")
    try:
        jobs = wait_for(lambda: build_jobs(blab) or None, timeout=60, what="a build Job")
        time.sleep(6)  # more passes: nothing more may be made
        jobs = build_jobs(blab)
        assert [j["metadata"]["annotations"][J.TAG_ANNOTATION] for j in jobs] == [tag(K1)]  # one Job, the oldest
        (job,) = jobs
        assert job["metadata"]["name"] == job_name(tag(K1))
        assert job["metadata"]["annotations"][J.NODES_ANNOTATION] == "b1-0,b1-1,b1-2"
        assert job["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["ensure", tag(K1)]
        for node in ("b1-0", "b1-1", "b1-2"):
            assert len(events(blab.kube(), node, "DriverImageBuildStarted")) == 1
        assert ctl.metric("gpualign_builds_running") == 1
        uid = job["metadata"]["uid"]
    finally:
        ctl.stop(signal.SIGKILL)
    again = trigger(blab, tmp_path, "--max-concurrent-builds", "1", identity="ctl2")
    try:
        wait_for(lambda: again.metric("gpualign_builds_running") == 1 or None, timeout=60, what="the Job adopted")
        time.sleep(6)
        jobs = build_jobs(blab)
        assert [j["metadata"]["uid"] for j in jobs] == [uid]  # adopted, not made again
        assert len(events(blab.kube(), "b1-0", "DriverImageBuildStarted")) == 1
    finally:
        again.stop()
    wider = trigger(blab, tmp_path, "--max-concurrent-builds", "2", identity="ctl3")
    try:
        wait_for(lambda: len(build_jobs(blab)) == 2 or None, timeout=60, what="the queued tag's Job")
        assert sorted(j["metadata"]["annotations"][J.TAG_ANNOTATION] for j in build_jobs(blab)) == \
            sorted([tag(K1), tag(K2)])
        assert [j["metadata"]["uid"] for j in build_jobs(blab) if j["metadata"]["name"] == job_name(tag(K1))] == [uid]
    finally:
        wider.stop()


def test_a_failed_build_is_retried_after_its_backoff_with_an_event_on_the_waiting_node(blab, tmp_path):
    add(blab, "b3-0", K3)
    ctl = trigger(blab, tmp_path, "--max-concurrent-builds", "3", "--build-retry-after", "4",
                  activeDeadlineSeconds=2)
    try:
        failed = wait_for(lambda: events(blab.kube(), "b3-0", "DriverImageBuildFailed") or None, timeout=90,
                          what="the failure's Event")
        assert "retried after a backoff" in failed[0]["message"] and "DeadlineExceeded" in failed[0]["message"]
        second = wait_for(lambda: next((j for j in build_jobs(blab) if j["metadata"]["name"] == job_name(tag(K3), 2)
                                        and j["metadata"]["annotations"][J.ATTEMPT_ANNOTATION] == "2"), None),
                          timeout=60, what="the second attempt")
        assert second["metadata"]["annotations"][J.TAG_ANNOTATION] == tag(K3)
        # a Job of its own: the failed first attempt stays beside it, with its pod (and log), never doubled
        names = sorted(j["metadata"]["name"] for j in build_jobs(blab)
                       if j["metadata"]["annotations"][J.TAG_ANNOTATION] == tag(K3))
        assert names == sorted([job_name(tag(K3)), job_name(tag(K3), 2)])
    finally:
        ctl.stop()


def test_a_nodes_next_kernel_is_built_ahead_and_its_alarm_holds_until_the_image_lands(blab, tmp_path):
    """gpualign.io/kernel.next names the kernel a node will boot: its image is wanted before the reboot, the
    metric kured's alert reads is 1 until it lands, and after the reboot the node needs nothing."""
    from gpualign.base import labels as L

    current, nxt = "6.1.0-47-amd64", "6.1.0-94-amd64"  # its current kernel's image is in the ledger
    add_node(blab.kube(), NodeSpec("b4-0", current, "debian", "12", driver="535.261.03",
                                   labels={L.KERNEL_NEXT: nxt}), branch="535", registry=blab.registry)
    ctl = trigger(blab, tmp_path, "--max-concurrent-builds", "9", "--ledger-refresh", "2")
    try:
        job = wait_for(lambda: next((j for j in build_jobs(blab)
                                     if j["metadata"]["annotations"][J.TAG_ANNOTATION] == tag(nxt)), None),
                       timeout=60, what="the next kernel's build Job")
        assert job["metadata"]["annotations"][J.NODES_ANNOTATION] == "b4-0"
        series = f'node="b4-0",tag="{tag(nxt)}"'
        assert ctl.metric("gpualign_next_kernel_driver_image_missing", series) == 1
        assert ctl.metric("gpualign_node_driver_image_missing", f'node="b4-0",tag="{tag(current)}"') is None
        assert events(blab.kube(), "b4-0", "DriverImageMissing") == []  # nothing is missing today
        assert len(events(blab.kube(), "b4-0", "DriverImageBuildStarted")) == 1
        # the image lands (as the Job would push it): the alarm clears at the next ledger read
        assert blab.cli("lab", "push-image", tag(nxt)).code == 0
        wait_for(lambda: ctl.metric("gpualign_next_kernel_driver_image_missing", series) is None or None,
                 timeout=90, what="the next kernel's alarm cleared")
        # the reboot: the kernel label changes, and the node needs no image it lacks
        blab.kube().patch("/api/v1/nodes/b4-0", {"metadata": {"labels": {L.KERNEL: nxt, L.KERNEL_NEXT: None}}})
        time.sleep(3)
        assert ctl.metric("gpualign_node_driver_image_missing", f'node="b4-0",tag="{tag(nxt)}"') is None
        assert events(blab.kube(), "b4-0", "DriverImageMissing") == []
    finally:
        ctl.stop()


def test_a_pools_move_to_debian_13_is_built_ahead_when_its_nodes_announce_it(blab, tmp_path):
    """The seed's pool migration, on Debian: a Debian 12 node announces its next OS and kernel (gpualign.io/os.next,
    gpualign.io/kernel.next, as NFD labels the kernel: `_` for the release's `+`); the fleet's branch is 550, the
    one Debian 13 builds. Its Debian 13 image gets a Job before the move, the tag as the GPU Operator will pull it."""
    from gpualign.base import labels as L

    future = "550-6.12.118_deb13-amd64-debian13"
    add_node(blab.kube(), NodeSpec("mv-0", "6.1.0-47-amd64", "debian", "12", driver="550.163.01",
                                   labels={"pool": "move", L.KERNEL_NEXT: "6.12.118_deb13-amd64",
                                           L.OS_NEXT: "debian-13"}), branch="550", registry=blab.registry)
    ctl = Controller(blab, "--driver-branch", "550", "--build", "--build-image", f"{blab.registry}/gpualign:test",
                     "--build-namespace", NS, "--build-pod-settings", settings_file(tmp_path),
                     "--max-concurrent-builds", "9", "--no-build-ahead-from-archive", identity="mover")
    try:
        job = wait_for(lambda: next((j for j in build_jobs(blab)
                                     if j["metadata"]["annotations"][J.TAG_ANNOTATION] == future), None),
                       timeout=60, what="the Debian 13 image's build Job")
        assert job["metadata"]["annotations"][J.NODES_ANNOTATION] == "mv-0"
        assert ctl.metric("gpualign_next_kernel_driver_image_missing", f'node="mv-0",tag="{future}"') == 1
        # the Job builds the tag it names: the kernel as the headers name it, Debian 13's archive
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert future in args, args
    finally:
        ctl.stop()


def test_what_gpualign_cannot_build_gets_an_event_and_a_metric_never_a_job(blab, tmp_path):
    """The review's Ubuntu HWE case: a missing tag whose recipe gpualign only renders. A Job would be a privileged
    pod that can only fail."""
    hwe = "6.5.0-45-generic"
    add(blab, "r1-0", hwe, "ubuntu", "22.04", "535")
    ctl = trigger(blab, tmp_path, "--max-concurrent-builds", "9")
    try:
        told = wait_for(lambda: events(blab.kube(), "r1-0", "DriverImageNotBuildable") or None, timeout=60,
                        what="the not-buildable Event")
        assert f"gpualign ensure 535-{hwe}-ubuntu22.04 --render DIR" in told[0]["message"]
        assert ctl.metric("gpualign_driver_image_not_buildable",
                          f'action="render",tag="535-{hwe}-ubuntu22.04"') == 1
        assert not [j for j in build_jobs(blab)
                    if j["metadata"]["annotations"][J.TAG_ANNOTATION] == f"535-{hwe}-ubuntu22.04"]
    finally:
        ctl.stop()


def test_build_is_refused_at_start_up_without_a_registry_or_a_namespace_that_admits_it(blab, tmp_path):
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("535-6.1.0-47-amd64-debian12\n")
    base = ("controller", "--build", "--build-image", "x/y:1", "--no-leader-elect", "--listen", "127.0.0.1:0",
            "--driver-branch", "535")
    res = blab.cli(*base, "--ledger", str(ledger), "--build-namespace", NS)
    assert res.code == 2 and "no registry to push to" in res.err and res.err.count("\n") == 1, res.err
    res = blab.cli(*base, "--ledger", str(ledger), "--repository", "nvcr.io/nvidia/driver", "--build-namespace", NS)
    assert res.code == 2 and "NVIDIA's registry, which you cannot push to" in res.err, res.err
    reg = f"registry://{blab.registry}/nvidia/driver"
    strict = "gpualign-builds-baseline"
    blab.kube().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": strict, "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    res = blab.cli(*base, "--ledger", reg, "--build-namespace", strict)
    assert res.code == 2 and "enforces Pod Security 'baseline'" in res.err
    assert "pod-security.kubernetes.io/enforce=privileged" in res.err
    bare = "gpualign-builds-no-sa"
    blab.kube().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": bare}})
    res = blab.cli(*base, "--ledger", reg, "--build-namespace", bare)
    assert res.code == 2 and "no ServiceAccount gpualign-builder in gpualign-builds-no-sa" in res.err


def test_a_job_whose_pod_the_namespace_refuses_is_reported_within_a_minute_never_as_building(blab, tmp_path):
    """Pod Security set to baseline after the controller started: the Job controller cannot create the pod. The
    trigger reads the FailedCreate Event and says so (Event, build list, status line); it makes no second Job."""
    ns = "gpualign-builds-late"
    kube = blab.kube()
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpualign-builder",
                                                                        "namespace": ns}})
    kernel = "6.1.0-95-amd64"
    add(blab, "p0-0", "6.1.0-47-amd64")  # its image is in the ledger: the controller has a node, nothing to build
    ctl = Controller(blab, "--driver-branch", "535", "--build", "--build-image", f"{blab.registry}/gpualign:test",
                     "--build-namespace", ns,
                     "--build-pod-settings", settings_file(tmp_path), "--max-concurrent-builds", "9",
                     "--no-build-ahead-from-archive", identity="ctl-late")
    try:
        kube.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "baseline"}}})
        started = time.monotonic()
        add(blab, "p1-0", kernel)
        told = wait_for(lambda: events(kube, "p1-0", "DriverImageBuildCannotStart") or None, timeout=60,
                        what="the cannot-start Event")
        assert time.monotonic() - started < 60
        assert "violates PodSecurity" in told[0]["message"] and "enforce=privileged" in told[0]["message"]
        listed = blab.cli("build", "list", "-n", ns, "-o", "json")
        (row,) = [b for b in json.loads(listed.out)["builds"] if b["tag"] == tag(kernel)]
        assert row["phase"] == "blocked" and "PodSecurity" in row["reason"]
        # the lab's earlier tests left nodes on other missing kernels: this controller builds for them too
        jobs = [j for j in kube.list_raw(f"/apis/batch/v1/namespaces/{ns}/jobs",
                                         label_selector=f"{J.BUILD_LABEL}=true")
                if j["metadata"]["annotations"][J.TAG_ANNOTATION] == tag(kernel)]
        assert len(jobs) == 1 and J.BLOCKED_ANNOTATION in jobs[0]["metadata"]["annotations"]
    finally:
        ctl.stop()
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_the_sweeps_dry_run_lists_exactly_the_unused_tags_and_then_deletes_only_them(blab, tmp_path, serve):
    """`gpualign build gc`: images and shared-module artifacts for kernels no node runs, announces or falls back to,
    that Debian's archive does not install next (the lab's own archive, signed as Debian's is, names 6.1.0-57 next on
    the cloud line), and that are not the newest of their line."""
    from tests.support.local_suite import LocalArchive

    with LocalArchive(tmp_path / "archive") as archive:
        archive.publish_recorded("bookworm", "amd64")
        server = serve_directory(serve, archive.root)
        _sweep(blab, {**blab.env, **archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")})


def _sweep(blab, env: dict[str, str]) -> None:  # noqa: ANN001
    from gpualign.ensure.shared import repository
    from gpualign.ledger.registry import connect
    from gpualign.model.cosign import signature_tag

    def gc(*args: str):  # noqa: ANN202
        return run_cli("build", "gc", "--ledger", ledger, *args, env=env)

    repo = "sweep/driver"
    # the cloud line: the module's other tests leave nodes on the generic line, whose fallbacks would be kept too
    in_use, announced, fallback = "6.1.0-81-cloud-amd64", "6.1.0-82-cloud-amd64", "6.1.0-80-cloud-amd64"
    offered = "6.1.0-57-cloud-amd64"  # what the archive installs next on the cloud line: older than the rest here
    unused_a, unused_b = "6.1.0-30-cloud-amd64", "6.1.0-31-cloud-amd64"
    add(blab, "sw-0", in_use)
    blab.kube().patch("/api/v1/nodes/sw-0", {"metadata": {"labels": {"gpualign.io/kernel.next": announced}}})
    client = connect(f"registry://{blab.registry}/{repo}")
    try:  # each its own manifest (a registry deletes by digest: tags on one manifest go together)
        for kernel in (in_use, announced, fallback, offered, unused_a, unused_b):
            client.push_image(tag(kernel), {"KERNEL": kernel})
        client.push_image("latest", {"KERNEL": "none"})
        for kernel in (in_use, fallback, unused_a):  # the shared modules' artifacts sit beside the ledger
            client.push_image(f"535.261.03-{kernel}-proprietary", {"KERNEL": kernel}, repository(repo))
        # cosign's signatures beside two images: the one of an image that goes goes with it
        signatures = {k: signature_tag(client.digest(tag(k))) for k in (in_use, unused_a)}
        for k, where in signatures.items():
            client.push_image(where, {"SIGNATURE_OF": k})
    finally:
        client.close()
    ledger = f"registry://{blab.registry}/{repo}"

    dry = gc("-o", "json")
    assert dry.code == 1, dry.err  # something to sweep, and nothing swept
    found = json.loads(dry.out)
    assert found["dry_run"] is True
    assert found["offered"]["debian12 6.1 cloud-amd64"] == offered
    assert found["images"] == [tag(unused_a), tag(unused_b)]
    assert found["modules"] == [f"535.261.03-{unused_a}-proprietary"]
    assert found["kept"] == [{"tag": tag(offered), "why": "offered next"}, {"tag": tag(fallback), "why": "fallback"},
                             {"tag": f"535.261.03-{fallback}-proprietary", "why": "fallback"}]
    assert found["kept_unknown"] == ["latest"]
    assert found["attachments"] == [f"{repo}:{signatures[unused_a]}"]
    table = gc()
    assert f"kept {tag(fallback)}: the kernel a node falls back to" in table.out, table.out
    assert f"kept {tag(offered)}: the kernel Debian's archive installs next on a pool" in table.out, table.out
    # without the archive, only the line's newest is kept: the offered kernel would go
    blind = gc("--no-archive", "-o", "json")
    assert tag(offered) in json.loads(blind.out)["images"], blind.out

    swept = gc("--yes")
    assert swept.code == 0, swept.err
    client = connect(ledger)
    try:
        assert sorted(client.tags()) == sorted([tag(in_use), tag(announced), tag(fallback), tag(offered), "latest",
                                                signatures[in_use]])
        assert sorted(client.tags(repository(repo))) == sorted([f"535.261.03-{k}-proprietary"
                                                                for k in (in_use, fallback)])
    finally:
        client.close()
    again = gc()
    assert again.code == 0 and "nothing to sweep" in again.out, again.out


def test_the_kernel_debians_archive_announces_gets_its_job_before_any_node_runs_it(blab, tmp_path, serve):
    """Issue: the archive is the announcement. A pool of Debian 12 nodes on 6.1.0-53 (its image present); the lab's
    own archive, signed by a key of its own and trusted as apt trusts a signed-by key, carries the archive's recorded
    metapackages, which name 6.1.0-57 next: with nobody typing, the controller makes its Job, though no node runs it
    or announces it. The pool's rt nodes' next kernel makes no Job, only a refusal on those nodes."""
    from tests.support.local_suite import LocalArchive

    with LocalArchive(tmp_path / "archive") as archive:
        _announced(blab, tmp_path, serve, archive)


def _announced(blab, tmp_path, serve, archive) -> None:  # noqa: ANN001
    from tests.support.local_suite import serve_directory

    archive.publish_recorded("bookworm", "amd64")
    server = serve_directory(serve, archive.root)
    assert blab.cli("lab", "push-image", "535-6.1.0-53-amd64-debian12").code == 0
    assert blab.cli("lab", "push-image", "535-6.1.0-53-rt-amd64-debian12").code == 0
    add(blab, "arc-0", "6.1.0-53-amd64")
    add(blab, "arc-rt", "6.1.0-53-rt-amd64")
    ctl = Controller(blab, "--driver-branch", "535", "--build", "--build-image", f"{blab.registry}/gpualign:test",
                     "--build-namespace", NS, "--build-pod-settings", settings_file(tmp_path),
                     "--max-concurrent-builds", "9", "--archive-poll-seconds", "2",  # on by default with --build
                     identity="arc",
                     env={**archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")})
    try:
        job = wait_for(lambda: next((j for j in build_jobs(blab) if j["metadata"]["annotations"][J.TAG_ANNOTATION]
                                     == tag("6.1.0-57-amd64")), None), timeout=90, what="the announced kernel's Job")
        assert job["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["ensure", tag("6.1.0-57-amd64")]
        assert not [j for j in build_jobs(blab) if "rt-amd64" in j["metadata"]["annotations"][J.TAG_ANNOTATION]]
        refused = wait_for(lambda: [e for e in events(blab.kube(), "arc-rt", "DriverImageNotBuildable")
                                    if "6.1.0-57-rt-amd64" in e.get("message", "")] or None, timeout=60,
                           what="the rt pool's refusal told on its node")
        assert "PREEMPT_RT" in refused[0]["message"], refused[0]
        # read through the door: each suite's signed InRelease, then its index by the hash it signs
        assert "/debian-security/dists/bookworm-security/InRelease" in [path for path, _h, _p in server.seen]
        # `status --tonight` tells the same night: the pool's next kernel, its image building, the rt pool's refusal
        told = run_cli("status", "-l", "kubernetes.io/hostname in (arc-0,arc-rt)", "--tonight", "--ledger",
                       f"registry://{blab.registry}/nvidia/driver", "-o", "json",
                       env={**blab.env, **archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")})
        assert told.code == 1, told.err  # both nodes would reboot into a kernel without its image
        assert {(v["node"], v["hold"]) for v in json.loads(told.out)["reboot"]} == {
            ("arc-0", "missing"), ("arc-rt", "cannot-be-made")}
        pools = {p["pool"]: p for p in json.loads(told.out)["tonight"]}
        generic, rt = pools["debian12 6.1 generic-amd64"], pools["debian12 6.1 rt-amd64"]
        assert (generic["nodes"], generic["next"], generic["suite"]) == (["arc-0"], "6.1.0-57-amd64",
                                                                          "bookworm-security")
        (image,) = generic["images"]
        assert image["tag"] == tag("6.1.0-57-amd64") and image["in_ledger"] is False
        assert image["state"].startswith("missing; image building: Job "), image  # the controller's, not "build it"
        (refusal,) = rt["images"]
        assert refusal["state"].startswith("cannot be made: ") and "PREEMPT_RT" in refusal["state"], refusal
        table = run_cli("status", "-l", "kubernetes.io/hostname=arc-0", "--tonight", env={
            **blab.env, **archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")})
        assert "tonight (what Debian's archive installs next, per pool):" in table.out, table.out
        assert "debian12 6.1 generic-amd64 (1 node): 6.1.0-57-amd64 next (bookworm-security, first read here " \
               in table.out and f"{tag('6.1.0-57-amd64')} not judged (no ledger read)" in table.out, table.out
        assert table.code == 1 and "held (unjudged)" in table.out, table.out
    finally:
        ctl.stop()


def test_a_node_already_on_the_next_kernel_leaves_every_other_held_until_its_image_is_judged(blab, tmp_path, serve):
    """Review 6's H1, in the lab with the real controller reading the lab's own signed archive: pool-a still runs
    6.1.0-53, pool-b already runs the next kernel the archive names (6.1.0-57). The ledger holds, under 6.1.0-57's
    tag, an image with no labels (present, but nothing says what it was built for, and its modules were never
    checked): both nodes are held, as plan calls that image wrong; the controller, `status --tonight`, `plan --kernel
    next` and `why --tonight` say so alike. Once the right image replaces it, both may reboot."""
    from gpualign.ledger.references import RegistryRef
    from gpualign.ledger.registry import RegistryClient
    from tests.support.local_suite import LocalArchive

    with LocalArchive(tmp_path / "archive") as archive:
        archive.publish_recorded("bookworm", "amd64")
        server = serve_directory(serve, archive.root)
        env = {**blab.env, **archive.env(server.url), "GPUALIGN_CACHE": str(tmp_path / "cache")}
        nxt = tag("6.1.0-57-amd64")
        with RegistryClient(RegistryRef(host=blab.registry, repo="nvidia/driver", scheme="http")) as client:
            client.push_image(nxt, {"DRIVER_VERSION": "535.261.03"})  # no labels
        assert blab.cli("lab", "push-image", tag("6.1.0-53-amd64")).code == 0
        add(blab, "pool-a", "6.1.0-53-amd64")
        add(blab, "pool-b", "6.1.0-57-amd64")
        ctl = Controller(blab, "--driver-branch", "535", "--build", "--build-image", f"{blab.registry}/gpualign:t",
                         "--build-namespace", NS, "--build-pod-settings", settings_file(tmp_path),
                         "--archive-poll-seconds", "2", "--ledger-refresh", "2", identity="pool", env=env)
        try:
            for node in ("pool-a", "pool-b"):
                held = f'hold="unjudged",kernel="6.1.0-57-amd64",node="{node}",tag="{nxt}"'
                wait_for(lambda held=held: ctl.metric("gpualign_node_reboot_held", held), timeout=60,
                         what=f"{node} held for the unlabelled image ({_reboot_lines(ctl)})")
            assert ctl.metric("gpualign_archive_read_timestamp_seconds") > 0
            selector = "kubernetes.io/hostname in (pool-a,pool-b)"
            ledger = f"registry://{blab.registry}/nvidia/driver"
            told = run_cli("status", "-l", selector, "--tonight", "--ledger", ledger, "-o", "json", env=env)
            assert told.code == 1, told.err
            assert {(v["node"], v["hold"], v["kernel"]) for v in json.loads(told.out)["reboot"]} == {
                ("pool-a", "unjudged", "6.1.0-57-amd64"), ("pool-b", "unjudged", "6.1.0-57-amd64")}
            planned = run_cli("plan", "-l", selector, "--kernel", "next", "--ledger", ledger, "-o", "json", env=env)
            assert {(v["node"], v["hold"]) for v in json.loads(planned.out)["reboot"]} == {
                ("pool-a", "unjudged"), ("pool-b", "unjudged")}, planned.out
            why = run_cli("why", "pool-a", "--tonight", "--ledger", ledger, env=env)
            assert why.code == 1 and "tonight: boots 6.1.0-57-amd64 next (Debian's archive): held (unjudged)" in why.out
            # the right image lands: every node of the pool may reboot
            assert blab.cli("lab", "push-image", nxt).code == 0
            for node in ("pool-a", "pool-b"):
                ready = f'kernel="6.1.0-57-amd64",node="{node}",tag="{nxt}"'
                wait_for(lambda ready=ready: ctl.metric("gpualign_node_reboot_ready", ready) == 1.0, timeout=60,
                         what=f"{node} released once the image is judged")
            told = run_cli("status", "-l", selector, "--tonight", "--ledger", ledger, "-o", "json", env=env)
            assert told.code == 0 and all(v["ready"] for v in json.loads(told.out)["reboot"]), told.out
        finally:
            ctl.stop()
            for node in ("pool-a", "pool-b"):
                blab.kubectl("delete", "node", node, "--wait=false")


def _reboot_lines(ctl: Controller) -> str:
    """The gate's gauges as the controller serves them now, for a failure's message."""
    return "; ".join(line for line in ctl.get("/metrics").splitlines()
                     if line.startswith(("gpualign_node_reboot", "gpualign_archive_read")))
