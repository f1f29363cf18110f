"""The build trigger's decisions (controller/build_trigger/decisions.py): one Job per tag, a cap, the join order,
backoff for transient failures, permanent ones held until something changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.controller.build_trigger import decisions as B
from gpualign.controller.build_trigger.decisions import BuildFailure as Failure
from gpualign.controller.build_trigger.decisions import BuildPhase as Phase
from gpualign.model.audit import Status
from tests.support.findings import node_finding

RECIPE = "gpualign 0.1.0"


def wanted(tag: str, since: float, *nodes: str) -> B.Wanted:
    return B.Wanted(tag, "build", nodes or ("n-" + tag,), since)


def job(tag: str, phase: str, **kw: object) -> B.BuildJob:
    name = B.job_name(tag, int(kw.get("attempt", 1)))  # type: ignore[call-overload]
    return B.BuildJob(name, tag, phase, recipe=str(kw.pop("recipe", RECIPE)), **kw)  # type: ignore[arg-type]


def test_ten_nodes_on_one_kernel_make_one_job():
    d = B.decide([wanted("535-6.1.0-50-amd64-debian12", 1.0, *(f"n{i}" for i in range(10)))], [], cap=2, now=10,
                 recipe=RECIPE)
    assert [(w.tag, a) for w, a in d.create] == [("535-6.1.0-50-amd64-debian12", 1)]


def test_a_running_job_is_adopted_never_doubled():
    tag = "535-6.1.0-50-amd64-debian12"
    d = B.decide([wanted(tag, 1.0)], [job(tag, Phase.RUNNING)], cap=2, now=10, recipe=RECIPE)
    assert d.create == () and d.running == (tag,)


def test_the_cap_queues_the_rest_in_the_order_their_nodes_began_to_wait():
    ws = [wanted("t-c", 3.0), wanted("t-a", 1.0), wanted("t-b", 2.0)]
    d = B.decide(ws, [], cap=1, now=10, recipe=RECIPE)
    assert [w.tag for w, _ in d.create] == ["t-a"] and d.queued == ("t-b", "t-c")
    d = B.decide(ws, [job("t-a", Phase.RUNNING)], cap=2, now=10, recipe=RECIPE)
    assert [w.tag for w, _ in d.create] == ["t-b"] and d.queued == ("t-c",)


def test_a_transient_failure_is_retried_after_a_doubling_backoff():
    failed = job("t", Phase.FAILED, finished=100.0, failure=Failure.TRANSIENT, attempt=2, reason="registry: 503")
    early = B.decide([wanted("t", 1.0)], [failed], cap=1, now=150, recipe=RECIPE, backoff=30)
    assert early.create == () and early.backing_off == (("t", 160.0),)  # attempt 2: 60 s after it failed
    due = B.decide([wanted("t", 1.0)], [failed], cap=1, now=160, recipe=RECIPE, backoff=30)
    assert [(w.tag, a) for w, a in due.create] == [("t", 3)] and due.stale == ()  # attempt 2 stays, with its log
    assert B.backoff_for(10, 30, 1800) == 1800  # capped


def test_a_permanent_failure_is_held_until_a_retry_or_a_new_recipe():
    failed = job("t", Phase.FAILED, finished=100.0, failure=Failure.PERMANENT, reason="no linux-headers-6.1.0-99-amd64")
    held = B.decide([wanted("t", 1.0)], [failed], cap=1, now=1e9, recipe=RECIPE)
    assert held.create == () and held.held == (("t", "no linux-headers-6.1.0-99-amd64"),)
    asked = B.BuildJob(failed.name, "t", Phase.FAILED, 1, RECIPE, 100.0, Failure.PERMANENT, failed.reason,
                       retry_asked=200.0)
    assert [w.tag for w, _ in B.decide([wanted("t", 1.0)], [asked], cap=1, now=201, recipe=RECIPE).create] == ["t"]
    newer = B.decide([wanted("t", 1.0)], [failed], cap=1, now=101, recipe="gpualign 0.2.0")
    assert [w.tag for w, _ in newer.create] == ["t"]
    old_ask = B.BuildJob(failed.name, "t", Phase.FAILED, 1, RECIPE, 100.0, Failure.PERMANENT, failed.reason,
                         retry_asked=50.0)
    assert B.decide([wanted("t", 1.0)], [old_ask], cap=1, now=201, recipe=RECIPE).create == ()  # asked before


def test_finished_jobs_nobody_waits_for_go_after_their_keep_time():
    old = job("t", Phase.FAILED, finished=0.0, failure=Failure.PERMANENT)
    assert B.decide([], [old], cap=1, now=100, recipe=RECIPE, keep_failed=1000).stale == ()
    assert B.decide([], [old], cap=1, now=2000, recipe=RECIPE, keep_failed=1000).stale == (old.name,)


def test_job_names_are_kubernetes_names_and_distinct():
    long_a = "580-" + "x" * 80 + "-a-ubuntu22.04"
    long_b = "580-" + "x" * 80 + "-b-ubuntu22.04"
    for tag in ("535-6.1.0-50-amd64-debian12", long_a, "580-5.15.0-124-generic-ubuntu22.04"):
        for attempt in (1, 2, 17, 1000):
            name = B.job_name(tag, attempt)
            assert len(name) <= 63 and name == name.lower() and name[0].isalpha() and name[-1].isalnum()
        assert len({B.job_name(tag, a) for a in range(1, 50)}) == 49
    assert B.job_name(long_a) != B.job_name(long_b)
    assert B.job_name("535-6.1.0-50-amd64-debian12") == "gpualign-build-535-6-1-0-50-amd64-debian12-" + \
        B.job_name("535-6.1.0-50-amd64-debian12")[-8:]  # the first attempt's name is the tag's, as before


def test_a_retry_keeps_earlier_attempts_for_their_keep_time_and_at_most_keep_attempts_of_them():
    """The review's #7: each retry deleted the attempt before it, and its log with it, within ~30 s."""
    def failed(attempt: int, finished: float) -> B.BuildJob:
        return job("t", Phase.FAILED, finished=finished, failure=Failure.TRANSIENT, attempt=attempt, reason="503")

    history = [failed(1, 100.0), failed(2, 200.0), failed(3, 300.0), failed(4, 400.0)]
    d = B.decide([wanted("t", 1.0)], history, cap=1, now=10_000, recipe=RECIPE, backoff=30, keep_failed=86400,
                 keep_attempts=3)
    assert [(w.tag, a) for w, a in d.create] == [("t", 5)]  # counted on from the newest attempt
    assert d.stale == (history[0].name,)  # beyond the newest three
    aged = B.decide([wanted("t", 1.0)], history, cap=1, now=350.0 + 86400, recipe=RECIPE, keep_attempts=9)
    assert sorted(aged.stale) == sorted(j.name for j in history[:3])  # past the keep time; not the newest
    gone = B.decide([], history, cap=1, now=1e9, recipe=RECIPE, keep_attempts=9)
    assert sorted(gone.stale) == sorted(j.name for j in history)  # nobody waits: all go after their keep time
    running = [*history[:3], job("t", Phase.RUNNING, attempt=4)]
    assert B.decide([wanted("t", 1.0)], running, cap=1, now=1e9, recipe=RECIPE).running == ("t",)


