"""The precompiled driver image, assembled with buildah and pushed only when whole.

A drop-in for NVIDIA's precompiled driver container, which the GPU Operator's DaemonSet runs unchanged
(`command: [nvidia-driver]`, `args: [init]`):
- `/usr/local/bin/nvidia-driver` (ensure/nvidia-driver.sh): NVIDIA's commands, environment, files and signals, plus
  gpualign's refusal to load on any kernel but the modules' own, in one line;
- the modules where modprobe finds them, `/lib/modules/<kernel>/kernel/drivers/video/`, `depmod` run for that
  kernel;
- NVIDIA's user space from Debian at the modules' exact version (ensure/userspace.py), its sonames in the image's
  ld.so.cache, checked after assembly: each library's version and `nvidia-smi -h`'s;
- `DRIVER_BRANCH`, `DRIVER_VERSION`, `KERNEL_VERSION` in the environment, NVIDIA's `version=<branch>-<kernel>`
  label, OCI labels and gpualign's.
The base is a minimal tree of the tag's Debian release (bookworm, trixie) from mmdebstrap, cached. Over it, one
layer holds the user space, nvidia-driver and the ld.so.cache: made once per release, user space and layout, and
shared by every kernel's image of that driver version (`userspace_image`). Each image adds its modules' layer, in a
mounted buildah container (so depmod runs on the image's own tree from the host), checked and committed once; a
registry that holds one kernel's image is sent only the next one's modules.

buildah pushes a tag only once every blob and the manifest are in place (the manifest PUT comes last), so a push
that fails leaves no tag half-made; the digest is read back from the registry afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpualign import __version__
from gpualign.archive.apt import file_lock, mirror_set
from gpualign.base.cache import cache_root as gpualign_cache
from gpualign.base.errors import BadInput, Refused
from gpualign.ensure import shared_userspace, userspace
from gpualign.ensure.buildroot import BuildError
from gpualign.judging import kmod
from gpualign.loaders.archive_reading import ensure_root
from gpualign.model.driver_tag import TagSpec
from gpualign.model.flavours import LABEL as FLAVOUR_LABEL
from gpualign.model.makers import debian_suite

if TYPE_CHECKING:
    from gpualign.ensure.remote_userspace import RemoteUserSpace

# The base: what nvidia-driver runs (sh, uname, sleep, grep, modprobe, flock, mount, findmnt), ldconfig for the
# image's ld.so.cache, nvidia-persistenced's libtirpc; unpacked, not installed (mmdebstrap's extract
# variant: a driver image is never upgraded in place, so no maintainer script needs to run). Each package's control
# data is kept in /var/lib/dpkg/status.d/<package>, as distroless images keep it, so image scanners still see every
# package and version. 30 MB, where minbase was 131 MB.
BASE_PACKAGES = ("dash", "coreutils", "kmod", "grep", "util-linux", "mount", "libc-bin", "libtirpc3")
BASE_HOOK = ('mkdir -p "$1"/var/lib/dpkg/status.d; for deb in "$1"/var/cache/apt/archives/*.deb; do '
             'p=$(dpkg-deb -f "$deb" Package); { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } '
             '> "$1/var/lib/dpkg/status.d/$p"; done; '
             'rm -rf "$1"/usr/share/man/* "$1"/usr/share/doc/* "$1"/usr/share/locale/* "$1"/usr/share/info/*')
BASE_KEY = hashlib.sha256(repr((BASE_PACKAGES, BASE_HOOK)).encode()).hexdigest()[:12]  # a new recipe, a new base
# Per Debian release: its own base (trixie renamed libtirpc3 in the 64-bit time_t transition), so the image's own
# programs (nvidia-persistenced, built by Debian) run on the C library they were built against.
RENAMED = {"trixie": {"libtirpc3": "libtirpc3t64"}}
# trixie's packages put every file under /usr and leave the merged-/usr links (/lib64 -> usr/lib64, where the ELF
# interpreter is looked for) to a full install: the extract variant makes them here.
MERGED_USR = ('for d in bin sbin lib lib64; do [ -e "$1/$d" ] || [ ! -d "$1/usr/$d" ] || ln -s "usr/$d" "$1/$d"; '
              'done; ')
EXTRA_HOOK = {"trixie": MERGED_USR}


def arch_of(spec: TagSpec) -> str:
    """The image's architecture: its kernel's (6.1.0-50-arm64: arm64), amd64 where the kernel names none."""
    return spec.kernel_value.arch_or_amd64


def base_key(suite: str) -> str:
    """What a release's base is made of (bookworm's is BASE_KEY, as before there were others)."""
    extra = EXTRA_HOOK.get(suite)
    if not extra and base_packages(suite) == BASE_PACKAGES:
        return BASE_KEY
    return hashlib.sha256(repr((base_packages(suite), extra, BASE_HOOK)).encode()).hexdigest()[:12]


def base_name(suite: str, arch: str = "amd64") -> str:
    return f"localhost/gpualign-driver-base:{suite}-{base_key(suite)}" + (f"-{arch}" if arch != "amd64" else "")


def base_packages(suite: str) -> tuple[str, ...]:
    return tuple(RENAMED.get(suite, {}).get(p, p) for p in BASE_PACKAGES)


def suite_of(spec: TagSpec) -> str:
    return debian_suite(spec.os_tag)


BASE = base_name("bookworm")
# The image's layout: an image assembled before under another is assembled again. The digest covers the
# nvidia-driver script and the user-space recipe.
ENTRYPOINT = ["nvidia-driver", "init"]
WORKDIR = "/drivers"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN_CONFIG = ("--entrypoint", json.dumps(ENTRYPOINT), "--cmd", "", "--workingdir", WORKDIR, "--env", PATH_ENV)
# what an image assembled before must share to be pushed again; RECORD names what its labels record (the booted
# kernel's verdict, since images carry it): an image assembled before that recorded less is assembled anew
RECORD = "kernel-load"
LAYOUT = "dropin-" + hashlib.sha256(Path(__file__).with_name("nvidia-driver.sh").read_bytes()
                                    + repr((BASE_KEY, RUN_CONFIG, userspace.LIBS, userspace.TOOLS,
                                            userspace.OWN_VERSION, RECORD)).encode()).hexdigest()[:12]
NVIDIA_DRIVER = Path(__file__).with_name("nvidia-driver.sh")  # the operator's contract: `nvidia-driver init`


class PushRefused(Refused):
    """The registry refused the push (exit 1; nothing was pushed under the tag)."""


def refusal(stderr: str, what: str) -> PushRefused | None:
    """A registry's refusal in a tool's error output (buildah push, skopeo copy), as one line; None otherwise."""
    low = stderr.lower()
    last = (stderr.strip().splitlines() or ["refused"])[-1]
    if "unauthorized" in low or "401" in low or "authentication required" in low:
        return PushRefused(f"{what} (401 unauthorized): {last}")
    if "denied" in low or "403" in low or "forbidden" in low:
        return PushRefused(f"{what} (403 denied): {last}")
    return None


def storage() -> Path:
    return gpualign_cache() / "containers"


def buildah(*args: str, capture: bool = True) -> str:
    s = storage()
    cmd = ["buildah", "--root", str(s / "storage"), "--runroot", str(s / "run"), "--storage-driver", "vfs", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except FileNotFoundError:
        raise BadInput("buildah is not installed: the driver image is assembled with buildah "
                       "(scripts/install-debs installs it)") from None
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        message = err[-1] if err else f"exit {proc.returncode}"
        pushing = args[:1] == ("push",) or args[:2] == ("manifest", "push")
        if pushing and (refused := refusal(proc.stderr, "the registry refused the push")):
            raise refused
        if "no space left on device" in proc.stderr.lower():
            raise BuildError(f"buildah {args[0]}: the disk is full ({s}): free space and run again")
        raise BuildError(f"buildah {args[0]} failed: {message}")
    return proc.stdout.strip() if capture else ""


def ensure_base(suite: str = "bookworm", arch: str = "amd64") -> str:
    """The image's base for a Debian release and architecture (made once, cached; under a lock: the images of one
    run share it). Another architecture's base is unpacked as this machine's is (the extract variant runs nothing
    of it), and its image configured as that architecture's."""
    lock = f"driver-base-{suite}.lock" if suite != "bookworm" else "driver-base.lock"
    with file_lock(lock if arch == "amd64" else f"driver-base-{suite}-{arch}.lock"):
        return _ensure_base(suite, arch)


