"""Mirror a published image into the ledger repository, by digest, every platform of an index (skopeo).

skopeo (Debian's) is the well-kept tool for registry-to-registry copies: it copies an index with all its platforms
and their blobs without unpacking anything (`copy --all --preserve-digests`). The source is named by digest, so
what lands is exactly what was read; the digest is read back from the ledger afterwards and compared.
"""

from __future__ import annotations

import subprocess

from gpualign.ensure.debian import BuildError
from gpualign.ensure.image import PushRefused
from gpualign.errors import BadInput
from gpualign.ledger.registry import RegistryRef


def copy(source: RegistryRef, target: RegistryRef, tag: str, digest: str, *, authfile: str | None = None) -> None:
    cmd = ["skopeo", "copy", "--all", "--preserve-digests", "--retry-times", "2", "--quiet",
           f"--src-tls-verify={'false' if source.scheme == 'http' else 'true'}",
           f"--dest-tls-verify={'false' if target.scheme == 'http' else 'true'}"]
    if authfile:
        cmd += ["--authfile", authfile]
    cmd += [f"docker://{source.image}@{digest}", f"docker://{target.image}:{tag}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except FileNotFoundError:
        raise BadInput("skopeo is not installed: ensure mirrors published images with it "
                       "(scripts/install-debs installs it)") from None
    if proc.returncode != 0:
        low, last = proc.stderr.lower(), (proc.stderr.strip().splitlines() or ["failed"])[-1]
        if "unauthorized" in low or "authentication required" in low:
            raise PushRefused(f"mirroring {tag}: refused (401 unauthorized): {last}")
        if "denied" in low or "forbidden" in low:
            raise PushRefused(f"mirroring {tag}: refused (403 denied): {last}")
        raise BuildError(f"mirroring {tag} from {source.image} failed: {last}")
