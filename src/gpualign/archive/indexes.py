"""The door to Debian's archive indexes, read as apt reads them and no more: a suite's InRelease, verified with
gpgv against Debian's keyring (or the `signed-by` keyring a private mirror signs with), then one Packages index,
fetched by its hash and trusted only when its bytes hash to what the signed InRelease says. No mirror, no `apt-get
update` of the whole archive: a poll asks for the InRelease with If-Modified-Since (a 304 is a few hundred bytes),
and an index already read under the same hash is not fetched again.

gpgv is the verifier because it is apt's: an OpenPGP implementation written here would be one more thing to trust.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gpualign.archive.apt import KEYRING, configured_mirror, configured_security
from gpualign.base.errors import GpualignError, Refused
from gpualign.loaders.archive_reading import ensure_root
from gpualign.model import archive_release, next_kernels

KEYRING_ENV = "GPUALIGN_DEBIAN_KEYRING"  # the keyring a private mirror's suites are signed with (apt's signed-by)


class IndexRefused(Refused):
    """The archive answered, but what it sent cannot be trusted: a bad signature, an expired Release, an index
    whose hash is not the signed one (exit 1)."""


class IndexNotCarried(IndexRefused):
    """The suite's signed Release names no index for that architecture (a mirror of one architecture only)."""


class IndexUnreachable(GpualignError):
    """The archive did not answer (exit 2; a later poll may succeed)."""

    retryable = True


@dataclass
class Fetched:
    """What one read cost: requests, bytes on the wire, answers not modified."""

    requests: int = 0
    bytes: int = 0
    not_modified: int = 0


def keyring_set() -> str:
    """$GPUALIGN_DEBIAN_KEYRING as set ("" when not): the one place it is read."""
    return os.environ.get(KEYRING_ENV) or ""


