"""What a build on an empty disk will most likely take from the registry, fetched while Debian's archive is read.

A build Job starts with no apt lists. Reading them (about 2 s) names the NVIDIA version the archive carries, and only
then are the registry's shared modules (ensure.shared) and shared user space (ensure.shared_userspace) for that
version named, fetched and checked: about 2 s more before the kernel's checks can start. Almost always the registry
already holds them for the very version the archive is about to name: the newest on the tag's branch, which another
build shared. So, as the build starts and while the archive is read, this guesses from the registry's own tags:

- the newest shared modules for the tag's kernel and flavour on its branch, pulled into a scratch directory;
- the shared user space of that version for the tag's release and architecture (the newest pushed, when several
  package sets were shared), fetched and checked in its tree as ensure.compose checks it;
- the kernel's Module.symvers, read from its headers package as soon as the lists are there.

The build then takes a guess only where it is exactly what it would have fetched: the modules when their key (source
version, kernel, flavour) is the archive's, the user space when its tag (release, architecture, version and package
set) is the one the archive's packages name. Anything else is dropped, and the build fetches what the archive names,
as before. A guess skips no check: the modules taken are verified against the kernel's Module.symvers like any
others, and the user space went through the same checks as the build's own fetch. What is fetched ahead and not used
costs bandwidth only; a registry that cannot be listed makes no guess.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.ensure import compose, image, shared, shared_userspace
from gpualign.ensure.shared import Key
from gpualign.loaders.archive_reading import ensure_root

if TYPE_CHECKING:
    from gpualign.archive.apt import Archive
    from gpualign.ensure.remote_userspace import RemoteUserSpace
    from gpualign.ensure.shared import Key
    from gpualign.ledger.registry import RegistryClient
    from gpualign.model.driver_tag import TagSpec

Say = Callable[[str], None]
STALE_SECONDS = 86400.0  # a scratch directory this old was left by a run that was killed


def version_order(version: str) -> tuple[int, ...]:
    """535.309.01 → (535, 309, 1): NVIDIA's versions compared as numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def newest_modules(tags: list[str], branch: str, kernel: str, flavour: str) -> Key | None:
    """The shared modules' key among a repository's tags with the newest source version on `branch`, for this kernel
    and flavour; None when it has none."""
    suffix = Key("", kernel, flavour).tag  # "-<kernel>-<flavour>", as a tag spells it
    versions = [t.removesuffix(suffix) for t in tags if t.endswith(suffix)]
    versions = [v for v in versions if re.fullmatch(rf"{re.escape(branch)}(\.\d+)+", v)]
    if not versions:
        return None
    return Key(max(versions, key=version_order), kernel, flavour)


def userspace_candidates(tags: list[str], suite: str, arch: str, version: str) -> list[str]:
    """The shared user spaces' tags for a release, architecture and driver version (one per package set shared)."""
    return [t for t in tags if re.fullmatch(rf"{re.escape(f'{suite}-{arch}-{version}-')}[0-9a-f]{{12}}", t)]


@dataclass
class Ahead:
    """The guesses for one tag, each fetched in a thread of its own."""

    spec: TagSpec
    target: RegistryClient
    flavour: str
    say: Say
    scratch: Path = Path()
    trusted: tuple[Any, ...] = ()  # keys what is taken must be signed by (none: not checked)
    modules_key: Key | None = None  # the guess, once made
    modules: list[Path] | None = None  # pulled into scratch/modules, when the guess was
    modules_seconds: float = 0.0
    userspace_tag: str | None = None
    userspace: RemoteUserSpace | None = None
    userspace_seconds: float = 0.0
    _threads: dict[str, threading.Thread] = field(default_factory=dict)
    _guessed: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, spec: TagSpec, target: RegistryClient, flavour: str, archive: Archive, say: Say,
              trusted: tuple[Any, ...] = ()) -> Ahead:
        parent = ensure_root() / "ahead"
        parent.mkdir(parents=True, exist_ok=True)
        for left in parent.glob("build-*"):  # a run killed before it closed (a build takes minutes, not a day)
            with contextlib.suppress(OSError):
                if time.time() - left.stat().st_mtime > STALE_SECONDS:
                    shutil.rmtree(left, ignore_errors=True)
        ahead = cls(spec, target, flavour, say, Path(tempfile.mkdtemp(prefix="build-", dir=parent)), trusted)
        ahead._run(ahead._guess_and_pull, "modules")
        ahead._run(ahead._fetch_userspace, "userspace")
        ahead._run(lambda: archive.symvers(spec.kernel), "symvers")  # Archive.symvers: one download, whoever asks
        return ahead

    def _run(self, work: Callable[[], object], name: str) -> None:
        def guarded() -> None:
            # a guess that failed is no guess: the build then does the same work itself, and says what fails
            with contextlib.suppress(Exception):
                work()

        thread = threading.Thread(target=guarded, name=f"ensure-ahead-{name}", daemon=True)
        self._threads[name] = thread
        thread.start()

    def _guess_and_pull(self) -> None:
        try:
            tags = self.target.tags(shared.repository(self.target.ref.repo))
            self.modules_key = newest_modules(tags, self.spec.branch, self.spec.kernel, self.flavour)
        finally:
            self._guessed.set()
        if self.modules_key is None:
            return
        self.say(f"ahead: {shared.where(self.target, self.modules_key)} and its user space fetched while Debian's "
                 "archive is read (taken only if the archive names the same version)")
        t0 = time.monotonic()
        self.modules = shared.pull(self.target, self.modules_key, self.scratch / "modules", self.trusted)
        self.modules_seconds = time.monotonic() - t0

    def _fetch_userspace(self) -> None:
        self._guessed.wait()
        if self.modules_key is None:
            return
        suite, arch = image.suite_of(self.spec), image.arch_of(self.spec)
        repo = shared_userspace.repository(self.target.ref.repo)
        candidates = userspace_candidates(self.target.tags(repo), suite, arch, self.modules_key.version)
        if not candidates:
            return
        tag = max(candidates, key=lambda t: str((self.target.image_config(t, repo) or {}).get("created", "")))
        t0 = time.monotonic()
        remote = compose.fetch(self.target, repo, tag, arch, self.modules_key.version, self.trusted)
        if remote is None:
            return
        with self._lock:
            self.userspace_tag, self.userspace = tag, remote
            self.userspace_seconds = time.monotonic() - t0

    def take_modules(self, key: Key, into: Path) -> list[Path] | None:
        """The modules pulled ahead, moved into `into` (the module cache dir), when they are `key`'s; else None."""
        self._guessed.wait()
        if self.modules_key != key:
            return None  # another version: its pull is not waited for
        self._threads["modules"].join()
        if self.modules is None:
            return None

        with shared.staged(into, "ahead") as staging:
            for entry in (self.scratch / "modules").iterdir():
                os.link(entry, staging / entry.name)
        return sorted(into.glob("*.ko"))

    def take_userspace(self, tag: str) -> RemoteUserSpace | None:
        """The user space fetched and checked ahead, when it is `tag`'s (the caller closes it); else None."""
        self._threads["userspace"].join()
        with self._lock:
            if self.userspace is None or self.userspace_tag != tag:
                return None
            remote, self.userspace = self.userspace, None
            return remote

    def close(self) -> None:
        """Wait for the fetches, and drop what was not taken."""
        for thread in self._threads.values():
            thread.join()
        with self._lock:
            if self.userspace is not None:
                self.userspace.close()
                self.userspace = None
        shutil.rmtree(self.scratch, ignore_errors=True)