tags = st.sampled_from([f"t{i}" for i in range(6)])
phases = st.sampled_from([Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED])


@given(st.lists(st.tuples(tags, st.floats(0, 100)), max_size=8, unique_by=lambda t: t[0]),
       st.lists(st.tuples(tags, phases, st.sampled_from([Failure.TRANSIENT, Failure.PERMANENT])), max_size=6,
                unique_by=lambda t: t[0]),
       st.integers(1, 4), st.floats(0, 5000))
def test_never_over_the_cap_never_two_jobs_for_a_tag(ws, js, cap, now):
    wants = [wanted(t, s) for t, s in ws]
    jobs = [job(t, p, finished=0.0 if p != Phase.RUNNING else None, failure=f if p == Phase.FAILED else None)
            for t, p, f in js]
    d = B.decide(wants, jobs, cap=cap, now=now, recipe=RECIPE)
    running = {j.tag for j in jobs if j.phase == Phase.RUNNING}
    created = [w.tag for w, _ in d.create]
    assert len(created) == len(set(created))
    assert not set(created) & running
    assert len(running) + len(created) <= max(cap, len(running))
    # every wanted tag is accounted for exactly once
    accounted = created + list(d.queued) + [t for t, _ in d.backing_off] + [t for t, _ in d.held] + \
        [w.tag for w in wants if w.tag in running]
    skipped = [w.tag for w in wants if w.tag not in accounted]
    assert all(any(j.tag == t and j.phase == Phase.SUCCEEDED for j in jobs) for t in skipped)
    # the oldest waiting tags are the ones created
    order = [w.tag for w in sorted(wants, key=lambda w: (w.since, w.tag))]
    if d.queued:
        assert all(order.index(c) < order.index(q) for c in created for q in d.queued)


