"""The gate's writer (--gate-operator-upgrades): the GPU Operator's skip label on a node whose next driver image is
missing or wrong, lifted once it is usable; a warning Event when a hold grows old; the label removed when the gate
is off. What to write is decided by `gate.decide`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpualign.base.errors import GpualignError
from gpualign.controller import gate
from gpualign.controller.caches import Caches
from gpualign.controller.gate_release import release_node
from gpualign.controller.ledger_view import LedgerView
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

    def apply(self, facts: NodeFacts, finding: Finding, planned: tuple[str, str] | None) -> None:
        """Hold or release the node: the image gpualign expects from the operator's objects (known the moment they
        change), or the one its DaemonSet names (what it will pull)."""
        if not self.caches.current(facts.name):
            return  # the node's watch has not shown the last write yet: it re-checks the node when it does
        targets = [i for i in (finding.image, planned[1] if planned else None) if i]
        flavour = finding.module_type
        problems = [(i, why) for i in targets if (why := self.ledger.unusable(i, facts.arch, flavour))]
        missing = [i for i, _ in problems]
        patch = gate.decide(facts.labels, facts.annotations, image_missing=bool(missing),
                            target=missing[0] if missing else None, why=problems[0][1] if problems else "")
        if patch is None:
            if missing and facts.labels.get(S.SKIP_LABEL) == "true" and gate.GATED not in facts.annotations:
                log.info("node %s: its skip label was set by someone else; the gate leaves it", facts.name)
            elif missing and gate.GATED in facts.annotations:
                self._held_long(facts, missing[0])
            return
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}", {"metadata": patch})
            self.caches.wrote(node_obj)
            if missing:
                self.kube.event(node_obj, EVENT_GATED, f"held out of the GPU Operator's upgrade walk "
                                f"({S.SKIP_LABEL}=true): its target image {missing[0]} is {problems[0][1]}")
                log.warning("node %s gated: %s %s", facts.name, missing[0], problems[0][1])
            else:
                self.kube.event(node_obj, EVENT_UNGATED, "target driver image is in the ledger (and its labels "
                                "name this node's build): released to the GPU Operator's upgrade walk", warning=False)
                log.info("node %s released to the operator's walk", facts.name)
        except GpualignError as err:
            log.warning("node %s: gate: %s", facts.name, err.message)
            self.retry(facts.name)

    def overdue(self, nodes: Iterable[NodeFacts]) -> list[str]:
        """Nodes held longer than warn_after and not yet warned about (checked periodically: a hold changes nothing
        on the node, so no watch event would bring it back)."""
        return [f.name for f in nodes if f.annotations.get(gate.GATED) and not f.annotations.get(gate.HELD_WARNED)
                and since(f.annotations.get(gate.GATED_SINCE)) >= self.warn_after]

    def _held_long(self, facts: NodeFacts, image: str) -> None:
        """A hold older than warn_after: one warning Event per hold, so a forgotten hold becomes visible."""
        held = since(facts.annotations.get(gate.GATED_SINCE))
        if held < self.warn_after or facts.annotations.get(gate.HELD_WARNED):
            return
        try:
            node_obj = self.kube.patch(f"/api/v1/nodes/{facts.name}",
                                       {"metadata": {"annotations": {gate.HELD_WARNED: "true"}}})
            self.caches.wrote(node_obj)
            self.kube.event(node_obj, EVENT_HELD_LONG, f"held out of the GPU Operator's upgrade walk for "
                            f"{held / 3600:.1f} h: its target image {image} is still missing from the ledger "
                            "(mirror or build it: gpualign ensure)")
            log.warning("node %s: gated for %.1f h, image %s still missing", facts.name, held / 3600, image)
        except GpualignError as err:
            log.warning("node %s: gate warning: %s", facts.name, err.message)

    def release_if_held(self, facts: NodeFacts) -> None:
        """The gate is off (no --gate-operator-upgrades, or no operator to gate): a skip label it set earlier must
        not outlive it, or the operator would never upgrade that node again."""
        if gate.GATED not in facts.annotations:
            return
        try:
            if release_node(self.kube, facts.name, "the gate is off (the controller runs without "
                            "--gate-operator-upgrades)"):
                log.warning("node %s released: the gate is off, so its skip label (set by the gate) is removed",
                            facts.name)
        except GpualignError as err:
            log.warning("node %s: releasing the gate's label: %s", facts.name, err.message)
            self.retry(facts.name)
