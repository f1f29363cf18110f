"""The precompiled driver image, assembled with buildah and pushed only when whole.

Layout, as KMM and NVIDIA's precompiled images expect: the modules under `/opt/lib/modules/<kernel>/kernel/drivers/
video/` with `depmod -b /opt` run for that kernel, a small entrypoint that refuses to load on any kernel but its
own (NVIDIA's entrypoint never compares `uname -r` with the kernel it was built for), OCI labels and NVIDIA's
`version=<branch>-<kernel>` label. The base is a minimal bookworm (sh, coreutils and kmod) from mmdebstrap,
cached.

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
from pathlib import Path

from gpualign import __version__
from gpualign.ensure.archive import cache_root, file_lock
from gpualign.ensure.buildroot import BuildError
from gpualign.ensure.tagspec import TagSpec
from gpualign.errors import BadInput, GpualignError

# The base: what the entrypoint runs (sh, uname, sleep, modprobe), unpacked, not installed (mmdebstrap's extract
# variant: a driver image is never upgraded in place, so no maintainer script needs to run). Each package's control
# data is kept in /var/lib/dpkg/status.d/<package>, as distroless images keep it, so image scanners still see every
# package and version. 30 MB, where minbase was 131 MB.
BASE_PACKAGES = ("dash", "coreutils", "kmod")
BASE_HOOK = ('mkdir -p "$1"/var/lib/dpkg/status.d; for deb in "$1"/var/cache/apt/archives/*.deb; do '
             'p=$(dpkg-deb -f "$deb" Package); { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } '
             '> "$1/var/lib/dpkg/status.d/$p"; done; '
             'rm -rf "$1"/usr/share/man/* "$1"/usr/share/doc/* "$1"/usr/share/locale/* "$1"/usr/share/info/*')
BASE_KEY = hashlib.sha256(repr((BASE_PACKAGES, BASE_HOOK)).encode()).hexdigest()[:12]  # a new recipe, a new base
BASE = f"localhost/gpualign-driver-base:bookworm-{BASE_KEY}"
ENTRYPOINT = """#!/bin/sh
# gpualign precompiled NVIDIA driver: loads its modules only on the kernel they were built and verified for.
set -eu
want="${GPUALIGN_KERNEL:?}"
have="$(uname -r)"
if [ "$have" != "$want" ]; then
  echo "gpualign driver image ${DRIVER_BRANCH}-${want}: built and verified for kernel $want, this node runs $have:" \\
       "refusing to load (the kernel would refuse these modules: version magic and symbol CRCs differ)" >&2
  exit 1
fi
for m in nvidia nvidia-uvm nvidia-modeset nvidia-drm; do
  modprobe -d /opt "$m"
done
echo "NVIDIA ${DRIVER_VERSION} loaded on $have"
exec sleep infinity
"""


class PushRefused(GpualignError):
    """The registry refused the push (exit 1; nothing was pushed under the tag)."""

    exit_code = 1
    word = "refused"


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
    return cache_root().parent / "containers"


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
        if args and args[0] == "push" and (refused := refusal(proc.stderr, "the registry refused the push")):
            raise refused
        if "no space left on device" in proc.stderr.lower():
            raise BuildError(f"buildah {args[0]}: the disk is full ({s}): free space and run again")
        raise BuildError(f"buildah {args[0]} failed: {message}")
    return proc.stdout.strip() if capture else ""


def ensure_base() -> str:
    """The image's base (made once, cached; under a lock: the images of one run share it)."""
    with file_lock("driver-base.lock"):
        return _ensure_base()


def _ensure_base() -> str:
    stamp = storage() / f"driver-base-{BASE_KEY}.done"
    if stamp.exists() and BASE in buildah("images", "--format", "{{.Name}}:{{.Tag}}").split():
        return BASE
    with tempfile.TemporaryDirectory(prefix="gpualign-driver-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--quiet", "--variant=extract", f"--include={','.join(BASE_PACKAGES)}",
               f"--extract-hook={BASE_HOOK}", "bookworm", str(tar)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"mmdebstrap (the driver image's base) failed: {proc.stderr.strip()[-300:]}")
        ctr = buildah("from", "scratch")
        try:
            buildah("add", "--quiet", ctr, str(tar), "/")
            buildah("commit", "--quiet", ctr, BASE)
        finally:
            buildah("rm", ctr)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("ok\n")
    return BASE