def test_a_success_the_ledger_does_not_list_is_retried_after_a_growing_backoff_with_its_attempt_counted():
    """The review's loop: a Job that succeeded while the tag stays missing was made again every 30 s as attempt 1."""
    import dataclasses

    done = job("t", Phase.SUCCEEDED, finished=100.0, attempt=2)
    waiting = B.decide([wanted("t", 1.0)], [done], cap=1, now=10_000, recipe=RECIPE, backoff=30)
    assert waiting.create == ()  # not yet checked against a fresh ledger read: nothing is made
    unlisted = dataclasses.replace(done, unlisted=True)
    early = B.decide([wanted("t", 1.0)], [unlisted], cap=1, now=150, recipe=RECIPE, backoff=30)
    assert early.create == () and early.backing_off == (("t", 160.0),)  # attempt 2: 60 s
    due = B.decide([wanted("t", 1.0)], [unlisted], cap=1, now=160, recipe=RECIPE, backoff=30)
    assert [(w.tag, a) for w, a in due.create] == [("t", 3)] and due.stale == ()


def test_a_blocked_job_holds_its_place_under_the_cap_and_is_never_doubled():
    blocked = job("t-a", Phase.BLOCKED, reason="violates PodSecurity")
    d = B.decide([wanted("t-a", 1.0), wanted("t-b", 2.0)], [blocked], cap=1, now=10, recipe=RECIPE)
    assert d.create == () and d.queued == ("t-b",) and d.blocked == ("t-a",) and d.running == ()


@given(st.lists(st.tuples(st.sampled_from(["t1", "t2", "t3"]),
                          st.sampled_from([Phase.RUNNING, Phase.BLOCKED, Phase.SUCCEEDED, Phase.FAILED]), st.booleans(),
                          st.integers(1, 5)), max_size=3, unique_by=lambda x: x[0]),
       st.integers(1, 3), st.floats(0, 1e5))
def test_never_two_jobs_for_a_tag_nor_more_than_the_cap_and_attempts_only_grow(jobs, cap, now):
    made = [B.BuildJob(B.job_name(t), t, phase, attempt, RECIPE,
                       0.0 if phase in (Phase.SUCCEEDED, Phase.FAILED) else None,
                       Failure.TRANSIENT if phase == Phase.FAILED else None, "",
                       unlisted=unlisted and phase == Phase.SUCCEEDED)
            for t, phase, unlisted, attempt in jobs]
    d = B.decide([wanted(t, 1.0) for t in ("t1", "t2", "t3")], made, cap=cap, now=now, recipe=RECIPE)
    live = sum(1 for j in made if j.phase in (Phase.RUNNING, Phase.BLOCKED))
    assert len(d.create) <= max(0, cap - live)
    by = {j.tag: j for j in made}
    for w, attempt in d.create:
        old = by.get(w.tag)
        assert old is None or (old.phase not in (Phase.RUNNING, Phase.BLOCKED) and attempt == old.attempt + 1)
        assert old is None or B.job_name(w.tag, attempt) != old.name  # a Job of its own: the old one stays


class OneJob:
    """The trigger's Jobs API over one build Job: reads it, records what it would create, tells nothing."""

    def __init__(self, job: B.BuildJob) -> None:
        self.job = job
        self.made: list[str] = []

    def read(self) -> list[B.BuildJob]:
        return [self.job]

    def create(self, manifest: dict, _tag: str) -> bool:
        self.made.append(manifest["metadata"]["name"])
        return True

    def tell(self, *_a: object, **_k: object) -> None:
        pass


def test_a_pruned_image_is_made_again_at_once_and_a_never_pushed_one_keeps_its_backoff():
    """Review 5: an image built by a Job, listed, then pruned by a retention policy was never built again while
    the kept, Complete Job of attempt 1 stood beside the waiting node."""
    import dataclasses

    done = job("t", Phase.SUCCEEDED, finished=100.0, attempt=1)
    pruned = dataclasses.replace(done, pruned=True)
    d = B.decide([wanted("t", 1.0)], [pruned], cap=1, now=101, recipe=RECIPE, backoff=30)
    assert [(w.tag, a) for w, a in d.create] == [("t", 2)] and d.backing_off == ()
    queued = B.decide([wanted("u", 0.5), wanted("t", 1.0)], [pruned], cap=1, now=101, recipe=RECIPE, backoff=30)
    assert [w.tag for w, _ in queued.create] == ["u"] and queued.queued == ("t",)  # the cap holds
    never = dataclasses.replace(done, unlisted=True)
    held = B.decide([wanted("t", 1.0)], [never], cap=1, now=101, recipe=RECIPE, backoff=30)
    assert held.create == () and held.backing_off == (("t", 130.0),)