def _ensure_base(suite: str, arch: str) -> str:
    base = base_name(suite, arch)
    stamp = storage() / (f"driver-base-{BASE_KEY}.done" if suite == "bookworm" else
                         f"driver-base-{suite}-{base_key(suite)}.done")
    if arch != "amd64":
        stamp = stamp.with_name(f"{stamp.stem}-{arch}.done")
    if stamp.exists() and base in buildah("images", "--format", "{{.Name}}:{{.Tag}}").split():
        return base
    with tempfile.TemporaryDirectory(prefix="gpualign-driver-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--quiet", "--variant=extract", f"--architectures={arch}",
               f"--include={','.join(base_packages(suite))}",
               f"--extract-hook={EXTRA_HOOK.get(suite, '')}{BASE_HOOK}", suite, str(tar),
               *([mirror] if (mirror := mirror_set()) else [])]  # mmdebstrap's own default else
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"mmdebstrap (the driver image's base) failed: {proc.stderr.strip()[-300:]}")
        ctr = buildah("from", "scratch")
        try:
            buildah("add", "--quiet", ctr, str(tar), "/")
            buildah("config", "--arch", arch, "--os", "linux", ctr)
            buildah("commit", "--quiet", ctr, base)
        finally:
            buildah("rm", ctr)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("ok\n")
    return base


