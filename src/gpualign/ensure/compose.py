"""A driver image composed in the ledger's registry: the shared user space's layers mounted from their repository
(ensure.shared_userspace), never copied, then the image's modules' layer, its config and its manifest.

Where it is used: a build whose user space is in the registry and not on its disk, as a build Job's on an empty
disk (the shared case). Pulling that image into a local store, copying it into a container's tree and committing
it again (ensure.image.assemble, on buildah's vfs driver) only to send the registry layers it already has, costs a
few seconds per image; composing costs the user space's download and one unpacking, done while the modules are
pulled and verified. A build whose user space is local assembles with buildah as before.

What is checked is what assemble checks, in the same tree:
- each of the user space's layers against its digest and size, and its uncompressed bytes against the diff_id its
  config names (what a container runtime checks as it unpacks them);
- the unpacked tree's user space (userspace.check: each soname at the modules' version, the ld.so.cache,
  `nvidia-smi -h`, `nvidia-persistenced --version`). The modules' layer adds files under /lib/modules/<kernel>
  only, so the tree checked holds every file of the image's user space;
- depmod runs for the kernel on that tree, and the modules' layer is what it and the modules add there.
The manifest is put last, so a push that fails leaves no tag half-made.
"""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from gpualign import __version__
from gpualign.ensure import image, userspace
from gpualign.ensure.buildroot import BuildError
from gpualign.ensure.image import modules_dir
from gpualign.ensure.remote_userspace import RemoteUserSpace
from gpualign.judging.signature_check import unsigned_digest
from gpualign.ledger.registry import BlobMismatch
from gpualign.loaders.archive_reading import ensure_root
from gpualign.model import oci

if TYPE_CHECKING:
    from gpualign.judging.signature_check import TrustedKey
    from gpualign.ledger.registry import RegistryClient
    from gpualign.model.driver_tag import TagSpec

OCI_MANIFEST, OCI_INDEX, OCI_CONFIG, GZIP_LAYER = oci.OCI_MANIFEST, oci.OCI_INDEX, oci.OCI_CONFIG, oci.OCI_GZIP_LAYER
GZIP_LAYERS, CONFIGS = oci.GZIP_LAYERS, oci.CONFIGS
MAX_LAYER = 1 << 30  # bytes, compressed: the user space's layers are ~20 MB each
GZIP_PARTS = 2  # the modules' layer is compressed as this many gzip members at once (a gzip stream may hold many)


class LayerRefused(BuildError):
    """A shared user space's layer that is not what its manifest and config say, or holds what no image of ours
    holds (the build makes the user space from Debian instead)."""