def labels(spec: TagSpec, driver_version: str, verified: dict[str, object]) -> dict[str, str]:
    signed = verified.get("signed")
    signing = {"io.gpualign.signer": str(signed.get("signer", "")),
               "io.gpualign.signing-key-id": str(signed.get("key_id", "")),
               "io.gpualign.signing-cert-sha256": str(signed.get("cert_sha256", ""))} \
        if isinstance(signed, dict) else {}
    return signing | {
        "version": f"{spec.branch}-{spec.kernel}",  # NVIDIA's precompiled images carry this
        "org.opencontainers.image.title": "NVIDIA driver kernel modules (precompiled)",
        "org.opencontainers.image.description": f"NVIDIA {driver_version} modules for Linux {spec.kernel} "
                                                f"({spec.os_tag}), verified against its Module.symvers",
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


def modules_key(modules: list[Path]) -> str:
    """What the image's content depends on besides the tag: the modules' bytes (SHA-256 over name and content).
    For modules in gpualign's cache it is remembered beside them with each file's size, mtime and inode, as git's
    index does, and hashed again only when one of those changed (a warm run saves ~40 ms per image)."""
    files = sorted(modules)
    stats = [[ko.name, st.st_size, st.st_mtime_ns, st.st_ino] for ko in files for st in [ko.stat()]]
    folders = {ko.parent for ko in files}
    folder = folders.pop() if len(folders) == 1 else None
    memo = folder / ".modules-sha256" if folder is not None and folder.is_relative_to(cache_root()) else None
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
    try:
        found = buildah("inspect", "--type", "image", "--format",
                        '{{index .OCIv1.Config.Labels "io.gpualign.modules-sha256"}} '
                        '{{index .OCIv1.Config.Labels "io.gpualign.base"}}', local)
    except BuildError:
        return None  # no such image
    return local if found.split() == [key, BASE] else None


def assemble(spec: TagSpec, modules: list[Path], driver_version: str, verified: dict[str, object],
             key: str | None = None, variant: str = "") -> str:
    """The image as a local buildah image; returns its local name."""
    base = ensure_base()
    local = local_name(spec, variant)
    with tempfile.TemporaryDirectory(prefix="gpualign-driver-") as tmp:
        opt = Path(tmp) / "opt"
        dest = opt / "lib" / "modules" / spec.kernel / "kernel" / "drivers" / "video"
        dest.mkdir(parents=True)
        for ko in modules:
            shutil.copy2(ko, dest / ko.name)
        depmod = subprocess.run(["depmod", "-b", str(opt), spec.kernel], capture_output=True, text=True)
        if depmod.returncode != 0:  # kmod on the host; the image's own depmod would do the same
            raise BuildError(f"depmod for {spec.kernel} failed: {depmod.stderr.strip()[-300:]}")
        entry = Path(tmp) / "entrypoint.sh"
        entry.write_text(ENTRYPOINT)
        entry.chmod(0o755)
        ctr = buildah("from", "--pull-never", base)
        try:
            buildah("add", "--quiet", ctr, str(opt), "/opt")
            buildah("add", "--quiet", "--chmod", "0755", ctr, str(entry), "/usr/local/bin/gpualign-driver")
            config = ["--entrypoint", '["/usr/local/bin/gpualign-driver"]', "--cmd", "",
                      "--env", f"DRIVER_VERSION={driver_version}", "--env", f"DRIVER_BRANCH={spec.branch}",
                      "--env", f"GPUALIGN_KERNEL={spec.kernel}", "--env", f"KERNEL_VERSION={spec.kernel}"]
            for name, value in labels(spec, driver_version, verified).items():
                config += ["--label", f"{name}={value}"]
            if key:
                config += ["--label", f"io.gpualign.modules-sha256={key}", "--label", f"io.gpualign.base={base}"]
            buildah("config", *config, ctr)
            replaced = _image_id(local)
            made = buildah("commit", "--quiet", "--format", "oci", ctr, local)
        finally:
            buildah("rm", ctr)
    if replaced and not made.startswith(replaced):  # the image this tag named before: nothing names it now
        with contextlib.suppress(BuildError):  # a container still using it keeps it
            buildah("rmi", replaced)
    return local


def _image_id(name: str) -> str | None:
    try:
        return buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", name) or None
    except BuildError:
        return None


def push(local: str, reference: str, *, tls_verify: bool, authfile: str | None = None) -> None:
    args = ["push", "--quiet", f"--tls-verify={'true' if tls_verify else 'false'}"]
    if authfile and os.path.exists(authfile):
        args += ["--authfile", authfile]
    buildah(*args, local, f"docker://{reference}")
