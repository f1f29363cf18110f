"""What a build on an empty disk fetches from the registry while Debian's archive is read (ensure.ahead): the guess,
and that a build takes only what is exactly what it would have fetched."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx2
import pytest

from gpualign.ensure import ahead, compose, shared
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.model.driver_tag import parse
from tests.support.blob_registry import BlobRegistry

KERNEL = "6.12.118+deb12-amd64"
SPEC = parse(f"535-{KERNEL.replace('+', '_')}-debian12")


def test_the_guess_is_the_newest_version_on_the_tags_branch_shared_for_its_kernel_and_flavour():
    tags = ["535.288.01-6.12.118_deb12-amd64-proprietary", "535.309.01-6.12.118_deb12-amd64-proprietary",
            "535.99.01-6.12.118_deb12-amd64-proprietary",  # older than 535.288 as numbers, not as text
            "550.163.01-6.12.118_deb12-amd64-proprietary",  # another branch
            "535.310.01-6.12.118_deb12-amd64-open",  # another flavour
            "535.311.01-6.12.117_deb12-amd64-proprietary",  # another kernel
            "535.312.01-x-6.12.118_deb12-amd64-proprietary"]  # not a version
    assert ahead.newest_modules(tags, "535", KERNEL, "proprietary") == shared.Key("535.309.01", KERNEL, "proprietary")
    assert ahead.newest_modules(tags, "570", KERNEL, "proprietary") is None
    assert ahead.newest_modules([], "535", KERNEL, "proprietary") is None


def test_the_user_spaces_of_a_version_are_those_of_its_release_and_architecture():
    tags = ["bookworm-amd64-535.309.01-30dde16da770", "bookworm-amd64-535.309.01-aaaaaaaaaaaa",
            "bookworm-arm64-535.309.01-30dde16da770", "trixie-amd64-535.309.01-30dde16da770",
            "bookworm-amd64-535.309.011-30dde16da770", "bookworm-amd64-535.309.01-30dde16da770-old"]
    assert ahead.userspace_candidates(tags, "bookworm", "amd64", "535.309.01") == tags[:2]


class Archive:
    """The archive's one part the guesses use: the kernel's Module.symvers, read once."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def symvers(self, kernel: str) -> Path:
        self.asked.append(kernel)
        return Path("/nonexistent")


class Remote:
    def __init__(self, tag: str) -> None:
        self.tag, self.closed = tag, False

    def close(self) -> None:
        self.closed = True


def registry_with(tmp_path: Path, versions: list[str]) -> tuple[BlobRegistry, RegistryClient]:
    fake = BlobRegistry()
    client = RegistryClient(RegistryRef("reg.io", "nvidia/driver", "https"),
                            transport=httpx2.MockTransport(fake.handler))
    for version in versions:
        ko = tmp_path / "made" / version / "nvidia.ko"
        ko.parent.mkdir(parents=True)
        ko.write_bytes(f"nvidia {version}".encode())
        shared.push(client, shared.Key(version, KERNEL, "proprietary"), [ko])
    return fake, client


@pytest.fixture
def fetched(monkeypatch) -> list[tuple[str, str]]:
    """compose.fetch replaced: the tags asked for, each answered by a Remote of that tag."""
    asked: list[tuple[str, str]] = []

    def fetch(_client, repo, tag, _arch, version, _trusted=()):
        asked.append((tag, version))
        return Remote(tag)

    monkeypatch.setattr(compose, "fetch", fetch)
    return asked


