#!/usr/bin/env python3
"""Build the gpualign container images from the repository's Dockerfile with buildah, without Docker and without
a public container registry (none is reachable from the build): the bases are Debian bookworm's own python3, made by
mmdebstrap and imported as localhost/gpualign-base:bookworm (the controller) and, with the build tools,
localhost/gpualign-builder-base:bookworm (the build Jobs); the wheel is built from this checkout.

    .venv/bin/python scripts/build_image.py           # `make image`; `make setup` runs it

buildah runs as root with vfs storage and chroot isolation, its storage under ~/.cache/gpualign/containers. The base
is cached by its recipe; the image is rebuilt when the source changes (its key is a hash of src/, pyproject.toml,
README.md and the Dockerfile). The results are localhost/gpualign:VERSION and localhost/gpualign-builder:VERSION in
that storage; the tests push them to a lab registry and run them. Beside each is its SBOM (scripts/image_sbom.py),
<cache>/containers/KIND-VERSION-KEY.spdx.json; scripts/publish_image.py pushes an image, and signs it and attaches
that SBOM when given a key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gpualign import __version__  # noqa: E402
from gpualign.base.cache import cache_root  # noqa: E402

BASE_IMAGE = "localhost/gpualign-base:bookworm"
BUILDER_BASE_IMAGE = "localhost/gpualign-builder-base:bookworm"
IMAGE = f"localhost/gpualign:{__version__}"
BUILDER_IMAGE = f"localhost/gpualign-builder:{__version__}"
# gpgv and Debian's keyring: the controller verifies Debian's archive as apt does (builds ahead of its next kernel)
PACKAGES = ("python3", "python3-venv", "ca-certificates", "gpgv", "debian-archive-keyring")
# what `ensure` runs besides Python (the Dockerfile's builder stage installs the same where it starts from python:)
BUILDER_PACKAGES = ("python3", "python3-venv", "ca-certificates", "buildah", "mmdebstrap", "kmod", "skopeo", "apt",
                    "debian-archive-keyring", "gpgv", "xz-utils", "qemu-user-static", "qemu-system-x86",
                    "qemu-system-arm", "busybox-static", "ovmf", "qemu-efi-aarch64")
EXCLUDES = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*", "/usr/share/info/*")


def buildah_cmd(*args: str) -> list[str]:
    storage = cache_root() / "containers"
    return ["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "run"),
            "--storage-driver", "vfs", *args]


def buildah(*args: str, capture: bool = False) -> str:
    cmd = buildah_cmd(*args)
    proc = subprocess.run(cmd, capture_output=capture, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build_image: {' '.join(cmd[7:9])} failed (exit {proc.returncode})"
                         + (f": {proc.stderr.strip()[-500:]}" if capture else ""))
    return proc.stdout.strip() if capture else ""


def has_image(name: str) -> bool:
    return name in buildah("images", "--format", "{{.Name}}:{{.Tag}}", capture=True).split()


def source_key() -> str:
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "src").rglob("*"), ROOT / "pyproject.toml", ROOT / "README.md",
                        ROOT / "Dockerfile"]):
        if path.is_file() and "__pycache__" not in path.parts and not any(
                part.endswith(".egg-info") for part in path.parts):  # the wheel's build rewrites SOURCES.txt
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def base_key(packages: tuple[str, ...] = PACKAGES) -> str:
    return hashlib.sha256(repr((packages, EXCLUDES, "bookworm", "essential")).encode()).hexdigest()[:12]


def build_base(name: str = BASE_IMAGE, packages: tuple[str, ...] = PACKAGES) -> None:
    stamp = cache_root() / "containers" / f"{name.split('/')[-1].split(':')[0]}-{base_key(packages)}.done"
    if name == BASE_IMAGE:
        stamp = cache_root() / "containers" / f"base-{base_key(packages)}.done"  # the name it always had
    if stamp.exists() and has_image(name):
        print(f"... base {name}: cached", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory(prefix="gpualign-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        t0 = time.monotonic()
        print(f"... base {name}: mmdebstrap bookworm ({', '.join(packages)})", file=sys.stderr, flush=True)
        cmd = ["mmdebstrap", "--quiet", "--variant=essential", f"--include={','.join(packages)}",
               *(f"--dpkgopt=path-exclude={p}" for p in EXCLUDES),
               '--customize-hook=rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*', "bookworm", str(tar)]
        if subprocess.run(cmd).returncode != 0:
            raise SystemExit("build_image: mmdebstrap failed")
        ctr = buildah("from", "scratch", capture=True)
        try:
            buildah("add", "--quiet", ctr, str(tar), "/")
            buildah("config", "--cmd", '["/bin/bash"]', ctr)
            buildah("commit", "--quiet", ctr, name)
        finally:
            buildah("rm", ctr, capture=True)
        print(f"... base built in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def build_image(image: str = IMAGE, target: str | None = None) -> None:
    key = source_key()
    kind = "image" if target is None else target
    stamp = cache_root() / "containers" / f"{kind}-{__version__}-{key}.done"
    if stamp.exists() and has_image(image):
        print(f"... {kind} {image}: cached (source {key})", file=sys.stderr)
        if not sbom_path(kind, key).exists():
            write_sbom(image, kind, key)
        return
    with tempfile.TemporaryDirectory(prefix="gpualign-image-") as tmp:
        ctx = Path(tmp)
        t0 = time.monotonic()
        wheel = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                                str(ctx / "dist"), str(ROOT)], capture_output=True, text=True)
        if wheel.returncode != 0:
            raise SystemExit(f"build_image: the wheel did not build: {wheel.stderr[-500:]}")
        shutil.copy(ROOT / "Dockerfile", ctx / "Dockerfile")
        args = ["bud", "--quiet", "--isolation", "chroot", "--layers=false", "--build-arg", f"BASE={BASE_IMAGE}",
                "--build-arg", f"BUILDER_BASE={BUILDER_BASE_IMAGE}", "-t", image,
                *(["--target", target] if target else [])]
        ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        if Path(ca).exists():  # the host's trust (a TLS-inspecting proxy's CA) for pip inside the build only
            args += ["--volume", f"{ca}:/run/host-ca.crt:ro", "--build-arg", "PIP_CERT=/run/host-ca.crt"]
        print(f"... {kind}: buildah bud {image}", file=sys.stderr, flush=True)
        replaced = buildah("images", "--quiet", "--no-trunc", image, capture=True) if has_image(image) else ""
        buildah(*args, str(ctx))
        if replaced and replaced != buildah("images", "--quiet", "--no-trunc", image, capture=True):
            subprocess.run(buildah_cmd("rmi", replaced), capture_output=True)  # the old build: no name is left on it
        print(f"... {kind} built in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    for pattern in ("*.done", "*.spdx.json"):
        for old in stamp.parent.glob(f"{kind}-{__version__}-{pattern}"):
            old.unlink()
    write_sbom(image, kind, key)
    stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def sbom_path(kind: str, key: str | None = None) -> Path:
    """The SBOM `make image` wrote of an image (kind: image or builder), for the source `key` (default: this one)."""
    return cache_root() / "containers" / f"{kind}-{__version__}-{key or source_key()}.spdx.json"


def write_sbom(image: str, kind: str, key: str) -> None:
    """The image's SPDX document (scripts/image_sbom.py), read from the image as built, written whole or not at all."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from image_sbom import sbom_of

    out = sbom_path(kind, key)
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(sbom_of(image), indent=1) + "\n")
    os.replace(partial, out)
    print(f"... {kind}: SBOM {out}", file=sys.stderr)


def main() -> int:
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            print(f"build_image: {tool} is missing (scripts/install-debs installs it)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("build_image: buildah with vfs storage and chroot isolation needs root here (no user namespaces "
              "are set up for rootless builds)", file=sys.stderr)
        return 2
    build_base()
    build_image()
    print(IMAGE)
    if "--no-builder" not in sys.argv[1:]:
        build_base(BUILDER_BASE_IMAGE, BUILDER_PACKAGES)
        build_image(BUILDER_IMAGE, "builder")
        print(BUILDER_IMAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
