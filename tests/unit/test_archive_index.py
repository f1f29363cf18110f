"""The door to Debian's archive indexes (gpualign.archive.indexes), against a loopback mirror serving the
archive's own signed InRelease and Packages.xz (recorded from trixie-updates): verified as apt verifies them, with
Debian's keyring, and refused when anything was changed."""

from __future__ import annotations

import email.utils
import hashlib
import lzma
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.archive.apt import KEYRING
from gpualign.archive.indexes import ArchiveIndex, IndexRefused
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
    text = index.kernel_images("trixie-updates", "amd64")
    assert text == ""  # trixie-updates carries tzdata, and no kernel image
    assert [p for p, _h, _port in server.seen] == ["/debian/dists/trixie-updates/InRelease",
                                                   f"/debian/dists/trixie-updates/main/binary-amd64/by-hash/SHA256/"
                                                   f"{hashlib.sha256(PACKAGES).hexdigest()}"]
    again = ArchiveIndex(mirror=f"{server.url}/debian", cache=tmp_path, now=SIGNED_ON + 7200)
    assert again.kernel_images("trixie-updates", "amd64") == text
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
        ArchiveIndex(mirror=f"{swapped.url}/debian", cache=tmp_path / "b", now=SIGNED_ON).kernel_images(
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


_RECORDED = "".join((DATA / name).read_text() + "\n" for name in sorted(p.name for p in DATA.glob("*.Packages")))
_OTHERS = lzma.decompress(PACKAGES).decode()  # trixie-updates' real index: tzdata and friends, no kernel


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=400), st.booleans())
def test_the_kernel_stanzas_read_in_any_pieces_are_the_ones_the_whole_index_gives(cuts, others_first):
    """The archive's recorded metapackage stanzas mixed with another real index's, cut anywhere: the filtered text
    names the same next kernels, and holds no stanza of another package."""
    from debian import deb822

    from gpualign.model import next_kernels

    whole = (_OTHERS + "\n" + _RECORDED) if others_first else (_RECORDED + "\n" + _OTHERS)
    data = whole.encode()
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(data[at:at + cut])
        at += cut
    pieces.append(data[at:])
    kept = next_kernels.kernel_image_stanzas(pieces)
    names = [p["Package"] for p in deb822.Packages.iter_paragraphs(kept.splitlines(True), use_apt_pkg=False)]
    assert names and all(n.startswith("linux-image-") for n in names)
    everything = [p["Package"] for p in deb822.Packages.iter_paragraphs(whole.splitlines(True), use_apt_pkg=False)]
    assert sorted(names) == sorted(n for n in everything if n.startswith("linux-image-"))
    assert next_kernels.metapackages(kept, "s") == next_kernels.metapackages(whole, "s")


def test_a_mirror_that_sends_only_an_etag_is_asked_by_it(serve, tmp_path):
    """Some mirrors and caches answer with an ETag and no Last-Modified: the next poll asks If-None-Match."""
    asked = []

    def answer(h):  # noqa: ANN001
        if h.path.endswith("/dists/trixie-updates/InRelease"):
            asked.append(h.headers.get("If-None-Match"))
            if h.headers.get("If-None-Match") == '"abc"':
                send(h, b"", status=304)
            else:
                send(h, IN_RELEASE, headers={"ETag": '"abc"'})
        else:
            send(h, b"not here", status=404)

    server = serve(answer)
    first = ArchiveIndex(mirror=f"{server.url}/debian", cache=tmp_path, now=SIGNED_ON + 60)
    first.release("trixie-updates")
    again = ArchiveIndex(mirror=f"{server.url}/debian", cache=tmp_path, now=SIGNED_ON + 120)
    again.release("trixie-updates")
    assert asked == [None, '"abc"'] and again.fetched.not_modified == 1 and again.fetched.bytes == 0


def test_nothing_is_written_outside_the_cache(serve, tmp_path, monkeypatch):
    """The chart's controller has a read-only root filesystem and no /tmp: only its cache is writable."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    server = mirror(serve)
    index = ArchiveIndex(mirror=f"{server.url}/debian", cache=tmp_path / "cache", now=SIGNED_ON + 60)
    assert index.kernel_images("trixie-updates", "amd64") == ""