def labels(spec: TagSpec, driver_version: str, verified: dict[str, object], flavour: str | None = None) \
        -> dict[str, str]:
    """flavour: the NVIDIA kernel modules' (proprietary or open), labelled so check and `nvidia-driver init` can
    compare it with the flavour the GPU Operator's pod asks for."""
    signed = verified.get("signed")
    held = {FLAVOUR_LABEL: flavour} if flavour else {}
    signing = {"io.gpualign.signer": str(signed.get("signer", "")),
               "io.gpualign.signing-key-id": str(signed.get("key_id", "")),
               "io.gpualign.signing-cert-sha256": str(signed.get("cert_sha256", ""))} \
        if isinstance(signed, dict) else {}
    return signing | held | {
        "version": f"{spec.branch}-{spec.kernel}",  # NVIDIA's precompiled images carry this
        # as NVIDIA labels its driver images
        "name": "NVIDIA Driver Container", "io.k8s.display-name": "NVIDIA Driver Container",
        "summary": "Provision the NVIDIA driver through containers", "release": f"{spec.kernel}-{spec.os_tag}",
        "description": f"NVIDIA {driver_version} precompiled for Linux {spec.kernel} ({spec.os_tag}), with its user "
                       "space; run by the GPU Operator as `nvidia-driver init`",
        "org.opencontainers.image.title": "NVIDIA driver container (precompiled)",
        "org.opencontainers.image.description": f"NVIDIA {driver_version} modules for Linux {spec.kernel} "
                                                f"({spec.os_tag}), verified against its Module.symvers, and the "
                                                "matching user space from Debian",
        "org.opencontainers.image.version": f"{driver_version}-{spec.kernel}",
        "org.opencontainers.image.created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.vendor": "built in-house by gpualign",
        "io.gpualign.kernel": spec.kernel,
        "io.gpualign.driver-version": driver_version,
        "io.gpualign.driver-branch": spec.branch,
        "io.gpualign.os-tag": spec.os_tag,
        "io.gpualign.built-by": f"gpualign {__version__}",
        "io.gpualign.verified": json.dumps(verified, separators=(",", ":")),
    }


