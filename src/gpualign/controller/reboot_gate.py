"""The reboot gate, per node: whether each GPU node may reboot tonight (gpualign.model.reboot_gate, the judgement
`status --tonight`, `plan --kernel next` and `why --tonight` make), kept for the metrics kured's alert filter reads.

A node is judged again after each check of it (its labels, its driver pod, the ledger), after each read of Debian's
archive, and when the ledger changes. What it boots next: its own gpualign.io/kernel.next, else (where the archive is
watched) what the archive installs next on its line, else the kernel it runs. A Debian node whose line the archive
was not read for (the archive unreachable, or not read yet) is held. The image is the one the node's own check would
name on that kernel, judged as check judges it (present, wrong, unsigned)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpualign.base import labels as L
from gpualign.controller.node_finding import NodeFinding
from gpualign.model.facts import NodeFacts
from gpualign.model.kernels import Kernel
from gpualign.model.reboot_gate import (
    BootSource,
    ImageVerdict,
    RebootVerdict,
    image_of_finding,
    next_boot,
    reboot_verdict,
)
from gpualign.usecases.archive_next import Tonight


class ArchiveReading(Protocol):
    def reading(self) -> tuple[Tonight | None, str | None]: ...


@dataclass
class RebootGate:
    node: Callable[[str], NodeFacts | None]  # a GPU node's facts now (the controller's cache), None when gone
    names: Callable[[], list[str]]  # every GPU node
    current: Callable[[str], NodeFinding | None]  # its finding on the kernel it runs
    ahead: Callable[[str], NodeFinding | None]  # its finding on its announced kernel.next / os.next
    future: Callable[[NodeFacts, str], NodeFinding]  # its finding on another kernel (its NFD label)
    unjudged: Callable[[str], str | None] = lambda _image: None  # why a present image could not be judged
    archive: ArchiveReading | None = None  # Debian's archive, where it is watched
    verdicts: dict[str, RebootVerdict] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def judge(self, name: str) -> None:
        facts = self.node(name)
        verdict = self._verdict(facts) if facts is not None else None
        with self.lock:
            if verdict is None:
                self.verdicts.pop(name, None)
            else:
                self.verdicts[name] = verdict

    def judge_all(self) -> None:
        names = set(self.names())
        for name in names:
            self.judge(name)
        with self.lock:
            for gone in set(self.verdicts) - names:
                del self.verdicts[gone]

    def forget(self, name: str) -> None:
        with self.lock:
            self.verdicts.pop(name, None)

    def snapshot(self) -> list[RebootVerdict]:
        with self.lock:
            return [self.verdicts[n] for n in sorted(self.verdicts)]

    def _verdict(self, facts: NodeFacts) -> RebootVerdict | None:
        archive, error = self.archive.reading() if self.archive is not None else (None, None)
        boot = next_boot(facts.kernel, facts.labels.get(L.KERNEL_NEXT),
                         archive.kernels.get(facts.name) if archive is not None else None,
                         (archive.unknown.get(facts.name) if archive is not None else None) or
                         (f"Debian's archive not read: {error}" if error else None),
                         debian=self.archive is not None and facts.os_id == "debian")
        if boot.kernel is None:
            return reboot_verdict(facts.name, boot, ImageVerdict.unnamed(boot.unknown))
        if boot.source is BootSource.RUNNING:
            finding = self.current(facts.name)
        elif boot.source is BootSource.LABEL:
            finding = self.ahead(facts.name) or self.future(facts, Kernel.of(boot.kernel).label)
        else:
            finding = self.future(facts, Kernel.of(boot.kernel).label)
        if finding is None:  # not checked yet: nothing judged it
            return reboot_verdict(facts.name, boot, ImageVerdict.unnamed("not checked yet"))
        image = image_of_finding(finding)
        if image is not None and image.in_ledger and not image.wrong and finding.image and \
                (why := self.unjudged(finding.image)):
            image = ImageVerdict(image.tag, True, why)
        return reboot_verdict(facts.name, boot, image) if image is not None else None