@dataclass
class ArchiveIndex:
    mirror: str = field(default_factory=configured_mirror)
    security: str = field(default_factory=configured_security)
    keyring: str = field(default_factory=lambda: keyring_set() or KEYRING)
    cache: Path = field(default_factory=lambda: ensure_root() / "archive-index")
    timeout: float = 30.0
    now: float | None = None  # the clock Valid-Until is judged by (None: time.time())
    fetched: Fetched = field(default_factory=Fetched)

    def base(self, suite: str) -> str:
        root = self.security if suite.endswith("-security") else self.mirror
        return f"{root.rstrip('/')}/dists/{suite}"

    # -- InRelease ----------------------------------------------------------------------------------------------
    def release(self, suite: str) -> archive_release.Release:
        """The suite's Release, verified (a copy kept from the last read when the archive says it has not changed,
        re-verified: a cache is no more trusted than the wire)."""
        kept = self.cache / "inrelease" / suite
        stamp = kept.with_suffix(".validators")  # the answer's Last-Modified and ETag, asked back with the next poll
        headers = _conditional(stamp.read_text()) if kept.exists() and stamp.exists() else {}
        body, validators = self._get(f"{self.base(suite)}/InRelease", headers)
        fresh = body is not None
        if body is None:
            self.fetched.not_modified += 1
            body = kept.read_bytes()
        text = self._verified(body, suite)
        release = archive_release.parse(text)
        if (why := release.problem(self.now if self.now is not None else time.time())) is not None:
            raise IndexRefused(f"{self.base(suite)}/InRelease: {why}")
        if fresh:  # kept only once verified
            _write(kept, body)
            if validators:
                _write(stamp, validators.encode())
            else:
                stamp.unlink(missing_ok=True)
        return release

    def _verified(self, signed: bytes, suite: str) -> str:
        """The signed text, as gpgv vouches for it with the keyring (never the unverified copy)."""
        if not Path(self.keyring).exists():
            raise IndexRefused(f"keyring {self.keyring} not found: install debian-archive-keyring, or set "
                               f"${KEYRING_ENV} to your mirror's signing keyring")
        self.cache.mkdir(parents=True, exist_ok=True)  # the only place written: a controller's root is read-only
        with tempfile.TemporaryDirectory(prefix=".inrelease-", dir=self.cache) as tmp:
            path = Path(tmp) / "InRelease"
            path.write_bytes(signed)
            try:
                proc = subprocess.run(["gpgv", "--status-fd", "2", "--keyring", self.keyring, "--output", "-",
                                       str(path)], capture_output=True, timeout=60)
            except FileNotFoundError:
                raise IndexRefused("gpgv is not installed (Debian's gpgv): nothing can be verified") from None
        status = proc.stderr.decode(errors="replace")
        if proc.returncode != 0 or "[GNUPG:] VALIDSIG" not in status:
            why = next((line.removeprefix("[GNUPG:] ") for line in status.splitlines()
                        if line.startswith(("[GNUPG:] BADSIG", "[GNUPG:] NO_PUBKEY", "[GNUPG:] ERRSIG",
                                            "[GNUPG:] EXPKEYSIG", "[GNUPG:] REVKEYSIG"))), "no valid signature")
            raise IndexRefused(f"{self.base(suite)}/InRelease is not signed by a key of {self.keyring}: {why}")
        return proc.stdout.decode("utf-8", errors="replace")

    # -- an index ---------------------------------------------------------------------------------------------------
    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str:
        """The kernel image stanzas (`linux-image-*`) of one Packages index of the suite, as its verified Release
        names it (xz), fetched by its hash. The index is streamed to disk while it is hashed, trusted only at the
        signed hash and size, and read in pieces: a release's main index (about 10 MB compressed, 56 MB of text) is
        never held whole. What it yields is kept under the index's hash, so a poll whose suite did not change reads
        a few kilobytes from this process's own cache."""
        release = self.release(suite)
        path = f"{component}/binary-{arch}/Packages.xz"
        if path not in release.sha256:
            raise IndexNotCarried(f"{self.base(suite)}/InRelease names no {path}")
        digest, size = release.sha256[path]
        kept = self.cache / "kernel-images" / digest
        if kept.exists():
            return kept.read_text()
        url = f"{self.base(suite)}/{component}/binary-{arch}/by-hash/SHA256/{digest}" if release.by_hash \
            else f"{self.base(suite)}/{path}"
        self.cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=self.cache) as raw:
            got, length = self._download(url, raw)
            if got != digest or length != size:
                raise IndexRefused(f"{url}: {length} bytes hashing to {got[:16]}…, not the {size} bytes "
                                   f"hashing to {digest[:16]}… the signed InRelease names")
            raw.seek(0)
            text = next_kernels.kernel_image_stanzas(_xz_pieces(raw))
        _write(kept, text.encode())
        return text

    def _download(self, url: str, into: BinaryIO) -> tuple[str, int]:
        """The body written to `into` as it arrives: its SHA-256 and length."""
        request = urllib.request.Request(url, headers={"User-Agent": "gpualign"})
        self.fetched.requests += 1
        digest = hashlib.sha256()
        length = 0
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the mirror's URL
                while piece := response.read(_PIECE):
                    digest.update(piece)
                    into.write(piece)
                    length += len(piece)
        except urllib.error.HTTPError as err:
            raise IndexUnreachable(f"{url}: HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            raise IndexUnreachable(f"{url}: {getattr(err, 'reason', err)}") from None
        self.fetched.bytes += length
        return digest.hexdigest(), length

    def _get(self, url: str, headers: dict[str, str]) -> tuple[bytes | None, str]:
        """(body, its validators: Last-Modified and ETag, one a line, as `_conditional` reads them back), or
        (None, "") for 304 Not Modified. A mirror that sends neither is asked for the whole file each time."""
        request = urllib.request.Request(url, headers={"User-Agent": "gpualign", **headers})
        self.fetched.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the mirror's URL
                body = response.read()
                self.fetched.bytes += len(body)
                validators = [f"{name}: {value}" for name in ("Last-Modified", "ETag")
                              if (value := response.headers.get(name))]
                return body, "\n".join(validators)
        except urllib.error.HTTPError as err:
            if err.code == 304:
                return None, ""
            raise IndexUnreachable(f"{url}: HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise IndexUnreachable(f"{url}: {reason}") from None


_PIECE = 1 << 16
_ASKED_BACK = {"Last-Modified": "If-Modified-Since", "ETag": "If-None-Match"}


def _conditional(validators: str) -> dict[str, str]:
    """The request headers that ask whether a kept answer changed (its Last-Modified and ETag, one a line)."""
    out = {}
    for line in validators.splitlines():
        name, _, value = line.partition(": ")
        if name in _ASKED_BACK and value:
            out[_ASKED_BACK[name]] = value
    return out


def _xz_pieces(raw: BinaryIO) -> Iterator[bytes]:
    """An xz file decompressed piece by piece."""
    unxz = lzma.LZMADecompressor()
    while piece := raw.read(_PIECE):
        out = unxz.decompress(piece)
        if out:
            yield out
    if not unxz.eof:
        raise IndexRefused("a Packages.xz index ends before its xz stream does")


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)
