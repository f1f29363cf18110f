"""Compiled modules shared through the ledger's registry, so what one builder compiled every builder reuses.

A build Job starts on an empty disk, on whichever node it lands; a compile costs a few CPU-minutes. After a build's
modules pass the kernel's checks, they are pushed beside the ledger as an OCI artifact, in the repository
`<ledger repository>-modules` (so the ledger's own tags stay driver images), tagged by what determines them:

    <module source version>-<kernel>-<flavour>            e.g. 535.261.03-6.1.0-50-amd64-proprietary

The unsigned modules are what is shared: signing is a later, cheap step, so one artifact serves every signing key.
A later build (any machine, any node) pulls the artifact into its module cache instead of compiling, and the
modules are then verified exactly as freshly compiled ones (`ensure.stage.verify_modules`), before anything is pushed.

What is checked on the way in, and what is not:
- the layer's bytes against its manifest's digest and size (a blob changed in the registry's storage is refused);
- each module's SHA-256 against the artifact's config, its name a plain `*.ko`, the key (source version, kernel,
  flavour) against the one asked for;
- then the kernel's own checks: vermagic, every symbol's CRC against the kernel's Module.symvers, and with a
  signing key, each signature.
Who may push to the ledger's registry may push driver images too: the artifact is trusted as far as the images are.
A module rewritten consistently (manifest, config and layer all pushed again) in bytes the kernel does not check is
caught only by signing (`--sign-secret`), as for an image. Refused artifacts are never used: the build compiles.

The artifact (ORAS-style; distribution 2.8 and later store it): an OCI image manifest whose `artifactType` and
config media type are gpualign's, with one gzip'd tar layer of the `.ko` files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base.errors import Refused
from gpualign.ensure.signatures import sign_shared
from gpualign.judging.signature_check import unsigned_digest
from gpualign.ledger.registry import BlobMismatch
from gpualign.loaders.archive_reading import ensure_root
from gpualign.model import oci

if TYPE_CHECKING:
    from gpualign.ensure.cosign_keys import Signer
    from gpualign.judging.signature_check import TrustedKey
    from gpualign.ledger.registry import RegistryClient

ARTIFACT_TYPE = "application/vnd.gpualign.driver-modules.v1"
CONFIG_TYPE = "application/vnd.gpualign.driver-modules.config.v1+json"
LAYER_TYPE = "application/vnd.gpualign.driver-modules.layer.v1.tar+gzip"
MANIFEST_TYPE = oci.OCI_MANIFEST
MAX_LAYER = 1 << 30  # bytes: NVIDIA's modules for one kernel are ~70 MB, ~25 MB compressed
SHARED_MARK = ".shared-from"  # in a module cache dir filled from the registry: where from (removed if refused)


class SharedRefused(Refused):
    """A shared artifact that is not what it says (it is not used: the build compiles instead)."""


@dataclass(frozen=True)
class Key:
    """What NVIDIA's compiled modules depend on: the module source version, the kernel and the flavour."""

    version: str  # upstream, e.g. 535.261.03
    kernel: str
    flavour: str

    @property
    def tag(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.version}-{self.kernel}-{self.flavour}")[:128]


def repository(ledger_repo: str) -> str:
    """Where a ledger's shared modules live: beside its images, never among its tags."""
    return f"{ledger_repo}-modules"


def where(client: RegistryClient, key: Key) -> str:
    return f"{client.ref.host}/{repository(client.ref.repo)}:{key.tag}"


def has(client: RegistryClient, key: Key) -> bool:
    return client.digest(key.tag, repository(client.ref.repo)) is not None


def push(client: RegistryClient, key: Key, modules: list[Path], signer: Signer | None = None) -> str:
    """Share verified modules: one layer (a gzip'd tar of the .ko files, in name order, with fixed metadata, so the
    same modules make the same artifact) and a config naming the key and each module's SHA-256, signed by `signer`
    when given. Returns where."""
    repo = repository(client.ref.repo)
    files = sorted(modules, key=lambda p: p.name)
    sums = {ko.name: _sha256(ko) for ko in files}
    with tempfile.TemporaryFile() as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for ko in files:
                info = tarfile.TarInfo(ko.name)
                info.size, info.mode, info.mtime = ko.stat().st_size, 0o644, 0
                with ko.open("rb") as handle:
                    tar.addfile(info, handle)
        raw.seek(0)
        layer = raw.read()
    config = json.dumps({"version": key.version, "kernel": key.kernel, "flavour": key.flavour,
                         "modules": sums}, sort_keys=True, separators=(",", ":")).encode()
    layer_digest = client.push_blob(layer, repo, timeout=600.0)
    config_digest = client.push_blob(config, repo)
    client.push_manifest(key.tag, {
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": len(layer),
                    "annotations": {"org.opencontainers.image.title": "modules.tar.gz"}}],
        "annotations": {"io.gpualign.module-source": key.version, "io.gpualign.kernel": key.kernel,
                        "io.gpualign.flavour": key.flavour},
    }, repo)

    sign_shared(client, key.tag, repo, signer)  # with a signing key, as cosign signs: other builds trust it by that key
    return where(client, key)