def fetch(client: RegistryClient, repo: str, tag: str, arch: str, driver_version: str,
          trusted: Sequence[TrustedKey] = ()) -> RemoteUserSpace | None:
    """The shared user space `repo:tag`, unpacked into a scratch tree beside gpualign's cache and its user space
    checked there at `driver_version`; None when the registry has no such image. LayerRefused when it is not what
    it says (or, with `trusted` keys, not signed by one of them), UserSpaceMismatch when its user space is not the
    driver's."""
    where = f"{client.ref.host}/{repo}:{tag}"
    digest = client.digest(tag, repo)
    if digest is None:
        return None
    if (why := unsigned_digest(client, digest, repo, trusted)) is not None:
        raise LayerRefused(f"{where}: {why}")
    try:  # by the digest judged, and each platform's by the digest its index names: a tag moved since is not read
        manifest = client.manifest_at(digest, repo)
        if manifest is None:
            return None
        entry = None
        if manifest.get("mediaType") == OCI_INDEX or "manifests" in manifest:
            entry = next((m for m in manifest.get("manifests") or [] if isinstance(m, dict)
                          and (m.get("platform") or {}).get("architecture") == arch), None)
        found = client.manifest_at(str(entry["digest"]), repo) if entry else None
    except BlobMismatch as err:
        raise LayerRefused(f"{where}: {err.message}") from None
    if manifest.get("mediaType") == OCI_INDEX or "manifests" in manifest:
        if entry is None or found is None:
            raise LayerRefused(f"{where}: no {arch} image in its index")
        manifest, digest = found, str(entry["digest"])
    config_desc, layers = manifest.get("config") or {}, manifest.get("layers") or []
    if config_desc.get("mediaType") not in CONFIGS or not layers or any(
            not isinstance(d, dict) or d.get("mediaType") not in GZIP_LAYERS or not isinstance(d.get("size"), int)
            or not 0 < d["size"] <= MAX_LAYER for d in layers):
        raise LayerRefused(f"{where}: not an image of gzip'd layers gpualign can compose over")
    raw_config = client.blob(str(config_desc["digest"]), repo)
    if f"sha256:{hashlib.sha256(raw_config).hexdigest()}" != config_desc.get("digest"):
        raise LayerRefused(f"{where}: its config is not the blob its manifest names")
    try:
        config = json.loads(raw_config)
    except ValueError:
        raise LayerRefused(f"{where}: its config is not JSON") from None
    diff_ids = ((config.get("rootfs") or {}).get("diff_ids") or []) if isinstance(config, dict) else []
    if not isinstance(config, dict) or config.get("architecture") != arch or len(diff_ids) != len(layers):
        raise LayerRefused(f"{where}: its config is not an {arch} image of {len(layers)} layers")
    scratch = tempfile.TemporaryDirectory(prefix="gpualign-compose-", dir=_scratch_parent())
    found_space = RemoteUserSpace(repo=repo, reference=where, digest=digest, layers=layers, config=config, arch=arch,
                                  _scratch=scratch)
    try:
        found_space.root = Path(scratch.name) / "root"
        found_space.root.mkdir()
        for desc, diff_id in zip(layers, diff_ids, strict=True):
            blob = Path(scratch.name) / str(desc["digest"]).replace(":", "-")
            try:
                client.blob_to_file(str(desc["digest"]), int(desc["size"]), blob, repo)
            except BlobMismatch as err:
                raise LayerRefused(f"{where}: {err.message}") from None
            found_space.blobs[str(desc["digest"])] = blob
            unpack(blob, found_space.root, str(diff_id), where)
        found_space.checked = userspace.check(found_space.root, driver_version, arch)
    except BaseException:
        found_space.close()
        raise
    return found_space


def _scratch_parent() -> Path:
    parent = ensure_root() / "compose"
    parent.mkdir(parents=True, exist_ok=True)
    return parent


class _Hashing(io.RawIOBase):
    """A read-only stream that hashes what is read through it (the layer's uncompressed bytes: its diff_id)."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        self.sha.update(data)
        buffer[:len(data)] = data
        return len(data)


def unpack(blob: Path, root: Path, diff_id: str, where: str) -> None:
    """One gzip'd layer unpacked over `root`, as a runtime applies it, but for its device nodes and FIFOs (the
    base's /dev/console: nothing the check reads); its uncompressed bytes must hash to diff_id. A whiteout (a layer
    deleting a lower layer's file) refuses it: the user space's layers only add."""
    with gzip.open(blob, "rb") as raw:
        stream = _Hashing(raw)  # type: ignore[arg-type]
        try:
            with tarfile.open(fileobj=io.BufferedReader(stream, 1 << 20), mode="r|") as tar:
                for member in tar:
                    name = PurePosixPath(member.name).name
                    if name.startswith(".wh."):
                        raise LayerRefused(f"{where}: a layer deletes {member.name!r} (a whiteout)")
                    if not member.isdev():
                        _within(root, member, where)
                        tar.extract(member, root, **TRUSTED)
                while stream.read(1 << 20):  # the tar's end-of-archive padding, to hash every byte
                    pass
        except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
            raise LayerRefused(f"{where}: a layer does not unpack ({err.__class__.__name__}: {err})") from None
    if f"sha256:{stream.sha.hexdigest()}" != diff_id:
        raise LayerRefused(f"{where}: a layer's bytes are not the diff_id its config names")


# The members are checked by _within (Debian 12's Python 3.11.2, the builder image's, has no extraction filters);
# where filters exist, theirs would refuse the absolute links a root file system holds (/etc/alternatives).
TRUSTED: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def _within(root: Path, member: tarfile.TarInfo, where: str) -> None:
    """A member lands inside `root`, however the tree's links so far lead: no absolute or `..` name, no parent
    directory that a link takes outside the tree, no hard link to a file outside it."""
    top = os.path.realpath(root)
    for name in (member.name, *([member.linkname] if member.islnk() else [])):
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise LayerRefused(f"{where}: a layer names {name!r}, outside the image's tree")
        parent = os.path.realpath(root.joinpath(*path.parts[:-1]))
        if parent != top and not parent.startswith(top + os.sep):
            raise LayerRefused(f"{where}: a layer's {name!r} would land outside the image's tree (through a link)")


def inside(root: Path, relative: PurePosixPath) -> PurePosixPath:
    """`relative` with every symlink among its parents followed inside `root` (an absolute link names a path of the
    image's, not of this machine's): where a file at that path lands in the image's tree."""
    parts: list[str] = []
    todo = list(relative.parts)
    hops = 0
    while todo:
        part = todo.pop(0)
        here = root.joinpath(*parts, part)
        if here.is_symlink():
            hops += 1
            if hops > 40:
                raise BuildError(f"/{relative}: too many symbolic links in the image's tree")
            target = PurePosixPath(os.readlink(here))
            if target.is_absolute():
                parts = []
            todo = [p for p in target.parts if p != "/"] + todo
            continue
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return PurePosixPath(*parts)