def test_a_build_takes_what_was_fetched_ahead_only_when_it_is_what_the_archive_names(tmp_path, monkeypatch,
                                                                                       fetched):
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    fake, client = registry_with(tmp_path, ["535.288.01", "535.309.01"])
    for tag in ("bookworm-amd64-535.309.01-30dde16da770", "bookworm-amd64-535.288.01-30dde16da770"):
        fake.manifests[("nvidia/driver-userspace", tag)] = b"{}"
    archive, said = Archive(), []
    guess = ahead.Ahead.start(SPEC, client, "proprietary", archive, said.append)  # type: ignore[arg-type]
    into = tmp_path / "cache" / "ensure" / "modules" / "535.309.01" / KERNEL / "proprietary" / "unsigned"
    older = shared.Key("535.288.01", KERNEL, "proprietary")
    assert guess.take_modules(older, into) is None and not into.exists()  # the archive names another version
    got = guess.take_modules(shared.Key("535.309.01", KERNEL, "proprietary"), into)
    assert [p.read_bytes() for p in got or []] == [b"nvidia 535.309.01"]
    key = shared.Key("535.309.01", KERNEL, "proprietary")
    assert shared.pulled_from(into) == f"{shared.where(client, key)}@{client.digest(key.tag, 'nvidia/driver-modules')}"
    assert guess.take_userspace("bookworm-amd64-535.309.01-bbbbbbbbbbbb") is None  # another package set
    assert fetched == [("bookworm-amd64-535.309.01-30dde16da770", "535.309.01")]  # only the guessed version's
    remote = guess.take_userspace("bookworm-amd64-535.309.01-30dde16da770")
    assert isinstance(remote, Remote) and not remote.closed
    assert guess.take_userspace("bookworm-amd64-535.309.01-30dde16da770") is None  # taken once
    guess.close()
    assert not remote.closed  # the build owns what it took
    assert archive.asked == [KERNEL] and len(said) == 1 and "535.309.01" in said[0]
    assert not any((tmp_path / "cache" / "ensure" / "ahead").iterdir())  # no scratch left


def test_what_is_not_taken_is_dropped_and_a_registry_that_cannot_be_listed_makes_no_guess(tmp_path, monkeypatch,
                                                                                           fetched):
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    fake, client = registry_with(tmp_path, ["535.309.01"])
    fake.manifests[("nvidia/driver-userspace", "bookworm-amd64-535.309.01-30dde16da770")] = b"{}"
    killed, running = (tmp_path / "cache" / "ensure" / "ahead" / name for name in ("build-killed", "build-running"))
    for left in (killed, running):
        (left / "modules").mkdir(parents=True)
    os.utime(killed, (time.time() - ahead.STALE_SECONDS - 60,) * 2)
    guess = ahead.Ahead.start(SPEC, client, "proprietary", Archive(), lambda _m: None)  # type: ignore[arg-type]
    guess._threads["userspace"].join()
    remote = guess.userspace
    guess.close()
    assert isinstance(remote, Remote) and remote.closed  # fetched, never taken: dropped
    assert not killed.exists() and running.exists()  # what a killed run left a day ago, and no other run's

    fake.listing_fails = True
    said: list[str] = []
    guess = ahead.Ahead.start(SPEC, client, "proprietary", Archive(), said.append)  # type: ignore[arg-type]
    into = tmp_path / "into"
    assert guess.take_modules(shared.Key("535.309.01", KERNEL, "proprietary"), into) is None
    assert guess.take_userspace("bookworm-amd64-535.309.01-30dde16da770") is None
    guess.close()
    assert said == [] and not into.exists()
    assert [t for t in threading.enumerate() if t.name.startswith("ensure-ahead-")] == []


def test_a_guess_the_artifacts_checks_refuse_is_no_guess_and_leaves_no_partial_directory(tmp_path, monkeypatch,
                                                                                        fetched):
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    fake, client = registry_with(tmp_path, ["535.309.01"])
    blobs = fake.blobs["nvidia/driver-modules"]
    key = shared.Key("535.309.01", KERNEL, "proprietary")
    (layer,) = (d["digest"] for d in json.loads(fake.manifests[("nvidia/driver-modules", key.tag)])["layers"])
    blobs[layer] = blobs[layer][:-1] + bytes([blobs[layer][-1] ^ 1])  # one bit changed in the registry's storage
    guess = ahead.Ahead.start(SPEC, client, "proprietary", Archive(), lambda _m: None)  # type: ignore[arg-type]
    into = tmp_path / "cache" / "ensure" / "modules" / "535.309.01" / KERNEL / "proprietary" / "unsigned"
    assert guess.take_modules(shared.Key("535.309.01", KERNEL, "proprietary"), into) is None
    assert not into.exists() and list(guess.scratch.iterdir()) == []  # no half-made directory anywhere
    guess.close()
    with pytest.raises(shared.SharedRefused, match="is not what its manifest names|digest"):
        shared.pull(client, shared.Key("535.309.01", KERNEL, "proprietary"), into)  # the build's own pull says why
    assert not into.exists() and list(into.parent.iterdir()) == []