def test_the_trigger_tells_a_prune_from_a_lagging_ledger_view_and_from_a_success_never_pushed():
    """The interleaving that left a pruned image unbuilt: a success checked once against the ledger was trusted
    for ever; after the prune, the node's finding said missing and nothing was made."""
    from gpualign.controller.build_trigger import job as J
    from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger

    tag = "535-6.1.0-57-amd64-debian12"
    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver")
    missing = {"n1": node_finding(tag, image=f"reg/nvidia/driver:{tag}")}
    findings: dict = {}
    in_ledger = [True]
    built = job(tag, Phase.SUCCEEDED, finished=100.0, attempt=1)

    trigger = BuildTrigger(kube=None, options=BuildOptions(settings), findings=lambda: findings,  # type: ignore
                           listed=lambda _image: in_ledger[0])
    jobs = OneJob(built)
    trigger.api = jobs  # type: ignore[assignment]
    findings.update(missing)  # the controller's view lags the push: the fresh read lists it
    assert trigger.sync(now=101).create == () and jobs.made == []
    findings.clear()  # the view caught up: nobody waits
    assert trigger.sync(now=102).create == ()
    in_ledger[0] = False  # pruned; the view says missing again
    findings.update(missing)
    d = trigger.sync(now=103)
    assert [(w.tag, a) for w, a in d.create] == [(tag, 2)] and jobs.made == [B.job_name(tag, 2)]
    # a success never listed keeps its backoff
    fresh = BuildTrigger(kube=None, options=BuildOptions(settings), findings=lambda: missing,  # type: ignore
                         listed=lambda _image: False)
    fresh.api = OneJob(built)  # type: ignore[assignment]
    assert fresh.sync(now=101).create == () and fresh.jobs[tag].unlisted


@given(st.lists(st.tuples(st.sampled_from(["t1", "t2", "t3", "t4"]), st.floats(0, 100), st.booleans()),
                min_size=1, max_size=4, unique_by=lambda x: x[0]), st.integers(1, 3))
def test_a_node_waiting_now_always_goes_before_a_build_ahead(wants, cap):
    """However long the archive (or a node's kernel.next) has named an ahead kernel, a tag a node runs now is
    built first."""
    wanted_ = [B.Wanted(t, "build", ("n-" + t,), since, ahead=ahead) for t, since, ahead in wants]
    d = B.decide(wanted_, [], cap=cap, now=1000, recipe=RECIPE)
    created = [w.ahead for w, _ in d.create]
    queued_ahead = [next(w.ahead for w in wanted_ if w.tag == q) for q in d.queued]
    assert created == sorted(created)  # the waiting ones first
    if any(not a for a in queued_ahead):
        assert all(not a for a in created)  # a waiting node queued: no ahead build took its slot


def test_a_success_its_nodes_found_in_the_ledger_is_a_prune_when_it_goes_even_after_a_restart():
    """On the real node: the controller that saw the Job land was SIGKILLed; its successor only ever saw the tag
    present in its nodes' findings. A prune then must still be a prune (at once), not a push that never was."""
    from gpualign.controller.build_trigger import job as J
    from gpualign.controller.build_trigger.trigger import BuildOptions, BuildTrigger

    tag = "535-6.1.0-50-amd64-debian12"
    settings = J.BuildSettings(image="reg/gpualign-builder:1", ledger="registry://reg/nvidia/driver")
    findings = {"n1": node_finding(tag, Status.PRESENT, image=f"reg/nvidia/driver:{tag}")}
    built = job(tag, Phase.SUCCEEDED, finished=100.0, attempt=1)

    restarted = BuildTrigger(kube=None, options=BuildOptions(settings), findings=lambda: findings,  # type: ignore
                             listed=lambda _image: False)
    restarted.api = OneJob(built)  # type: ignore[assignment]
    assert restarted.sync(now=101).create == ()
    findings["n1"] = node_finding(tag, image=f"reg/nvidia/driver:{tag}")  # pruned: the view says missing
    d = restarted.sync(now=102)
    assert [(w.tag, a) for w, a in d.create] == [(tag, 2)] and restarted.jobs[tag].pruned