@dataclass(frozen=True)
class Layer:
    """The modules' layer: gzip'd bytes, their digest and the uncompressed bytes' (the diff_id)."""

    data: bytes
    digest: str
    diff_id: str


def modules_layer(root: Path, kernel: str, modules: list[Path]) -> Layer:
    """The modules laid into the tree where modprobe finds them and depmod run for the kernel there, as assemble
    does; the layer is every directory and file under /lib/modules/<kernel>, with their parents."""
    moddir = inside(root, PurePosixPath(modules_dir(kernel).as_posix()))
    dest = root / moddir
    dest.mkdir(parents=True, exist_ok=True)
    for ko in modules:
        (dest / ko.name).unlink(missing_ok=True)  # never written through: it may be a link to the module cache
        try:
            os.link(ko, dest / ko.name)  # the module cache and the scratch tree share a disk: no copy
        except OSError:
            shutil.copy2(ko, dest / ko.name)
    depmod = subprocess.run(["depmod", "-b", str(root), kernel], capture_output=True, text=True)
    if depmod.returncode != 0:
        raise BuildError(f"depmod for {kernel} failed: {depmod.stderr.strip()[-300:]}")
    top = moddir.parents[2]  # lib/modules/<kernel> (usr/lib/modules/<kernel> under a merged /usr)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in [*reversed(top.parents[:-1]), *_walk(root, top)]:
            info = _entry(root, path)
            if info.isreg():
                with (root / path).open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    return Layer(gz := _gzip(data), f"sha256:{hashlib.sha256(gz).hexdigest()}",
                 f"sha256:{hashlib.sha256(data).hexdigest()}")


def _walk(root: Path, top: PurePosixPath) -> Iterator[PurePosixPath]:
    yield top
    for dirpath, dirnames, filenames in os.walk(root / top):
        dirnames.sort()
        here = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            yield here / name
        for name in dirnames:
            if not (Path(dirpath) / name).is_symlink():
                yield here / name


def _entry(root: Path, path: PurePosixPath) -> tarfile.TarInfo:
    full = root / path
    st = full.lstat()
    info = tarfile.TarInfo(str(path))
    info.mode, info.mtime, info.uid, info.gid = st.st_mode & 0o7777, int(st.st_mtime), 0, 0
    if full.is_symlink():
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
    elif full.is_dir():
        info.type = tarfile.DIRTYPE
    else:
        info.size = st.st_size
    return info


