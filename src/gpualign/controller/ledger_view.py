"""The ledger as the controller holds it: read again on a timer (and after a build says it pushed), and each present
image judged by its own labels once per read."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpualign.base.errors import GpualignError
from gpualign.ledger.sources import Ledger, RepoLedgers, is_registry
from gpualign.model.image_ref import ImageRef
from gpualign.model.ledger import Unverified
from gpualign.model.operator_config import OperatorConfig

log = logging.getLogger("gpualign.controller")

# (image, the node's CPU architecture, kernelModuleType) -> why it is present but wrong for such a node (its labels,
# its platforms, the flavour of its modules), or None
Judge = Callable[[str, str, str | None], str | None]


@dataclass
class LedgerView:
    load: Callable[[OperatorConfig | None], Ledger | RepoLedgers]  # as the operator's objects name it
    judge_image: Judge = lambda _i, _a, _m: None
    ledger: Ledger | RepoLedgers = field(default_factory=lambda: Ledger(frozenset(), ()))
    judged: dict[tuple[str, str, str | None], str | None] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)  # image -> why its labels could not be read last time
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self, operator: OperatorConfig | None) -> bool:
        """Read the ledger again (as `operator` names it); True when what it holds may have changed."""
        ledger = self.load(operator)
        changed = ledger.fingerprint != self.ledger.fingerprint or ledger.sources != self.ledger.sources
        with self.lock:
            self.ledger = ledger
            # a tag may have been pushed again (repaired, or broken) under the same name: judge every image anew
            was_wrong = any(self.judged.values())
            self.judged = {}
        return changed or was_wrong

    def has(self, image: str) -> bool:
        ref = ImageRef.parse(image)
        return self.ledger.for_repository(ref.name).has(ref.tag)

    def wrong(self, image: str, arch: str, module_type: str | None = None) -> str | None:
        """Why a present image is wrong by its own labels (asked of the registry once per image per ledger read),
        or None. Only registry ledgers are asked: a file names tags, not images to read."""
        if not any(is_registry(s) for s in self.ledger.sources) and not isinstance(self.ledger, RepoLedgers):
            return None
        key = (image, arch, module_type)
        with self.lock:
            if key in self.judged:
                return self.judged[key]
        try:
            why = self.judge_image(image, arch, module_type)
        except GpualignError as err:  # not cached: asked again at the next check; the reboot gate holds meanwhile
            log.warning("image %s: its labels could not be read: %s", image, err.message)
            with self.lock:
                self.unread[image] = err.message
            return None
        with self.lock:
            self.unread.pop(image, None)
        with self.lock:
            self.judged[key] = why
        if why:
            log.warning("driver image %s is present but wrong: %s", image, why)
        return why

    def unjudged(self, image: str) -> str | None:
        """Why a present image could not be judged at its last asking (its labels unreadable), or None."""
        with self.lock:
            why = self.unread.get(image)
        return Unverified(f"not judged: its labels could not be read ({why})") if why else None

    def unusable(self, image: str, arch: str, module_type: str | None) -> str | None:
        """Why the operator must not walk a node to this image (missing, or present but wrong), or None."""
        if not self.has(image):
            return "missing from the ledger"
        why = self.wrong(image, arch, module_type)
        return f"present but wrong ({why})" if why else None
