"""Debian's archive, through a private apt state under the cache (the machine's own apt sources are left alone:
they often list `main` only, and NVIDIA's module source is in `non-free`/`contrib`).

An archive is read for one target architecture: the kernels' (`kubernetes.io/arch`, Go's spelling, which Debian's
matches for amd64 and arm64). On a builder of another architecture it is read for both: the builder's own packages
(the cross compiler, kbuild's host programs) and the target's (its headers, its module source, its user space),
each target package named NAME:ARCH (`target_versions`, `download`).

It answers: is there a headers package for this kernel, which NVIDIA module source version would a build get, and
it fetches one kernel's Module.symvers (from its headers package, without installing anything).
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from debian.deb822 import Deb822, PkgRelation

from gpualign.base.errors import BadInput, GpualignError
from gpualign.loaders import archive_reading
from gpualign.loaders.archive_reading import ensure_root
from gpualign.loaders.rules import load_rules
from gpualign.model.kernels import Kernel
from gpualign.model.makers import debian_suite, sources_from

if TYPE_CHECKING:
    from gpualign.model.makers import DebianTable, Source

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY = "http://deb.debian.org/debian-security"
# An air-gapped fleet's own Debian mirror (an internal mirror, apt-cacher-ng, a pull-through): the builds, their build
# roots, their images' user space and rendered recipes all read it. The security suites may live elsewhere.
MIRROR_ENV = "GPUALIGN_DEBIAN_MIRROR"
SECURITY_ENV = "GPUALIGN_DEBIAN_SECURITY_MIRROR"


def mirror_set() -> str:
    """$GPUALIGN_DEBIAN_MIRROR as set ("" when not): the one place it is read."""
    return (os.environ.get(MIRROR_ENV) or "").rstrip("/")


def configured_mirror() -> str:
    """Debian's archive as this machine reaches it: $GPUALIGN_DEBIAN_MIRROR, else deb.debian.org."""
    return mirror_set() or DEFAULT_MIRROR


def configured_security() -> str:
    """Debian's security archive: $GPUALIGN_DEBIAN_SECURITY_MIRROR, else the mirror's sibling when a mirror is set
    (MIRROR/../debian-security, as deb.debian.org lays them out), else deb.debian.org's."""
    security = os.environ.get(SECURITY_ENV)
    if security:
        return security.rstrip("/")
    mirror = mirror_set()
    return mirror.rsplit("/", 1)[0] + "/debian-security" if mirror else DEFAULT_SECURITY
COMPONENTS = "main contrib non-free non-free-firmware"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
REFRESH_SECONDS = 6 * 3600

# How Debian's lists are read by gpualign's private apt state and the build roots' mmdebstrap (not the driver
# image's base: mmdebstrap leaves its apt options in the tree it makes), whatever the host's apt.conf says: gzip
# before xz (the same lists, ~1 s less CPU on an empty disk: xz decompresses ~4x slower), kept uncompressed (apt
# then parses them without decompressing them again; a container image's apt.conf often says otherwise), no
# translations, and none of the AppStream metadata (DEP-11, ~7 MB for bookworm's main) that a host with appstream
# installed would fetch and gpualign never reads. gzip is a preference: a mirror without it is read in whatever it
# publishes.
LIST_OPTIONS = ("Acquire::CompressionTypes::Order::=gz", "Acquire::GzipIndexes=false", "Acquire::Languages=none",
                *(f"Acquire::IndexTargets::deb::{t}::DefaultEnabled=false"
                  for t in ("DEP-11", "DEP-11-icons-small", "DEP-11-icons", "DEP-11-icons-hidpi")))


def mmdebstrap_list_options() -> list[str]:
    """LIST_OPTIONS as mmdebstrap's --aptopt arguments (apt.conf lines)."""
    out = []
    for option in LIST_OPTIONS:
        name, value = option.split("=", 1)
        out.append(f'--aptopt={name} "{value}"')
    return out


class ArchiveError(GpualignError):
    """The archive could not be read (exit 2: ensure could not run)."""

    retryable = True