def image_env(spec: TagSpec, driver_version: str, flavour: str | None) -> list[str]:
    """The image's environment beyond PATH: what NVIDIA's images set, and what `nvidia-driver init` compares."""
    env = [f"DRIVER_VERSION={driver_version}", f"DRIVER_BRANCH={spec.branch}", f"GPUALIGN_KERNEL={spec.kernel}",
           f"KERNEL_VERSION={spec.kernel}"]
    return env + ([f"GPUALIGN_KERNEL_MODULE_TYPE={flavour}"] if flavour else [])


def image_labels(spec: TagSpec, driver_version: str, verified: dict[str, object], flavour: str | None,
                 key: str | None) -> dict[str, str]:
    """labels(), and with the modules' key what a later build on the same disk reuses the image by."""
    found = labels(spec, driver_version, verified, flavour)
    if key:
        found |= {"io.gpualign.modules-sha256": key, "io.gpualign.base": base_name(suite_of(spec), arch_of(spec)),
                  "io.gpualign.layout": LAYOUT}
    return found


def flavour_of(modules: list[Path]) -> str | None:
    """The modules' flavour (proprietary or open), read from nvidia.ko's license."""
    return next((f for ko in modules if ko.name == "nvidia.ko" for f in [kmod.read_file(ko).flavour] if f), None)


def modules_dir(kernel: str) -> Path:
    """Where in the image modprobe finds the modules."""
    return Path("lib") / "modules" / kernel / "kernel" / "drivers" / "video"


def modules_key(modules: list[Path]) -> str:
    """What the image's content depends on besides the tag: the modules' bytes (SHA-256 over name and content).
    For modules in gpualign's cache it is remembered beside them with each file's size, mtime and inode, as git's
    index does, and hashed again only when one of those changed (a warm run saves ~40 ms per image)."""
    files = sorted(modules)
    stats = [[ko.name, st.st_size, st.st_mtime_ns, st.st_ino] for ko in files for st in [ko.stat()]]
    folders = {ko.parent for ko in files}
    folder = folders.pop() if len(folders) == 1 else None
    memo = folder / ".modules-sha256" if folder is not None and folder.is_relative_to(ensure_root()) else None
    if memo is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            known = json.loads(memo.read_text())
            if known["stats"] == stats:
                return str(known["key"])
    digest = hashlib.sha256()
    for ko in files:
        digest.update(ko.name.encode() + b"\0")
        with ko.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    key = digest.hexdigest()
    if memo is not None:
        with contextlib.suppress(OSError):
            tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"stats": stats, "key": key}))
            os.replace(tmp, memo)
    return key


def local_name(spec: TagSpec, variant: str = "") -> str:
    """The local buildah name of a tag's image: one per tag and variant (unsigned, or signed by one certificate), so
    a signed build never replaces the unsigned image of the same tag, nor the other way round."""
    return f"localhost/gpualign-driver:{spec.tag}" + (f"-{variant}" if variant else "")


def local_image(spec: TagSpec, key: str, variant: str = "") -> str | None:
    """The image assembled before from the same modules (a warm run pushes it again instead of rebuilding), or
    None."""
    local = local_name(spec, variant)
    if not store_exists():
        return None
    try:
        found = buildah("inspect", "--type", "image", "--format",
                        '{{index .OCIv1.Config.Labels "io.gpualign.modules-sha256"}} '
                        '{{index .OCIv1.Config.Labels "io.gpualign.base"}}', local)
    except BuildError:
        return None  # no such image
    return local if found.split() == [key, base_name(suite_of(spec), arch_of(spec))] and _layout(local) == LAYOUT \
        else None


