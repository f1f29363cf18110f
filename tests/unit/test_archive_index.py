"""The door to Debian's archive indexes (gpualign.ensure.archive_index), against a loopback mirror serving the
archive's own signed InRelease and Packages.xz (recorded from trixie-updates): verified as apt verifies them, with
Debian's keyring, and refused when anything was changed."""

from __future__ import annotations

import email.utils
import hashlib
from pathlib import Path

import pytest

from gpualign.ensure.archive import KEYRING
from gpualign.ensure.archive_index import ArchiveIndex, IndexRefused
from gpualign.model import archive_release
from tests.support.loopback_http import send

DATA = Path(__file__).resolve().parent.parent / "data" / "debian-packages"
IN_RELEASE = (DATA / "trixie-updates.InRelease").read_bytes()
PACKAGES = (DATA / "trixie-updates_main_amd64.Packages.xz").read_bytes()
SIGNED_ON = email.utils.parsedate_to_datetime(
    next(line for line in IN_RELEASE.decode().splitlines() if line.startswith("Date:")).split(":", 1)[1]
).timestamp()

assert Path(KEYRING).exists(), "Debian's keyring: scripts/install-debs installs debian-archive-keyring"


def mirror(serve, in_release: bytes = IN_RELEASE, packages: bytes = PACKAGES):  # noqa: ANN001, ANN201
    digest = hashlib.sha256(PACKAGES).hexdigest()

    def answer(h):  # noqa: ANN001
        if h.path.endswith("/dists/trixie-updates/InRelease"):
            if h.headers.get("If-Modified-Since") == "Thu, 03 Dec 2026 02:15:27 GMT":
                send(h, b"", status=304)
            else:
                send(h, in_release, headers={"Last-Modified": "Thu, 03 Dec 2026 02:15:27 GMT"})
        elif h.path.endswith(f"/main/binary-amd64/by-hash/SHA256/{digest}"):
            send(h, packages)
        else:
            send(h, b"not here", status=404)

    return serve(answer)


def test_the_archives_own_index_is_read_verified_and_then_only_asked_whether_it_changed(serve, tmp_path):
    server = mirror(serve)
    index = ArchiveIndex(mirror=f"{server.url}/debian", security=f"{server.url}/debian-security",
                         cache=tmp_path, now=SIGNED_ON + 3600)
    text = index.packages("trixie-updates", "amd64")
    assert "Package: tzdata" in text
    assert [p for p, _h, _port in server.seen] == ["/debian/dists/trixie-updates/InRelease",
                                                   f"/debian/dists/trixie-updates/main/binary-amd64/by-hash/SHA256/"
                                                   f"{hashlib.sha256(PACKAGES).hexdigest()}"]
    again = ArchiveIndex(mirror=f"{server.url}/debian", cache=tmp_path, now=SIGNED_ON + 7200)
    assert again.packages("trixie-updates", "amd64") == text
    assert again.fetched.requests == 1 and again.fetched.not_modified == 1  # a 304, and the index by its hash kept
    assert len(server.seen) == 3


def test_a_changed_inrelease_an_index_not_the_signed_one_or_an_expired_release_is_refused(serve, tmp_path):
    tampered = IN_RELEASE.replace(b"Valid-Until: Thu, 10 Dec", b"Valid-Until: Thu, 31 Dec")
    assert tampered != IN_RELEASE
    bad = mirror(serve, in_release=tampered)
    with pytest.raises(IndexRefused, match="is not signed by a key of"):
        ArchiveIndex(mirror=f"{bad.url}/debian", cache=tmp_path / "a", now=SIGNED_ON).release("trixie-updates")
    swapped = mirror(serve, packages=PACKAGES[:-1] + bytes([PACKAGES[-1] ^ 1]))
    with pytest.raises(IndexRefused, match="not the 1108 bytes hashing to"):
        ArchiveIndex(mirror=f"{swapped.url}/debian", cache=tmp_path / "b", now=SIGNED_ON).packages(
            "trixie-updates", "amd64")
    good = mirror(serve)
    with pytest.raises(IndexRefused, match="Valid-Until .* has passed"):
        ArchiveIndex(mirror=f"{good.url}/debian", cache=tmp_path / "c", now=SIGNED_ON + 30 * 86400).release(
            "trixie-updates")
    other = tmp_path / "other.gpg"
    other.write_bytes(Path("/usr/share/keyrings/debian-archive-removed-keys.gpg").read_bytes()
                      if Path("/usr/share/keyrings/debian-archive-removed-keys.gpg").exists() else b"")
    with pytest.raises(IndexRefused, match="is not signed by a key of"):
        ArchiveIndex(mirror=f"{good.url}/debian", cache=tmp_path / "d", keyring=str(other),
                     now=SIGNED_ON).release("trixie-updates")


def test_the_release_file_is_read_for_its_dates_and_hashes():
    text = ("Origin: Debian\nCodename: trixie-security\nDate: Wed, 02 Dec 2026 23:13:44 UTC\n"
            "Valid-Until: Wed, 09 Dec 2026 23:13:44 UTC\nAcquire-By-Hash: yes\nSHA256:\n"
            " ffdfc0b919fa70ee96eca136614b977b4aa3041920e03f1b7f755abe564d373f  2579986 main/binary-amd64/Packages\n")
    r = archive_release.parse(text)
    assert r.suite == "trixie-security" and r.by_hash and r.valid_until and r.date
    assert r.sha256["main/binary-amd64/Packages"][1] == 2579986
    assert r.problem(r.valid_until - 1) is None and "has passed" in (r.problem(r.valid_until + 1) or "")
