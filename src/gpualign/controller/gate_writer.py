"""The gate's writer (--gate-operator-upgrades): the GPU Operator's skip label on every node it drives, lifted when
the operator asks to upgrade a node whose next driver image is judged right and whose GPU pods may leave; a warning
Event when a hold grows old; the label removed when the gate is off. Where each node goes is decided by
`gate.posture`, what to write by `gate.decide`, who may join the walk by `WalkAdmission`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpualign.base.errors import GpualignError
from gpualign.controller import gate
from gpualign.controller.caches import Caches
from gpualign.controller.gate_release import release_node
from gpualign.controller.ledger_view import LedgerView
from gpualign.controller.walk_admission import WalkAdmission
from gpualign.kube.client import Kube
from gpualign.model.audit import Finding
from gpualign.model.facts import NodeFacts
from gpualign.upgrade import states as S
from gpualign.upgrade.clock import since

log = logging.getLogger("gpualign.controller")

EVENT_GATED = "DriverUpgradeGated"
EVENT_UNGATED = "DriverUpgradeReleased"
EVENT_HELD_LONG = "DriverUpgradeGatedLong"


@dataclass
class GateWriter:
    kube: Kube
    caches: Caches  # told of each write, so a decision is never made again from a node that predates it
    ledger: LedgerView
    retry: Callable[[str], None]  # check this node again
    warn_after: float = 86400.0  # a hold older than this raises a warning Event (once per hold) and shows
    admission: WalkAdmission | None = None  # who may join the operator's walk now (PDBs, pods it would leave)

    def apply(self, facts: NodeFacts, finding: Finding, planned: tuple[str, str] | None) -> None:
        """Put the node where the gate wants it (gpualign.controller.gate): armed while no upgrade is asked of it,
        released into the operator's walk once its image is judged and its pods may leave, held otherwise. The
        image is the one gpualign expects from the operator's objects (known the moment they change), or the one
        its DaemonSet names (what it will pull); planned: that DaemonSet (namespace/name) and image, None when no
        driver DaemonSet of the operator's runs there."""
        if not self.caches.current(facts.name):
            return  # the node's watch has not shown the last write yet: it re-checks the node when it does
        targets = [i for i in (finding.image, planned[1] if planned else None) if i]
        problems = [(i, why) for i in targets if (why := self.ledger.unusable(i, facts.arch, finding.module_type))]
        image = f"target image {problems[0][0]} {problems[0][1]}" if problems else None
        labels, annotations = facts.labels, facts.annotations
        state = labels.get(S.STATE_LABEL, S.UNKNOWN)
        skip = labels.get(S.SKIP_LABEL) == "true"
        released = gate.RELEASED in annotations and not skip
        if skip and not gate.ours(annotations):
            if image:
                log.info("node %s: its skip label was set by someone else; the gate leaves it", facts.name)
            return
        asks = image is None and planned is not None and state == S.REQUIRED and not released
        if asks and self.admission is not None:
            with self.admission.turn():
                held = self.admission.hold(facts, planned[0].split("/", 1)[0] if planned else None)
                where = gate.posture(state, operator_node=True, image=None, walk=held.reason if held else None,
                                     released=False)
                wrote = self._write(facts, where, held.reason if held else "",
                                    str(held.hold or "other") if held else "", held.subject if held else "")
                if wrote and where is gate.Posture.RELEASED:
                    self.admission.admitted(facts.name)
        else:
            where = gate.posture(state, operator_node=planned is not None, image=image, walk=None, released=released)
            wrote = self._write(facts, where, image or "", gate.IMAGE if image else "")
        if not wrote and where is gate.Posture.HELD and gate.GATED in annotations:
            self._held_long(facts, annotations[gate.GATED], for_image=image is not None)

    def _write(self, facts: NodeFacts, where: gate.Posture, why: str, kind: str = "", pdb: str = "") -> bool:
        """Write the gate's decision on the node; True when something was written."""
        patch = gate.decide(facts.labels, facts.annotations, where, why, kind, pdb)
        if patch is None:
            return False
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}", {"metadata": patch})
            self.caches.wrote(node_obj)
        except GpualignError as err:
            log.warning("node %s: gate: %s", facts.name, err.message)
            self.retry(facts.name)
            return False
        was_held = gate.GATED in facts.annotations
        try:
            if where is gate.Posture.HELD and facts.annotations.get(gate.GATED) != why:
                self.kube.event(node_obj, EVENT_GATED, f"held out of the GPU Operator's upgrade walk "
                                f"({S.SKIP_LABEL}=true): {why}")
                log.warning("node %s gated: %s", facts.name, why)
            elif where is gate.Posture.RELEASED:
                self.kube.event(node_obj, EVENT_UNGATED, "let into the GPU Operator's upgrade walk: its target "
                                "driver image is in the ledger and judged right for its kernel, and its GPU pods may "
                                "leave as their PodDisruptionBudgets allow", warning=False)
                log.info("node %s let into the operator's walk", facts.name)
            elif where is gate.Posture.FREE and was_held:
                self.kube.event(node_obj, EVENT_UNGATED, "released: its target driver image is in the ledger and "
                                "judged right for its kernel", warning=False)
                log.info("node %s released", facts.name)
            elif where is gate.Posture.ARMED and was_held:
                self.kube.event(node_obj, EVENT_UNGATED, "no longer held: no driver upgrade is asked of it now "
                                "(the gate keeps the skip label until one is, and judges it then)", warning=False)
        except GpualignError as err:  # the Event is a courtesy; the label is the decision
            log.warning("node %s: gate event: %s", facts.name, err.message)
        return True

    def overdue(self, nodes: Iterable[NodeFacts]) -> list[str]:
        """Nodes held longer than warn_after and not yet warned about (checked periodically: a hold changes nothing
        on the node, so no watch event would bring it back)."""
        return [f.name for f in nodes if f.annotations.get(gate.GATED) and not f.annotations.get(gate.HELD_WARNED)
                and since(f.annotations.get(gate.GATED_SINCE)) >= self.warn_after]

    def _held_long(self, facts: NodeFacts, why: str, *, for_image: bool) -> None:
        """A hold older than warn_after: one warning Event per hold, so a forgotten hold becomes visible."""
        held = since(facts.annotations.get(gate.GATED_SINCE))
        if held < self.warn_after or facts.annotations.get(gate.HELD_WARNED):
            return
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}",
                                       {"metadata": {"annotations": {gate.HELD_WARNED: "true"}}})
            self.caches.wrote(node_obj)
            self.kube.event(node_obj, EVENT_HELD_LONG, f"held out of the GPU Operator's upgrade walk for "
                            f"{held / 3600:.1f} h: {why}" + (" (mirror or build it: gpualign ensure)"
                                                            if for_image else ""))
            log.warning("node %s: gated for %.1f h: %s", facts.name, held / 3600, why)
        except GpualignError as err:
            log.warning("node %s: gate warning: %s", facts.name, err.message)

    def release_if_held(self, facts: NodeFacts) -> None:
        """The gate is off (no --gate-operator-upgrades, or no operator to gate): a skip label it set earlier must
        not outlive it, or the operator would never upgrade that node again."""
        if not any(mark in facts.annotations for mark in gate.MARKS):
            return
        try:
            if release_node(self.kube, facts.name, "the gate is off (the controller runs without "
                            "--gate-operator-upgrades)"):
                log.warning("node %s released: the gate is off, so its skip label (set by the gate) is removed",
                            facts.name)
        except GpualignError as err:
            log.warning("node %s: releasing the gate's label: %s", facts.name, err.message)
            self.retry(facts.name)