def _layout(local: str) -> str:
    try:
        return buildah("inspect", "--type", "image", "--format",
                       '{{index .OCIv1.Config.Labels "io.gpualign.layout"}}', local)
    except BuildError:
        return ""


@dataclass(frozen=True)
class UserSpaceLayer:
    """The image a driver image is its modules' layer over: the base with NVIDIA's user space (made here by
    userspace_image, a local image), or the registry's shared one (ensure.shared_userspace), fetched and checked
    (`remote`); and what it holds."""

    name: str
    packages: dict[str, str]  # Debian package -> version
    arch: str = "amd64"
    remote: RemoteUserSpace | None = None  # in the registry only: the image is composed there (ensure.compose)


def assemble(spec: TagSpec, modules: list[Path], driver_version: str, verified: dict[str, object],
             key: str | None = None, variant: str = "", layer: UserSpaceLayer | None = None) -> str:
    """The image as a local buildah image, its modules' layer over `layer`; returns its local name. The modules'
    flavour (read from nvidia.ko's license) is labelled and set as GPUALIGN_KERNEL_MODULE_TYPE, which
    `nvidia-driver init` compares with the pod's KERNEL_MODULE_TYPE. The assembled tree's user space is checked
    (userspace.check) whichever way its layer came."""
    flavour = flavour_of(modules)
    arch = arch_of(spec)
    local = local_name(spec, variant)
    if layer is None:
        raise BuildError(f"{spec.tag}: no user space to assemble")
    if layer.arch != arch:
        raise BuildError(f"{spec.tag}: the user space given is {layer.arch}'s, the kernel {arch}'s")
    ctr = buildah("from", "--pull-never", layer.name)
    try:
        root = Path(buildah("mount", ctr))
        dest = root / modules_dir(spec.kernel)
        dest.mkdir(parents=True)
        for ko in modules:
            shutil.copy2(ko, dest / ko.name)
        depmod = subprocess.run(["depmod", "-b", str(root), spec.kernel], capture_output=True, text=True)
        if depmod.returncode != 0:  # kmod on the host; the image's own depmod would do the same
            raise BuildError(f"depmod for {spec.kernel} failed: {depmod.stderr.strip()[-300:]}")
        checked = userspace.check(root, driver_version, arch)  # as every image is checked: its own assembled tree
        verified = {**verified, "userspace": checked, "userspace_packages": layer.packages}
        buildah("umount", ctr)
        config = list(RUN_CONFIG)
        for env in image_env(spec, driver_version, flavour):
            config += ["--env", env]
        for name, value in image_labels(spec, driver_version, verified, flavour, key).items():
            config += ["--label", f"{name}={value}"]
        buildah("config", *config, ctr)
        replaced = _image_id(local)
        made = buildah("commit", "--quiet", "--format", "oci", ctr, local)
    finally:
        buildah("rm", ctr)
    if replaced and not made.startswith(replaced):  # the image this tag named before: nothing names it now
        with contextlib.suppress(BuildError):  # a container still using it keeps it
            buildah("rmi", replaced)
    if variant.startswith("signed-"):
        _prune_signed(spec, keep=local)
    return local


def userspace_tag(suite: str, arch: str, driver_version: str, packages: dict[str, str]) -> str:
    """The user-space image's tag, the same on every machine (ensure.shared_userspace)."""
    recipe = f"{base_key(suite)}-{LAYOUT}" + (f"-{arch}" if arch != "amd64" else "")
    return shared_userspace.tag(suite, arch, driver_version, packages, recipe)


def userspace_name(suite: str, arch: str, driver_version: str, packages: dict[str, str]) -> str:
    return f"localhost/gpualign-driver-userspace:{userspace_tag(suite, arch, driver_version, packages)}"


def has_image(name: str) -> bool:
    return _image_id(name) is not None