def _gzip(data: bytes) -> bytes:
    """gzip at level 1 in GZIP_PARTS members compressed at once (zlib lets go of the interpreter's lock): a gzip
    stream of several members is one stream to every reader (RFC 1952; Go's, as containerd reads layers)."""
    step = -(-len(data) // GZIP_PARTS) or 1
    whole = memoryview(data)  # parts without copies
    parts = [whole[i:i + step] for i in range(0, len(data), step)] or [whole]
    out: list[bytes] = [b""] * len(parts)

    def one(i: int) -> None:
        out[i] = gzip.compress(parts[i], compresslevel=1, mtime=0)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(1, len(parts))]
    for t in threads:
        t.start()
    one(0)
    for t in threads:
        t.join()
    return b"".join(out)


@dataclass
class Composed:
    """An image ready to push: its modules' layer and config over the user space's layers."""

    userspace: RemoteUserSpace
    layer: Layer
    config: bytes
    manifest: dict[str, Any]

    def push(self, client: RegistryClient, tag: str) -> None:
        """Every blob into the ledger's repository (the user space's mounted, else uploaded), then the manifest
        under `tag`: an amd64 image as its manifest, another architecture's as an index naming its platform, as
        ensure.image.push does."""
        repo = client.ref.repo
        for desc in self.userspace.layers:
            digest = str(desc["digest"])
            if not client.mount_blob(digest, self.userspace.repo, repo):
                client.push_blob(self.userspace.blobs[digest].read_bytes(), repo, timeout=600.0)
        client.push_blob(self.layer.data, repo, timeout=600.0)
        client.push_blob(self.config, repo)
        if self.userspace.arch == "amd64":
            client.push_manifest(tag, self.manifest, repo)
            return
        body = json.dumps(self.manifest, separators=(",", ":")).encode()
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        client.push_manifest(digest, self.manifest, repo)
        client.push_manifest(tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body),
             "platform": {"architecture": self.userspace.arch, "os": "linux"}}]}, repo)


def compose(spec: TagSpec, userspace: RemoteUserSpace, packages: dict[str, str], modules: list[Path],
            driver_version: str, verified: dict[str, object], key: str | None) -> Composed:
    """The image of `spec`: the modules' layer over the user space (checked in its tree when fetched), and a config
    as assemble's: the user space's, with the image's entrypoint, environment and labels."""
    flavour = image.flavour_of(modules)
    layer = modules_layer(userspace.root, spec.kernel, modules)
    verified = {**verified, "userspace": userspace.checked, "userspace_packages": packages}
    config = copy.deepcopy(userspace.config)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    run = config.setdefault("config", {})
    env = [image.PATH_ENV, *image.image_env(spec, driver_version, flavour)]
    names = {e.split("=", 1)[0] for e in env}
    run["Env"] = [e for e in run.get("Env") or [] if e.split("=", 1)[0] not in names] + env
    run["Entrypoint"], run["WorkingDir"] = list(image.ENTRYPOINT), image.WORKDIR
    run.pop("Cmd", None)
    run["Labels"] = {**(run.get("Labels") or {}), **image.image_labels(spec, driver_version, verified, flavour, key)}
    config["created"] = now
    config["rootfs"]["diff_ids"] = [*config["rootfs"]["diff_ids"], layer.diff_id]
    config["history"] = [*(config.get("history") or []),
                         {"created": now, "created_by": f"gpualign {__version__}: NVIDIA {driver_version} modules "
                                                       f"for {spec.kernel}", "comment": f"FROM {userspace.reference}"}]
    body = json.dumps(config, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": f"sha256:{hashlib.sha256(body).hexdigest()}",
                   "size": len(body)},
        "layers": [*({"mediaType": GZIP_LAYER, "digest": d["digest"], "size": d["size"]} for d in userspace.layers),
                   {"mediaType": GZIP_LAYER, "digest": layer.digest, "size": len(layer.data)}],
        "annotations": {"org.opencontainers.image.base.name": userspace.reference,
                        "org.opencontainers.image.base.digest": userspace.digest},
    }
    return Composed(userspace, layer, body, manifest)
