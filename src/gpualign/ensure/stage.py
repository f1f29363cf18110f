"""What every stage of ensure shares: the options of a run, a build's modules, the refusals, and the checks and
preparations a build and a plan both make (the modules' load check against the tag's kernel, whether they are
the image's inputs made beside a compile). ensure.run plans and runs a tag through its stages;
ensure.build is the build stage."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.archive.apt import Archive, file_lock
from gpualign.base.errors import GpualignError, Refused
from gpualign.ensure import image, userspace
from gpualign.ensure.outcome import ModuleOrigin
from gpualign.judging import kmod, symvers
from gpualign.judging.verify import verify
from gpualign.model import driver_tag

if TYPE_CHECKING:  # the build's modules (pyelftools, cryptography, asn1crypto) load only when something is built
    from gpualign.ensure import sign
    from gpualign.ensure.ahead import Ahead
    from gpualign.ensure.lease import Leases
    from gpualign.judging.verify import Verification
    from gpualign.ledger.registry import RegistryClient


Say = Callable[[str, str], None]  # (tag, message)


class PresentButWrong(Refused):
    """A tag in the ledger whose image fails the check (exit 1); replaced only when asked to."""


class UpstreamNotVouched(Refused):
    """The upstream's image under a tag could not be vouched for (wrong, unverified, unlabelled, or not signed by
    the upstream's key): nothing is mirrored, so nothing of it is signed (exit 1)."""


class NotVerified(Refused):
    """The modules would not load on the kernel in the tag (exit 1; nothing was pushed)."""


@dataclass(frozen=True)
class Modules:
    """A build's modules."""

    files: list[Path]  # what the image gets: signed, when a key is given
    unsigned: list[Path]  # what is shared, once verified
    driver_version: str
    origin: ModuleOrigin
    kernel_load: dict[str, Any] | None = None  # the booted kernel's verdict on them, once asked (the image records it)


@dataclass(kw_only=True)
class Options:
    """How one tag is made (derived from a run's ensure.request.Request)."""

    target: RegistryClient
    upstream: RegistryClient | None = None
    dry_run: bool = False
    jobs: int = 2
    flavour: str = "proprietary"
    modules_from: Path | None = None  # verify and push these modules instead of compiling
    signing: sign.SigningKey | None = None  # sign every module for Secure Boot, and verify the signatures
    leases: Leases | None = None  # on a cluster: a Lease per tag, so runs on other machines never build it too
    together: tuple[str, ...] = ()  # the kernels this run builds: a new build root gets all their headers at once
    authfile: str | None = None
    archive: Archive = field(default_factory=Archive)
    check_present: str = "off"  # a present tag's modules are judged too: judge.OFF | STRICT (labels always)
    replace_wrong: bool = False  # a present tag that fails the check is made again and pushed over it
    share_pull: bool = True  # take modules another build compiled from the registry (ensure.shared), verified
    share_push: bool = True  # share the modules this build compiled, once verified
    ahead: Ahead | None = None  # the registry's modules and user space guessed and fetched while the archive is read
    cosign_key: Any = None  # signs what is pushed and what a build shares, as cosign signs; None: unsigned
    upstream_keys: tuple[Any, ...] = ()  # keys the upstream signs with (cosign's format): its signature checked first
    trusted: tuple[Any, ...] = ()  # keys what is taken from the ledger must be signed by (none: not checked)
    kernel_load: bool = True  # a build's modules loaded into their own kernel, booted in a VM, before the push


def tag_lock(tag: str) -> AbstractContextManager[None]:
    return file_lock(f"{tag}.lock")


def verify_modules(modules: list[Path], spec: driver_tag.TagSpec, driver_version: str, archive: Archive,
                   signing: sign.SigningKey | None = None) -> Verification:
    """The kernel's load checks against the tag's kernel (its Module.symvers from the archive); with a signing key,
    also the signature check of a Secure Boot kernel that holds that key's certificate."""
    table = symvers.parse(archive.symvers(spec.kernel).read_text(), f"Module.symvers of {spec.kernel}")
    read = [kmod.read_file(p) for p in modules]
    return verify(read, spec.kernel, table, driver_version, [signing.cert] if signing else None)


_inputs_started: set[str] = set()
_inputs_lock = threading.Lock()


def prepare_image_inputs(archive: Archive, driver_version: str) -> None:
    """Make what the image needs besides the modules in the background while the compile runs: the image's base and
    the user space at the modules' version (neither depends on the modules; assembly takes the same locks and waits
    for them, or makes them itself if this failed, and reports it). Called as a compile starts, once per run and
    driver version: not before, where it would contend with the build root for the archive, and not on a warm run,
    where the image assembled before is pushed again. On one kernel of 2 cores it moves ~10 s of downloading and
    unpacking off the path after the compile (docs/benchmarks.md, "ensure")."""
    with _inputs_lock:
        if f"{archive.key}/{driver_version}" in _inputs_started:
            return
        _inputs_started.add(f"{archive.key}/{driver_version}")

    def make() -> None:
        with contextlib.suppress(GpualignError):
            image.ensure_base(archive.suite, archive.arch)
        with contextlib.suppress(GpualignError):
            userspace.fetch(archive, driver_version)

    threading.Thread(target=make, name="ensure-image-inputs", daemon=True).start()