@contextmanager
def file_lock(name: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive lock shared by every process on this machine using the same cache (a tag's build, the apt
    state, the image base, one kernel's compile), so that runs and the images of one run (--jobs) never do the
    same work at once. on_wait: called once when another process holds it (to say what is awaited)."""
    path = ensure_root() / "locks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Debian's GNU type per architecture (as Kubernetes and Debian spell it): its multiarch library folder
# (/usr/lib/aarch64-linux-gnu) and its cross tools' prefix (aarch64-linux-gnu-gcc-12)
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def host_arch() -> str:
    """This machine's architecture as Debian and Kubernetes spell it (amd64, arm64)."""
    import platform

    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


_known_versions: dict[tuple[str, int], dict[str, str]] = {}  # (apt state, its lists' read time) -> versions
_known_lock = threading.Lock()


@dataclass(frozen=True)
class Archive:
    suite: str = "bookworm"
    mirror: str = field(default_factory=configured_mirror)
    security: str = field(default_factory=configured_security)
    arch: str = field(default_factory=host_arch)  # the target's: the kernels' and the image's

    @property
    def cross(self) -> bool:
        """The target is another architecture than this machine's: its modules are cross-compiled."""
        return self.arch != host_arch()

    def on_arch(self, arch: str | None) -> Archive:
        """This archive, read for another target architecture (None: unchanged)."""
        import dataclasses

        return self if arch is None or arch == self.arch else dataclasses.replace(self, arch=arch)

    def for_tag_kernel(self, os_tag: str, kernel: str) -> Archive:
        """The archive a tag's image is built from: its OS's release, its kernel's architecture."""
        return self.for_spec(os_tag).on_arch(Kernel.of(kernel).arch)

    def target(self, package: str) -> str:
        """A target package's name for apt: NAME:ARCH when cross-building, NAME otherwise."""
        return f"{package}:{self.arch}" if self.cross else package

    @classmethod
    def for_os(cls, os_tag: str) -> Archive:
        """The archive of the Debian release an OS tag names (debian13: trixie); bookworm otherwise."""
        return cls(suite=debian_suite(os_tag))

    @classmethod
    def for_kernel(cls, release: str) -> Archive:
        """The archive that carries a Debian kernel's headers: its `+debNN` names the release (6.12.N+deb13-amd64:
        trixie); bookworm's otherwise (6.1.0-N-amd64, 6.12.N+deb12-amd64)."""
        kernel = Kernel.of(release)
        built_for = kernel.built_for
        return (cls.for_os(f"debian{built_for}") if built_for else cls()).on_arch(kernel.arch)

    def for_spec(self, os_tag: str) -> Archive:
        """This archive, on the suite of an OS tag's release (the mirrors kept)."""
        import dataclasses

        other = Archive.for_os(os_tag)
        return self if other.suite == self.suite else dataclasses.replace(self, suite=other.suite)

    @property
    def key(self) -> str:
        """The name of this archive's apt state and build roots: the suite, and the architectures when cross."""
        return f"{self.suite}-{self.arch}" if self.cross else self.suite

    @property
    def suites(self) -> list[str]:
        return [self.suite, f"{self.suite}-updates", f"{self.suite}-security"]

    def source_lines(self, *, native: bool = False) -> list[str]:
        """native: this machine's architecture only (what mmdebstrap's build root takes from it)."""
        archs = f"arch={host_arch()},{self.arch} " if self.cross and not native else ""
        return [f"deb [{archs}signed-by={KEYRING}] {self.mirror} {self.suite} {COMPONENTS}",
                f"deb [{archs}signed-by={KEYRING}] {self.mirror} {self.suite}-updates {COMPONENTS}",
                f"deb [{archs}signed-by={KEYRING}] {self.security} {self.suite}-security {COMPONENTS}"]

    def describe(self) -> str:
        archs = f", {self.arch}" if self.cross else ""
        return f"{', '.join(self.suites)} ({COMPONENTS.replace(' ', ', ')}{archs}) at {self.mirror}"

    # -- the private apt state ----------------------------------------------------------------------------------
    @property
    def state(self) -> Path:
        return ensure_root() / "apt" / self.key

    def _apt_opts(self) -> list[str]:
        s = self.state
        archs = ["-o", f"APT::Architectures::={host_arch()}", "-o", f"APT::Architectures::={self.arch}"] \
            if self.cross else []
        return [*archs, "-o", f"Dir::Etc::SourceList={s / 'sources.list'}", "-o", "Dir::Etc::SourceParts=-",
                "-o", f"Dir::State::Lists={s / 'lists'}", "-o", f"Dir::Cache={s / 'cache'}",
                "-o", f"Dir::State::status={s / 'status'}", "-o", "Debug::NoLocking=1",
                # the package cache kept beside the lists (a host's apt.conf may set it to "", as container images
                # do): apt-cache then reads it (0.2 s) instead of building it from the lists on every call (0.8 s)
                "-o", f"Dir::Cache::pkgcache={s / 'cache' / 'pkgcache.bin'}",
                "-o", f"Dir::Cache::srcpkgcache={s / 'cache' / 'srcpkgcache.bin'}",
                "-o", "APT::Get::List-Cleanup=0", *(arg for option in LIST_OPTIONS for arg in ("-o", option))]

    def _apt(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["apt-get", *self._apt_opts(), *args], capture_output=True, text=True, cwd=cwd,
                              timeout=600)

    def download(self, packages: list[str], into: Path) -> subprocess.CompletedProcess[str]:
        """`apt-get download` of exact package versions (NAME=VERSION) into a directory."""
        self.update()
        return self._apt("download", *packages, cwd=into)

    def update(self, *, force: bool = False) -> None:
        stamp = self.state / "updated"
        if not force and stamp.exists() and time.time() - stamp.stat().st_mtime < REFRESH_SECONDS:
            return
        with file_lock(f"apt-{self.key}.lock"):
            if not force and stamp.exists() and time.time() - stamp.stat().st_mtime < REFRESH_SECONDS:
                return  # another image's update, done while this one waited
            self._update()

    def _update(self) -> None:
        s = self.state
        stamp = s / "updated"
        for d in ("lists/partial", "cache/archives/partial"):
            (s / d).mkdir(parents=True, exist_ok=True)
        (s / "sources.list").write_text("\n".join(self.source_lines()) + "\n")
        (s / "status").touch()
        res = self._apt("update")
        if res.returncode != 0:
            raise ArchiveError(f"reading Debian's archive ({self.describe()}) failed: "
                               f"{(res.stderr.strip().splitlines() or ['apt-get update failed'])[-1]}")
        stamp.touch()

    def _versions(self, packages: list[str]) -> dict[str, str]:
        """package -> candidate version, for those the lists know, in one apt-cache call (it names the others on
        stderr and exits 0), remembered in this process until the lists are read again (a build asks for its
        module source's and headers' versions several times, ~0.25 s a call). Under a lock: apt-cache may write its
        package cache."""
        stamp = self.state / "updated"
        lists = (str(self.state), stamp.stat().st_mtime_ns if stamp.exists() else 0)
        with _known_lock:
            known = _known_versions.setdefault(lists, {})
            if all(p in known for p in packages):
                return {p: known[p] for p in packages}
        found = self._ask_versions(packages)
        with _known_lock:
            known.update(found)
        return found

    def _ask_versions(self, packages: list[str]) -> dict[str, str]:
        with file_lock(f"apt-cache-{self.key}.lock"):
            res = subprocess.run(["apt-cache", *self._apt_opts(), "show", "--no-all-versions", *packages],
                                 capture_output=True, text=True, timeout=60)
        found: dict[str, str] = {}
        for stanza in Deb822.iter_paragraphs(res.stdout):  # apt-cache show's records, as Debian's control files
            if stanza.get("Package") and stanza.get("Version"):
                found.setdefault(stanza["Package"], stanza["Version"])
        qualified = {p.partition(":")[0]: p for p in packages if ":" in p}  # Package: names no architecture
        return {qualified.get(p, p): v for p, v in found.items()}

    def versions_of(self, packages: list[str]) -> dict[str, str | None]:
        """Each package's candidate version, None where the archive has no such package (the lists are read again
        once first: a kernel published since the last read)."""
        self.update()
        found = self._versions(packages)
        if any(p not in found for p in packages):
            self.update(force=True)
            found = self._versions(packages)
        return {p: found.get(p) for p in packages}

    def version_of(self, package: str) -> str | None:
        """The candidate version of a package, or None when the archive has no such package."""
        return self.versions_of([package])[package]

    def target_versions(self, packages: list[str]) -> dict[str, str | None]:
        """versions_of for the target architecture's packages (headers, module source, user space), keyed by the
        names given."""
        found = self.versions_of([self.target(p) for p in packages])
        return {p: found[self.target(p)] for p in packages}

    def target_version(self, package: str) -> str | None:
        return self.target_versions([package])[package]

    def target_depends(self, package: str) -> list[str]:
        """A target package's dependencies, by name (the first of each alternative; versions and architectures
        dropped), as its candidate version states them."""
        self.update()
        with file_lock(f"apt-cache-{self.key}.lock"):
            res = subprocess.run(["apt-cache", *self._apt_opts(), "show", "--no-all-versions", self.target(package)],
                                 capture_output=True, text=True, timeout=60)
        stanza = next(iter(Deb822.iter_paragraphs(res.stdout)), Deb822())
        relations = PkgRelation.parse_relations(stanza.get("Depends", ""))
        return [alternatives[0]["name"] for alternatives in relations if alternatives]  # the first of each

    def require_headers(self, kernel: str) -> str:
        """The headers package for a kernel release, or BadInput naming the suites looked in (and the releases that
        a label spelling could stand for, where the archive has several)."""
        package = f"linux-headers-{kernel}"
        if self.target_version(package) is None:
            from gpualign.model.kernels import candidates

            label = Kernel.of(kernel).label
            near = candidates(label, self.headers_releases(label.split("_")[0]))
            also = f"; it has {', '.join(near)}" if near else ""
            raise BadInput(f"kernel {kernel}: no headers package {package} in Debian's archive (looked in "
                           f"{self.describe()}){also}")
        return package

    def headers_releases(self, prefix: str) -> list[str]:
        """The kernel releases whose headers the archive carries, starting with `prefix` (e.g. 6.12.), oldest
        first."""
        self.update()
        with file_lock(f"apt-cache-{self.key}.lock"):
            res = subprocess.run(["apt-cache", *self._apt_opts(), "pkgnames", f"linux-headers-{prefix}"],
                                 capture_output=True, text=True, timeout=60)
        releases = {line.strip().removeprefix("linux-headers-") for line in res.stdout.splitlines() if line.strip()}
        return sorted((r for r in releases if r[:1].isdigit() and "common" not in r),
                      key=lambda r: [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"(\d+)", r)])

    def carried(self) -> tuple[Source, ...]:
        """NVIDIA's kernel module source packages the suite carries now, at their NVIDIA versions; the reading is
        kept (gpualign.loaders.archive_reading) for check and plan to decide as ensure does."""
        self.update()
        with file_lock(f"apt-cache-{self.key}.lock"):
            res = subprocess.run(["apt-cache", *self._apt_opts(), "pkgnames", "nvidia"], capture_output=True,
                                 text=True, timeout=60)
        names = sorted(n.strip() for n in res.stdout.splitlines() if n.strip().endswith("-kernel-source"))
        versions = self._versions(names) if names else {}
        sources = sources_from(versions)
        if sources:
            archive_reading.write(self.suite, {s_.package: versions[s_.package] for s_ in sources}, self.arch,
                                  self.headers_releases(""))
        return sources

    def debian_table(self, os_tag: str) -> DebianTable:
        """The Debian releases gpualign builds, with the OS tag's release as its archive carries it now (the rules'
        copy where the archive cannot be read: the build then fails on the archive, naming it)."""
        table = load_rules().debian
        release = table.get(os_tag)
        if release is None:
            return table
        try:
            sources = self.for_spec(os_tag).carried()
        except (ArchiveError, OSError):  # unreachable, or no apt here (the build then names what is missing)
            return table
        return table.with_sources(os_tag, sources, f"Debian's archive ({release.suite})") if sources else table

    def module_source_version(self, open_flavour: bool = False) -> str:
        """NVIDIA's kernel module source version a build gets now, e.g. 535.261.03."""
        package = "nvidia-open-kernel-source" if open_flavour else "nvidia-kernel-source"
        version = self.target_version(package)
        if version is None:
            raise BadInput(f"{package} is not in Debian's archive ({self.describe()})")
        return version.split("-", 1)[0]

    def symvers(self, kernel: str) -> Path:
        """The kernel's Module.symvers, cached, from its headers package (downloaded, never installed)."""
        out = ensure_root() / "symvers" / kernel / "Module.symvers"
        if out.exists():
            return out
        with file_lock(f"symvers-{kernel}.lock"):  # one download, when a build's threads ask at once
            if not out.exists():
                self._read_symvers(kernel, out)
        return out

    def _read_symvers(self, kernel: str, out: Path) -> None:
        package = self.require_headers(kernel)
        with tempfile.TemporaryDirectory(prefix="gpualign-headers-") as tmp:
            res = self._apt("download", self.target(package), cwd=Path(tmp))
            debs = list(Path(tmp).glob("*.deb"))
            if res.returncode != 0 or not debs:
                raise ArchiveError(f"downloading {package} failed: "
                                   f"{(res.stderr.strip().splitlines() or ['no .deb'])[-1]}")
            tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(debs[0])], capture_output=True, timeout=300)
            if tar.returncode != 0:
                raise ArchiveError(f"reading {debs[0].name} failed: {tar.stderr.decode(errors='replace').strip()}")
            member = f"./usr/src/linux-headers-{kernel}/Module.symvers"
            with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as tf:
                try:
                    data = tf.extractfile(member)
                except KeyError:
                    data = None
                if data is None:
                    raise ArchiveError(f"{package} has no {member.lstrip('.')}")
                content = data.read()
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".Module.symvers.", dir=out.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(partial, out)
