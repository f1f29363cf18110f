"""The views of Pods, Jobs and PDBs read what the API's objects say, field for field: over objects of every shape the
API server sends (fields absent, empty, or set; the operator's and kubectl's labels, annotations and owners), each
view answers what the object's own dict says. The dict readings here are the oracle: what a reader wrote before the
views, key by key."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpualign.controller.build_trigger import job as J
from gpualign.model.object_views import Job, MovablePod, Pod, PodDisruptionBudget, view
from gpualign.upgrade import pods as P
from gpualign.upgrade import states as S

words = st.sampled_from(["a", "train", "nvidia-driver", "app", "tier", "x"])
labels = st.dictionaries(st.sampled_from(["app", "tier", "job-name", "app.kubernetes.io/component",
                                          S.POD_DRAIN_SKIP]), st.sampled_from(["a", "true", "nvidia-driver", "x"]),
                         max_size=3)


def maybe(key: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """{key: value}, or {} (the API server leaves out what is unset)."""
    return st.one_of(st.just({}), value.map(lambda v: {key: v}))


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


owners = st.lists(merged(st.just({"apiVersion": "apps/v1", "uid": "u"}),
                         maybe("kind", st.sampled_from(["DaemonSet", "ReplicaSet", "Job", "StatefulSet"])),
                         maybe("name", words), maybe("controller", st.booleans())), max_size=2)
meta = merged(maybe("name", words), maybe("namespace", st.sampled_from(["ns", "gpu-operator", "other"])),
              maybe("labels", labels),
              maybe("annotations", st.dictionaries(st.sampled_from(["kubernetes.io/config.mirror", "note"]),
                                                   words, max_size=2)),
              maybe("ownerReferences", owners), maybe("deletionTimestamp", st.just("2026-12-05T10:00:00Z")),
              maybe("creationTimestamp", st.sampled_from(["2026-12-05T09:00:00Z", "2026-12-04T09:00:00Z"])))
volumes = st.lists(merged(maybe("name", words), st.sampled_from([{}, {"emptyDir": {}}, {"emptyDir": {"medium": ""}},
                                                                 {"hostPath": {"path": "/x"}}])), max_size=3)
terminated = merged(maybe("exitCode", st.integers(0, 255)), maybe("reason", words),
                    maybe("message", st.sampled_from(["", "boom\n", '{"message": "no headers", "word": "refused"}'])))
state = merged(maybe("terminated", terminated), maybe("waiting", merged(maybe("reason", st.just("ErrImagePull")))))
container_status = merged(maybe("name", words), maybe("state", state), maybe("lastState", state),
                          maybe("started", st.booleans()))
pods = merged(maybe("metadata", meta),
              maybe("spec", merged(maybe("volumes", volumes), maybe("nodeName", words))),
              maybe("status", merged(maybe("phase", st.sampled_from(["Running", "Pending", "Succeeded", "Failed"])),
                                     maybe("containerStatuses", st.lists(container_status, max_size=2)))))
conditions = st.lists(merged(maybe("type", st.sampled_from(["Complete", "Failed", "FailureTarget",
                                                            "SuccessCriteriaMet", "Suspended"])),
                             maybe("status", st.sampled_from(["True", "False"])),
                             maybe("lastTransitionTime", st.just("2026-12-05T10:05:00Z")),
                             maybe("reason", st.sampled_from(["DeadlineExceeded", "BackoffLimitExceeded"])),
                             maybe("message", words)), max_size=3)
jobs = merged(maybe("metadata", meta),
              maybe("status", merged(maybe("active", st.integers(0, 1)), maybe("conditions", conditions),
                                     maybe("completionTime", st.just("2026-12-05T10:04:00Z")),
                                     maybe("startTime", st.just("2026-12-05T10:00:00Z")))))
selectors = merged(maybe("matchLabels", labels),
                   maybe("matchExpressions", st.lists(merged(
                       st.fixed_dictionaries({"key": st.sampled_from(["app", "tier"]),
                                              "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"])}),
                       maybe("values", st.lists(st.sampled_from(["a", "x"]), max_size=2))), max_size=2)))
budgets = merged(maybe("metadata", meta), maybe("spec", maybe("selector", selectors)),
                 maybe("status", merged(maybe("currentHealthy", st.integers(0, 3)),
                                        maybe("desiredHealthy", st.integers(0, 3)),
                                        maybe("disruptionsAllowed", st.integers(0, 1)),
                                        maybe("disruptedPods", st.dictionaries(words, st.just("2026-12-05T10:00:00Z"),
                                                                               max_size=2)))))


def d(obj: dict[str, Any], *path: str) -> Any:
    for key in path:
        obj = (obj or {}).get(key) or {}
    return obj


@given(pods)
def test_the_walks_view_of_a_pod_reads_what_its_dict_says(pod):
    moved = view(pod, MovablePod)
    assert P.is_driver_pod(moved) == (d(pod, "metadata", "labels").get("app.kubernetes.io/component")
                                      == "nvidia-driver")
    assert P.is_daemonset_pod(moved) == any(o.get("kind") == "DaemonSet" for o in d(pod, "metadata")
                                            .get("ownerReferences") or [])
    assert P.has_controller(moved) == any(o.get("controller") for o in d(pod, "metadata").get("ownerReferences") or [])
    assert P.uses_empty_dir(moved) == any("emptyDir" in v for v in d(pod, "spec").get("volumes") or [])
    assert P.is_finished(moved) == (d(pod, "status").get("phase") in ("Succeeded", "Failed"))
    assert P.skip_drain(moved) == (d(pod, "metadata", "labels").get(S.POD_DRAIN_SKIP) == "true")
    assert bool(moved.metadata.deletion_timestamp) == bool(d(pod, "metadata").get("deletionTimestamp"))
    assert view(pod, Pod).metadata.labels == d(pod, "metadata", "labels")


@given(jobs, st.one_of(st.none(), pods))
def test_a_build_jobs_reading_follows_its_conditions_as_the_dict_says(job, pod):
    held = {c.get("type"): c for c in d(job, "status").get("conditions") or [] if c.get("status") == "True"}
    read = J.read_job(job, pod)
    assert J.is_done(job) == bool({"Complete", "SuccessCriteriaMet"} & held.keys())
    assert J.is_failed(job) == bool({"Failed", "FailureTarget"} & held.keys())
    assert read.phase == (J.BuildPhase.SUCCEEDED if J.is_done(job) else J.BuildPhase.FAILED if J.is_failed(job)
                          else J.BuildPhase.RUNNING)
    if read.phase == J.BuildPhase.FAILED and pod is not None:
        statuses = d(pod, "status").get("containerStatuses") or []
        told = [s for s in statuses if d(s, "state", "terminated") or d(s, "lastState", "terminated")]
        if not told:  # no container's word: the Job's own condition
            failed = held.get("Failed") or held.get("FailureTarget") or {}
            why = ": ".join(str(p) for p in (failed.get("reason"), failed.get("message")) if p)
            assert read.reason == (why or "the build Job failed")
    assert view(job, Job).metadata.name == d(job, "metadata").get("name", "")


@given(budgets, pods)
def test_a_pdb_guards_a_pod_and_is_worded_as_its_dict_says(pdb, pod):
    meta, pmeta = d(pdb, "metadata"), d(pod, "metadata")
    guards = P.pdbs_for(pod, [pdb])
    if meta.get("namespace") != pmeta.get("namespace") and (meta.get("namespace") or pmeta.get("namespace")):
        assert guards == []
    st_ = d(pdb, "status")
    words_ = P.pdb_numbers(pdb)
    assert words_.startswith(f"{st_.get('currentHealthy', '?')} healthy, {st_.get('desiredHealthy', '?')} required, "
                             f"{st_.get('disruptionsAllowed', '?')} disruptions allowed")
    assert ("still counts" in words_) == bool(st_.get("disruptedPods"))
    assert view(pdb, PodDisruptionBudget).metadata.namespace == meta.get("namespace", "")