def pull(client: RegistryClient, key: Key, into: Path, trusted: Sequence[TrustedKey] = ()) -> list[Path] | None:
    """The shared modules for `key`, checked against their artifact and written into `into` (a module cache dir,
    made whole or not at all, marked as pulled); None when the registry has none. SharedRefused when the artifact
    is not what it says, or, with `trusted` keys, not signed by one of them."""
    repo = repository(client.ref.repo)
    digest = client.digest(key.tag, repo)
    if digest is None:
        return None
    source = where(client, key)
    if (why := unsigned_digest(client, digest, repo, trusted)) is not None:
        raise SharedRefused(f"{source}: {why}")
    try:  # by the digest judged: a tag moved since is not read
        manifest = client.manifest_at(digest, repo)
    except BlobMismatch as err:
        raise SharedRefused(f"{source}: {err.message}") from None
    if manifest is None:
        return None
    config_desc, layer_desc = _descriptors(manifest, source)
    try:
        config = json.loads(client.blob(config_desc["digest"], repo))
    except ValueError:
        raise SharedRefused(f"{source}: its config is not JSON") from None
    if not isinstance(config, dict):
        raise SharedRefused(f"{source}: its config is not an object")
    asked = {"version": key.version, "kernel": key.kernel, "flavour": key.flavour}
    said = {k: config.get(k) for k in asked}
    if said != asked:
        raise SharedRefused(f"{source}: it is for {said}, not {asked}")
    sums = config.get("modules")
    if not isinstance(sums, dict) or not sums or not all(_plain_ko(n) and isinstance(v, str) for n, v in sums.items()):
        raise SharedRefused(f"{source}: its config names no modules, or names something other than *.ko files")
    with staged(into, "pull") as staging:
        layer = staging / ".layer"
        try:
            client.blob_to_file(layer_desc["digest"], int(layer_desc["size"]), layer, repo)
        except BlobMismatch as err:
            raise SharedRefused(f"{source}: {err.message}") from None
        found = _extract(layer, staging, source)
        layer.unlink()
        if set(found) != set(sums):
            raise SharedRefused(f"{source}: its layer holds {sorted(found)}, its config names {sorted(sums)}")
        for name, path in found.items():
            if _sha256(path) != sums[name]:
                raise SharedRefused(f"{source}: {name} is not the module its config names (sha256 differs)")
        (staging / SHARED_MARK).write_text(f"{source}@{digest}\n")
        (staging / ".complete").write_text("0\n")
    return sorted(into.glob("*.ko"))


@contextmanager
def staged(into: Path, what: str) -> Iterator[Path]:
    """A directory beside the module cache dir `into`, to make it whole in: put in its place (replacing what was
    there) when the block ends, removed when the block fails."""
    into.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{into.name}.{what}.", dir=into.parent))
    try:
        yield staging
        if into.exists():
            shutil.rmtree(into)
        os.replace(staging, into)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def pulled_from(directory: Path) -> str | None:
    """Where a module cache dir's modules were pulled from, or None (compiled here)."""
    mark = directory / SHARED_MARK
    return mark.read_text().strip() if mark.exists() else None


def forget(directory: Path) -> None:
    """Drop pulled modules that the kernel's checks refused, so no later run takes them from the cache."""
    if directory.is_relative_to(ensure_root()) and pulled_from(directory) is not None:
        shutil.rmtree(directory, ignore_errors=True)


def _descriptors(manifest: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    config, layers = manifest.get("config") or {}, manifest.get("layers") or []
    if config.get("mediaType") != CONFIG_TYPE or len(layers) != 1 or layers[0].get("mediaType") != LAYER_TYPE:
        raise SharedRefused(f"{source}: not a gpualign modules artifact (config {config.get('mediaType')}, "
                            f"{len(layers)} layers)")
    size = layers[0].get("size")
    if not isinstance(size, int) or not 0 < size <= MAX_LAYER:
        raise SharedRefused(f"{source}: its layer's size {size!r} is not between 1 byte and {MAX_LAYER >> 20} MiB")
    return config, layers[0]


def _extract(layer: Path, into: Path, source: str) -> dict[str, Path]:
    """The layer's .ko files, each a regular file with a plain name; anything else refuses the whole artifact."""
    found: dict[str, Path] = {}
    try:
        with tarfile.open(layer, mode="r:gz") as tar:
            for member in tar:
                if not member.isreg() or not _plain_ko(member.name) or member.name in found:
                    raise SharedRefused(f"{source}: its layer holds {member.name!r}, not only plain .ko files")
                handle = tar.extractfile(member)
                assert handle is not None
                with handle, (into / member.name).open("wb") as out:
                    shutil.copyfileobj(handle, out, 1 << 20)
                found[member.name] = into / member.name
    except (tarfile.TarError, OSError, EOFError) as err:
        raise SharedRefused(f"{source}: its layer is not a readable tar.gz ({err.__class__.__name__})") from None
    return found


def _plain_ko(name: object) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]+\.ko", name) is not None


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
