"""`status` and `why`: where every node is in the upgrade, for how long, who cordoned it, and what blocks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpualign.base.labels import GATED
from gpualign.model.driver_pod_status import DriverPod
from gpualign.model.flavours import asked_by, explain
from gpualign.upgrade import states as S
from gpualign.upgrade.blockers import BlockKind, detail, kind_of
from gpualign.upgrade.clock import since
from gpualign.upgrade.observe import walked_by_gpualign
from gpualign.upgrade.snapshot import NodeState, Snapshot, image_tag


def duration(seconds: float) -> str:
    s = int(max(0, seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class NodeStatus:
    name: str
    state: str
    in_state_seconds: float | None
    cordoned: str  # no | upgrade | someone-else
    driver: str | None
    running_tag: str | None
    target_tag: str | None
    image_present: bool | None
    blocker: str | None
    blocked_seconds: float | None
    hold: str | None = None  # before-cordon (still schedulable) | after-cordon (cordoned, in the walk) | None
    walker: str | None = None  # gpualign | operator (the GPU Operator's upgrade controller) | None (not walking)
    gated: str | None = None  # the gate holds it out of the operator's walk: why
    no_driver: str | None = None  # its driver pod is not running (ImagePullBackOff, CrashLoopBackOff, none): why
    building: str | None = None  # its missing target image's build Job (controller --build), in one line
    # what kind of thing the blocker is (gpualign.upgrade.blockers.BlockKind), or NO_DRIVER when nothing holds the node
    # and its driver pod is simply not running
    blocker_kind: str | None = None
    gpu_taints: list[str] | None = None  # NVIDIA's DRA driver's health taints, each "DEVICE KEY=VALUE:EFFECT"

    @property
    def stuck(self) -> bool:
        """No running driver, or cordoned by the upgrade with something blocking it: a node that has lost its GPUs
        until someone acts (a hold before cordon is not: the node still serves)."""
        return bool(self.no_driver) or (self.cordoned == "upgrade" and bool(self.blocker)) or \
            self.state == S.FAILED

    def as_dict(self) -> dict[str, Any]:
        """For JSON: no state is null, and cordoned is a boolean, with who cordoned it beside it (the table shows
        "(none)" and "no")."""
        out = {**self.__dict__, "stuck": self.stuck}
        out["state"] = None if self.state == "(none)" else self.state
        out["cordoned"] = self.cordoned != "no"
        out["cordoned_by"] = None if self.cordoned == "no" else self.cordoned  # upgrade | someone-else
        return out


def cordoned_by(ns: NodeState) -> str:
    """The initial-state annotation says "true" when someone had cordoned the node before the walk. gpualign writes
    "false" otherwise; the operator writes nothing then, so absent also means the walk cordoned it."""
    if not ns.facts.unschedulable:
        return "no"
    initial = ns.annotations.get(S.INITIAL_UNSCHEDULABLE)
    if initial != "true" and ns.view.state in S.IN_PROGRESS:
        return "upgrade"
    return "someone-else"


NO_DRIVER = "no-driver"  # a NodeStatus's blocker_kind when nothing holds the node and its driver pod is not running

# builds' key when the build Jobs could not be read: what is known of every tag's build (build_trigger/jobs_api.py)
ANY_TAG = "*"


def walker(ns: NodeState) -> str | None:
    if ns.view.state in (S.UNKNOWN, S.DONE) and not ns.annotations.get(S.BLOCKER):
        return None
    return "gpualign" if walked_by_gpualign(ns.annotations) else "operator"


def node_status(ns: NodeState, *, ledger_known: bool, derived: str | None = None,
                builds: dict[str, str] | None = None) -> NodeStatus:
    """derived: the blocker read from the cluster for a node the GPU Operator walks (it writes none itself);
    builds: tag -> its build Job in one line (controller --build), for a target image that is missing."""
    ann = ns.annotations
    since_ts = ann.get(S.STATE_SINCE)
    gated = None
    if ns.view.skip and ann.get(GATED):
        gated = ann[GATED].replace("target image ", "image ").replace(" missing from the ledger", " missing")
    no_driver = None
    building = None
    if ledger_known and not ns.view.image_present:
        building = (builds or {}).get(ns.target_tag or "") or (builds or {}).get(ANY_TAG)
    elif not ledger_known:  # no ledger read: a build Job for the tag still says what is happening to it
        building = (builds or {}).get(ns.target_tag or "")
    if ns.pod is not None:
        dp = DriverPod.from_pod(ns.pod)
        if not dp.ready and dp.state not in ("Pending", "ContainerCreating", "PodInitializing"):
            no_driver = dp.trouble()
            if ledger_known and dp.tag == ns.target_tag and not ns.view.image_present:
                no_driver += f", missing from the ledger; {building}" if building else \
                    f", missing from the ledger: mirror or build it (gpualign ensure {dp.tag})"
            elif not ledger_known and building and dp.tag == ns.target_tag:
                no_driver += f"; {building}"
    held = f"held for maintenance by {ns.view.maintenance}" if ns.view.maintenance else None
    blocker = ann.get(S.BLOCKER) or derived or held or (f"gated: {gated}" if gated else None)
    hold = kind = None
    if blocker:
        hold = "after-cordon" if ns.view.state in S.IN_PROGRESS else "before-cordon"
        kind = str(kind_of(blocker, ann.get(S.BLOCKER_KIND)) if ann.get(S.BLOCKER) or derived else
                   BlockKind.MAINTENANCE if held else BlockKind.IMAGE_MISSING)  # else the gate holds it
    elif no_driver:  # nothing holds it: its driver is simply not running
        blocker, kind = f"no driver: {no_driver}", NO_DRIVER
    return NodeStatus(
        name=ns.name, state=ns.view.state or "(none)",
        in_state_seconds=since(since_ts) if since_ts else None,
        cordoned=cordoned_by(ns), driver=str(ns.facts.driver) if ns.facts.driver else None,
        running_tag=image_tag(ns.pod["spec"]["containers"][0]["image"]) if ns.pod else None,
        target_tag=ns.target_tag, image_present=ns.view.image_present if ledger_known else None,
        blocker=blocker, blocked_seconds=since(ann.get(S.BLOCKED_SINCE)) if blocker and ann.get(S.BLOCKED_SINCE)
        else None, hold=hold, walker=walker(ns), gated=gated, no_driver=no_driver, building=building, blocker_kind=kind,
        gpu_taints=list(ns.gpu_taints) or None)


def fleet_status(snap: Snapshot, *, ledger_known: bool, derived: dict[str, str] | None = None,
                 builds: dict[str, str] | None = None) -> dict[str, Any]:
    nodes = [node_status(ns, ledger_known=ledger_known, derived=(derived or {}).get(name), builds=builds)
             for name, ns in sorted(snap.nodes.items())]
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.state] = counts.get(n.state, 0) + 1
    order = {s: i for i, s in enumerate((*S.ORDER, S.FAILED, "(none)"))}
    return {"nodes": [n.as_dict() for n in nodes],
            "counts": dict(sorted(counts.items(), key=lambda kv: order.get(kv[0], 99))),
            "stuck": sum(1 for n in nodes if n.stuck), "gated": sum(1 for n in nodes if n.gated),
            "no_driver": sum(1 for n in nodes if n.no_driver),
            "gpu_tainted": sum(1 for n in nodes if n.gpu_taints)}


def why(ns: NodeState, *, ledger_known: bool, derived: str | None = None,
        builds: dict[str, str] | None = None) -> list[str]:
    """Plain words, most important first."""
    st = node_status(ns, ledger_known=ledger_known, derived=derived, builds=builds)
    lines: list[str] = []
    held = f" for {duration(st.in_state_seconds)}" if st.in_state_seconds is not None else ""
    by = {"operator": ", walked by the GPU Operator's upgrade controller", "gpualign": ", walked by gpualign"}
    if st.state == "(none)":
        lines.append(f"{ns.name} is not in an upgrade{by.get(st.walker or '', '')}.")
    else:
        lines.append(f"{ns.name} is in {st.state}{held}{by.get(st.walker or '', '')}.")
    if st.blocker:
        lasting = f", for {duration(st.blocked_seconds)}" if st.blocked_seconds is not None else ""
        if st.hold is None:
            lines.append(f"{st.blocker}{lasting}")
        elif st.hold == "before-cordon":
            reason = detail(st.blocker, BlockKind(st.blocker_kind or BlockKind.OTHER))
            lines.append(f"held before cordon (still schedulable, its pods untouched): {reason}{lasting}")
        else:
            lines.append(f"blocked after cordon: {st.blocker}{lasting}")
    if ns.view.skip:
        from gpualign.base.labels import ARMED, GATED

        gated = ns.annotations.get(GATED)
        who = (f"gpualign's gate set it: {gated}" if gated else
               "gpualign's gate set it, armed: it judges the node's image and PDBs when the operator asks to "
               "upgrade it" if ARMED in ns.annotations else "set by someone else: gpualign leaves it")
        lines.append(f"skipped: the node carries {S.SKIP_LABEL}=true ({who})")
    if st.no_driver and st.blocker_kind != NO_DRIVER:
        lines.append(f"no driver: {st.no_driver}")
    if ledger_known and ns.target_tag and not ns.view.image_present:
        walked = st.state not in ("(none)", S.DONE)
        lines.append(f"image {ns.target_tag} missing from the ledger" + (
            ": it is cordoned already, and its new driver cannot load until the image exists"
            if walked and st.cordoned != "no" else
            ": it will not be cordoned until it exists" if walked else
            ": an upgrade would hold this node before cordon until it exists"))
        if st.building:
            lines.append(st.building)
    elif not ledger_known and st.building and st.building not in (st.no_driver or ""):
        lines.append(st.building)  # no ledger read, yet the controller builds (or failed to build) its image
    if rule := ns.annotations.get(S.DEVICE_TAINT):
        lines.append(f"its GPUs are tainted NoSchedule by the upgrade (DeviceTaintRule {rule}), not the node: new "
                     "GPU claims are not allocated there while other pods keep scheduling; the rule is deleted when "
                     "the new driver is validated")
    if st.cordoned == "someone-else":
        lines.append("cordoned by someone else before the upgrade: gpualign will leave it cordoned")
    elif st.cordoned == "upgrade":
        lines.append("cordoned by the upgrade: it is uncordoned when the new driver is validated")
    if st.state == S.FAILED and st.walker == "operator":
        lines.append("the GPU Operator leaves upgrade-failed by itself once the node's driver pod is in sync and "
                     "Ready")
    if st.state == S.FAILED:
        lines.append(f"to retry: fix the cause, then `kubectl label node {ns.name} {S.STATE_LABEL}=upgrade-required "
                     "--overwrite`")
    if st.running_tag or st.target_tag:
        runs = "runs" if not st.no_driver else "is meant to run"
        lines.append(f"driver pod {runs} {st.running_tag or 'nothing'}; target {st.target_tag or 'unknown'}; "
                     f"loaded driver {st.driver or 'unknown'}")
        if (modules := modules_asked(ns, st.target_tag or st.running_tag)) is not None:
            lines.append(modules)
    if len(lines) == 1 and st.state in (S.DONE, "(none)") and not ns.view.needs_upgrade:
        lines.append("nothing to do: its driver pod already runs the target")
    return lines


def modules_asked(ns: NodeState, tag: str | None) -> str | None:
    """The kernel modules the node's driver pods load, as its DaemonSet asks (KERNEL_MODULE_TYPE, which the GPU
    Operator sets from kernelModuleType), decided as the driver container decides (gpualign.model.flavours); None
    when no DaemonSet governs the node."""
    if ns.pool is None:
        return None
    containers = ns.pool.obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    driver = next((c for c in containers if "driver" in str(c.get("name", ""))), containers[0] if containers else {})
    env = {str(e["name"]): str(e.get("value", "")) for e in driver.get("env") or [] if e.get("name")}
    branch = (tag or "").split("-", 1)[0]
    return f"kernel modules: {explain(asked_by(env), branch if branch.isdigit() else None)}, as its DaemonSet asks"
