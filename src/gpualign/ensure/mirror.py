"""Mirror a published image into the ledger repository, by digest, every platform of an index (skopeo).

skopeo (Debian's) is the well-kept tool for registry-to-registry copies: it copies an index with all its platforms
and their blobs without unpacking anything (`copy --all --preserve-digests`). The source is named by digest, so
what lands is exactly what was read; the digest is read back from the ledger afterwards and compared.
"""

from __future__ import annotations

import subprocess

from gpualign.base.errors import BadInput
from gpualign.ensure.buildroot import BuildError
from gpualign.ensure.image import refusal
from gpualign.ledger.references import RegistryRef


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
        refused = refusal(proc.stderr, f"mirroring {tag}: refused")
        if refused:
            raise refused
        raise BuildError(f"mirroring {tag} from {source.image} failed: "
                         f"{(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