def userspace_image(suite: str, base: str, user: userspace.UserSpace) -> str:
    """The base with NVIDIA's user space, nvidia-driver and the ld.so.cache: one local image per release,
    architecture, user space and layout, made once and shared by every kernel's image of that driver version. Each
    image is then its modules' layer over it, and a registry that holds one kernel's image is sent only the next
    one's modules."""
    name = userspace_name(suite, user.arch, user.driver_version, user.packages)
    named = f"{suite}-{user.arch}" if user.arch != "amd64" else suite
    with file_lock(f"driver-userspace-{named}-{user.driver_version}.lock"):
        if _image_id(name) is not None:
            return name
        ctr = buildah("from", "--pull-never", base)
        try:
            root = Path(buildah("mount", ctr))
            shutil.copytree(user.root, root, symlinks=True, dirs_exist_ok=True)
            from gpualign.ensure import foreign

            ldconfig = foreign.ldconfig(root, user.arch)
            if ldconfig.returncode != 0:
                raise BuildError(f"ldconfig in the image failed: {ldconfig.stderr.strip()[-300:]}")
            script = root / "usr" / "local" / "bin" / "nvidia-driver"
            script.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(NVIDIA_DRIVER, script)
            script.chmod(0o755)
            buildah("umount", ctr)
            buildah("commit", "--quiet", "--format", "oci", ctr, name)
        finally:
            buildah("rm", ctr)
    return name


def push_userspace(name: str, reference: str, *, tls_verify: bool, authfile: str | None = None) -> None:
    args = ["push", "--quiet", f"--tls-verify={'true' if tls_verify else 'false'}"]
    if authfile and os.path.exists(authfile):
        args += ["--authfile", authfile]
    buildah(*args, name, f"docker://{reference}")


KEEP_SIGNED = 2  # signed variants of one tag kept in local storage (a machine signs with one key, two in a rotation)


def _prune_signed(spec: TagSpec, keep: str) -> None:
    """Each signing certificate makes its own local image of a tag; keep the newest few (a rotation's old and new
    key), so that a machine signing with many keys (a test suite's fresh ones) does not fill its disk."""
    prefix = f"{local_name(spec)}-signed-"
    try:
        listed = json.loads(buildah("images", "--json") or "[]")
    except (BuildError, ValueError):
        return
    variants = sorted(((int(image.get("created") or 0), name) for image in listed if isinstance(image, dict)
                       for name in image.get("names") or [] if str(name).startswith(prefix)), reverse=True)
    for _created, name in variants[KEEP_SIGNED:]:
        if name != keep:
            with contextlib.suppress(BuildError):
                buildah("rmi", name)


def store_exists() -> bool:
    """Whether this disk has gpualign's local image store: a build Job's empty disk has none, and asking buildah
    would make one."""
    return (storage() / "storage").exists()


def _image_id(name: str) -> str | None:
    if not store_exists():
        return None
    try:
        return buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", name) or None
    except BuildError:
        return None


def push(local: str, reference: str, *, tls_verify: bool, authfile: str | None = None, arch: str = "amd64") -> None:
    """An amd64 image is pushed as its manifest, as before; another architecture's as an image index naming its
    platform (linux/arm64), so that a runtime on any node picks its platform by the index, as it does for NVIDIA's
    own multi-architecture images."""
    args = [f"--tls-verify={'true' if tls_verify else 'false'}"]
    if authfile and os.path.exists(authfile):
        args += ["--authfile", authfile]
    if arch == "amd64":
        buildah("push", "--quiet", *args, local, f"docker://{reference}")
        return
    index = f"{local}-index"
    with contextlib.suppress(BuildError):  # one made before, from an older image
        buildah("manifest", "rm", index)
    buildah("manifest", "create", index)
    try:
        buildah("manifest", "add", "--arch", arch, "--os", "linux", index, f"containers-storage:{local}")
        buildah("manifest", "push", "--quiet", "--all", "--format", "oci", *args, index, f"docker://{reference}")
    finally:
        with contextlib.suppress(BuildError):
            buildah("manifest", "rm", index)
