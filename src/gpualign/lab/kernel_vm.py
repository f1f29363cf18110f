"""The lab's driver pods for images holding real modules, judged by the real kernel: the image's nvidia.ko loaded into
its node's own Debian kernel, booted in a VM (gpualign.judging.kernel_boot), after the offline checks passed
(lab/kernel_load.py). A Secure Boot node's enrolled certificates are trusted as its MOK list.

A boot takes 10 to 50 s, so it runs in one worker beside the simulator's loop, and the pod waits meanwhile as a
driver container waits while it loads its module. A kernel's verdict on the same nvidia.ko, with the same trust, does
not change: verdicts are kept by the module's bytes, the kernel and the certificates (kernel_boot.kept_verdict), so
the boot `ensure` made before its push serves the pods of that image.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from gpualign.base.errors import GpualignError
from gpualign.judging import kernel_boot, secure_boot
from gpualign.judging.kernel_console import Load
from gpualign.model.kernels import Kernel


@dataclass(frozen=True)
class Booting:
    """The kernel has not decided yet: the pod waits (`done` is called once it has)."""

    message: str
    future: Future[Any]


@dataclass(frozen=True)
class Decided:
    loaded: bool
    message: str  # the kernel's words: its verdict line


Boot = Callable[..., Any]  # kernel_boot.boot_and_load's shape


class KernelVM:
    def __init__(self, cache: Path | None = None, boot: Boot = kernel_boot.boot_and_load) -> None:
        self.cache = cache or kernel_boot.kernels_cache()
        self.boot = boot
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kernel-vm")  # one VM at a time: 2 cores
        self.running: dict[tuple[str, str, tuple[bytes, ...]], Future[Any]] = {}
        self.lock = threading.Lock()

    def decide(self, modules: Path, kernel: str, trusted: list[x509.Certificate] | None) -> Decided | Booting:
        trust = trust_for(kernel, trusted)
        kept = kernel_boot.kept_verdict(modules, kernel, self.cache, trust)
        if kept is not None:
            return Decided(bool(kept.get("ok")), str(kept.get("line") or ""))
        key = (str(modules), kernel, trust)
        with self.lock:
            future = self.running.get(key)
            if future is None:
                future = self.running[key] = self.pool.submit(self.boot, modules, kernel, self.cache, trust=trust)
        if not future.done():
            return Booting(f"loading the modules into Debian's kernel {kernel}, booted in a VM", future)
        error = future.exception()
        decided = Decided(False, f"the kernel load check could not boot {kernel}: "
                                 f"{error.message if isinstance(error, GpualignError) else error}") \
            if error is not None else Decided(future.result().ok, future.result().line())
        if error is not None or future.result().load is Load.UNFINISHED:
            with self.lock:  # no verdict (no VM, or one too slow on a busy machine): never a pass; boot again next
                self.running.pop(key, None)
        return decided


def trust_for(kernel: str, trusted: list[x509.Certificate] | None) -> tuple[bytes, ...]:
    """The certificates to boot under Secure Boot with (DER), for a Secure Boot node; else none."""
    if trusted is None or Kernel.of(kernel).arch_or_amd64 not in secure_boot.FIRMWARE:
        return ()
    return tuple(c.public_bytes(Encoding.DER) for c in trusted)
