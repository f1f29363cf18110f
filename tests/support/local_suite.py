"""A Debian archive of one's own, laid out and signed as Debian lays out and signs its own: dists/SUITE/InRelease
(clear-signed with a key made here, exported as the keyring apt would be given with signed-by), a Release listing
each index's SHA-256 and size, and each index under its path and under by-hash/SHA256/. What it carries is the
archive's own kernel metapackage stanzas (tests/data/debian-packages), or stanzas a test writes to announce a
kernel."""

from __future__ import annotations

import email.utils
import hashlib
import lzma
import os
import subprocess
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "debian-packages"


class LocalArchive:
    """An archive under `root`: `root/debian/dists/…` and `root/debian-security/dists/…`, signed by a key of its
    own (`keyring`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "gnupg"
        self.home.mkdir(parents=True, mode=0o700)
        try:
            self._gpg("--quick-gen-key", "gpualign test archive <archive@gpualign.test>", "ed25519", "sign", "never")
            self.keyring = root / "keyring.gpg"
            self.keyring.write_bytes(self._gpg("--export"))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the gpg-agent gpg started for this keyring's home (it would outlive the test)."""
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], capture_output=True,
                       timeout=30)

    def __enter__(self) -> LocalArchive:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _gpg(self, *args: str, stdin: bytes | None = None) -> bytes:
        proc = subprocess.run(["gpg", "--homedir", str(self.home), "--batch", "--yes", "--pinentry-mode", "loopback",
                               "--passphrase", "", *args], input=stdin, capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout

    def publish(self, suite: str, indexes: dict[str, str], *, valid_days: float = 7.0) -> None:
        """The suite with its Packages indexes (arch -> stanzas' text), signed now."""
        top = "debian-security" if suite.endswith("-security") else "debian"
        dists = self.root / top / "dists" / suite
        lines = []
        for arch, text in sorted(indexes.items()):
            data = lzma.compress(text.encode())
            digest = hashlib.sha256(data).hexdigest()
            folder = dists / "main" / f"binary-{arch}"
            (folder / "by-hash" / "SHA256").mkdir(parents=True, exist_ok=True)
            (folder / "Packages.xz").write_bytes(data)
            (folder / "by-hash" / "SHA256" / digest).write_bytes(data)
            lines.append(f" {digest} {len(data):>8} main/binary-{arch}/Packages.xz")
        now = time.time()
        release = (f"Origin: gpualign-test\nSuite: {suite}\nCodename: {suite}\n"
                   f"Date: {email.utils.formatdate(now, usegmt=True)}\n"
                   f"Valid-Until: {email.utils.formatdate(now + valid_days * 86400, usegmt=True)}\n"
                   f"Acquire-By-Hash: yes\nArchitectures: {' '.join(sorted(indexes))}\nComponents: main\n"
                   "SHA256:\n" + "\n".join(lines) + "\n")
        (dists / "Release").write_text(release)
        (dists / "InRelease").write_bytes(self._gpg("--clearsign", "--digest-algo", "SHA256",
                                                    stdin=release.encode()))

    def publish_recorded(self, release: str, arch: str) -> None:
        """The release's three suites with the archive's own recorded metapackage stanzas."""
        for suite in (release, f"{release}-updates", f"{release}-security"):
            self.publish(suite, {arch: (DATA / f"{suite}_{arch}.Packages").read_text()})

    def env(self, url: str) -> dict[str, str]:
        """What points gpualign at it (the mirror, its security suites, the keyring)."""
        return {"GPUALIGN_DEBIAN_MIRROR": f"{url}/debian", "GPUALIGN_DEBIAN_SECURITY_MIRROR": f"{url}/debian-security",
                "GPUALIGN_DEBIAN_KEYRING": str(self.keyring)}


def serve_directory(serve, root: Path):  # noqa: ANN001, ANN201 - the loopback fixture and its server
    """A loopback HTTP server for the files under root (404 for anything else)."""
    from tests.support.loopback_http import send

    def answer(h):  # noqa: ANN001
        path = (root / h.path.lstrip("/")).resolve()
        if path.is_file() and str(path).startswith(str(root.resolve()) + os.sep):
            send(h, path.read_bytes())
        else:
            send(h, b"not found", status=404)

    return serve(answer)


class RecordedIndexes:
    """Debian's recorded kernel-image stanzas, as the archive's door would hand them over (per suite and arch)."""

    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str:
        return (DATA / f"{suite}_{arch}.Packages").read_text()


class UnreadableIndexes:
    """An archive that answers every read with an error, as a mirror down would."""

    def kernel_images(self, suite: str, arch: str, component: str = "main") -> str:
        from gpualign.base.errors import GpualignError

        raise GpualignError("http://mirror/debian/dists/trixie/InRelease: HTTP 503")
