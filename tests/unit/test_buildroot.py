"""The build root's bookkeeping: which cached root serves a compile, what a new root carries over, and that a root a
compile holds is never removed. (Making a root for real, with mmdebstrap, is in tests/integration/test_ensure_build.)"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpualign.ensure import buildroot


class FakeArchive:
    suite = key = "bookworm"
    arch = "amd64"
    cross = False

    def __init__(self, served: dict[str, str]) -> None:
        self.served = served

    def version_of(self, package: str) -> str | None:
        return self.served.get(package)

    target_version = version_of

    def require_headers(self, kernel: str) -> str:
        package = f"linux-headers-{kernel}"
        assert package in self.served, f"asked for {package}, which the archive does not serve"
        return package


def fake_root(cache: Path, key: str, kernels: list[str], flavours: list[str], source: str = "535.261.03-1",
              age: int = 0) -> Path:
    path = cache / "ensure" / "build-roots" / "bookworm" / key
    (path / "rootfs").mkdir(parents=True)
    packages = {f"linux-headers-{k}": "6.1.1-1" for k in kernels}
    packages |= {buildroot.FLAVOURS[f][0]: source for f in flavours}
    (path / "manifest.json").write_text(json.dumps({"kernels": {k: f"linux-headers-{k}" for k in kernels},
                                                    "flavours": flavours, "packages": packages}))
    os.utime(path / "manifest.json", (1_000_000 + age, 1_000_000 + age))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path))
    return tmp_path


def test_upstream_version_drops_epoch_debian_revision_and_repack_suffix() -> None:
    assert buildroot.upstream("535.261.03-1~deb12u1") == "535.261.03"
    assert buildroot.upstream("1:535.309.01+dfsg-2") == "535.309.01"


def test_roots_are_listed_newest_first_and_a_broken_manifest_is_skipped(cache: Path) -> None:
    fake_root(cache, "old", ["6.1.0-47-amd64"], [], age=1)
    fake_root(cache, "new", ["6.1.0-50-amd64"], [], age=2)
    broken = cache / "ensure" / "build-roots" / "bookworm" / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    assert [r.path.name for r in buildroot.roots(FakeArchive({}))] == ["new", "old"]  # type: ignore[arg-type]
    assert buildroot.ready(FakeArchive({}), "6.1.0-47-amd64")  # type: ignore[arg-type]
    assert not buildroot.ready(FakeArchive({}), "6.1.0-99-amd64")  # type: ignore[arg-type]


def test_a_cached_root_with_the_kernel_and_the_current_source_is_used(cache: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = fake_root(cache, "r1", ["6.1.0-47-amd64", "6.1.0-50-amd64"], ["proprietary"])
    monkeypatch.setattr(buildroot, "_make", lambda *a: pytest.fail("a new root was made"))
    archive = FakeArchive({"nvidia-kernel-source": "535.261.03-1"})
    with buildroot.held(archive, "6.1.0-50-amd64", "proprietary") as root:  # type: ignore[arg-type]
        assert root.path == path and root.version("nvidia-kernel-source") == "535.261.03"
    with buildroot.held(archive, "6.1.0-47-amd64") as root:  # type: ignore[arg-type]  # no flavour: sign-file
        assert root.path == path


def test_a_root_whose_source_debian_has_replaced_is_not_compiled_in(cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_root(cache, "r1", ["6.1.0-47-amd64"], ["proprietary"], source="535.261.03-1")
    made: list[tuple[dict[str, str], tuple[str, ...]]] = []

    def make(archive: object, wanted: tuple[dict[str, str], tuple[str, ...]], progress: object) -> buildroot.Root:
        made.append(wanted)
        return buildroot.Root(fake_root(cache, "r2", list(wanted[0]), list(wanted[1]), source="535.309.01-1"),
                              wanted[0], wanted[1], {"nvidia-kernel-source": "535.309.01-1"})

    monkeypatch.setattr(buildroot, "_make", make)
    archive = FakeArchive({"nvidia-kernel-source": "535.309.01-1", "linux-headers-6.1.0-47-amd64": "6.1.1-1"})
    with buildroot.held(archive, "6.1.0-47-amd64", "proprietary") as root:  # type: ignore[arg-type]
        assert root.version("nvidia-kernel-source") == "535.309.01"
    assert made == [({"6.1.0-47-amd64": "linux-headers-6.1.0-47-amd64"}, ("proprietary",))]
    assert [r.path.name for r in buildroot.roots(archive)] == ["r2"]  # type: ignore[arg-type]  # r1 removed


def test_a_new_root_carries_the_newest_roots_kernels_that_the_archive_still_serves(cache: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    fake_root(cache, "r1", ["6.1.0-41-amd64", "6.1.0-47-amd64"], ["open"])
    archive = FakeArchive({f"linux-headers-6.1.0-{n}-amd64": "1" for n in (47, 50, 51)})  # 41 is gone
    kernels, flavours = buildroot._wanted(archive, buildroot.roots(archive),  # type: ignore[arg-type]
                                          "6.1.0-50-amd64", "proprietary", ("6.1.0-51-amd64",))
    assert list(kernels) == ["6.1.0-50-amd64", "6.1.0-51-amd64", "6.1.0-47-amd64"]
    assert flavours == ("proprietary", "open")


def test_a_new_root_stays_small_rather_than_carrying_everything(cache: Path) -> None:
    fake_root(cache, "r1", [f"6.1.0-{n}-amd64" for n in (40, 41, 42)], ["open"])
    archive = FakeArchive({f"linux-headers-6.1.0-{n}-amd64": "1" for n in range(40, 52)})
    kernels, flavours = buildroot._wanted(archive, buildroot.roots(archive),  # type: ignore[arg-type]
                                          "6.1.0-50-amd64", "proprietary", ("6.1.0-51-amd64",))
    assert list(kernels) == ["6.1.0-50-amd64", "6.1.0-51-amd64"]  # 5 kernels would pass MAX_KERNELS
    assert flavours == ("proprietary",)


def test_a_root_a_compile_holds_is_not_removed_and_a_free_one_is(cache: Path) -> None:
    archive = FakeArchive({"nvidia-kernel-source": "535.261.03-1"})
    busy = fake_root(cache, "busy", ["6.1.0-47-amd64"], ["proprietary"], age=1)
    free = fake_root(cache, "free", ["6.1.0-41-amd64"], [], age=0)
    keep = fake_root(cache, "keep", ["6.1.0-50-amd64"], [], age=2)
    inside, release = threading.Event(), threading.Event()

    def compile_in_busy() -> None:
        with buildroot.held(archive, "6.1.0-47-amd64", "proprietary") as root:  # type: ignore[arg-type]
            assert root.path == busy
            inside.set()
            release.wait(10)

    t = threading.Thread(target=compile_in_busy)
    t.start()
    assert inside.wait(10)
    buildroot._remove_unused(archive, keep=keep)  # type: ignore[arg-type]
    assert busy.exists() and keep.exists() and not free.exists()
    release.set()
    t.join(10)
    buildroot._remove_unused(archive, keep=keep)  # type: ignore[arg-type]
    assert not busy.exists() and keep.exists()


def test_cached_modules_are_found_offline_without_a_root_preferring_the_roots_source(cache: Path) -> None:
    from gpualign.ensure import debian

    for version in ("535.261.03", "535.309.01", "535.54.03"):
        out = debian.modules_dir("6.1.0-50-amd64", "proprietary", version, None)
        out.mkdir(parents=True)
        (out / "nvidia.ko").write_bytes(b"\x7fELF")
        (out / ".complete").write_text("1\n")

    class Offline:
        suite = key = "bookworm"  # where its roots are: a name, not a reading of the archive

        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the archive was asked ({name}) though the modules are cached")

    assert debian._compiled_versions("6.1.0-50-amd64", "proprietary") == ["535.309.01", "535.261.03", "535.54.03"]
    built = debian.compile_modules(Offline(), "6.1.0-50-amd64")  # type: ignore[arg-type]
    assert built.cached and built.driver_version == "535.309.01"  # no root: the newest
    fake_root(cache, "r1", ["6.1.0-47-amd64"], ["proprietary"], source="535.261.03-1~deb12u1")
    built = debian.compile_modules(Offline(), "6.1.0-50-amd64")  # type: ignore[arg-type]
    assert built.cached and built.driver_version == "535.261.03"  # the source the cached root has


def test_the_modules_key_is_remembered_in_the_cache_and_hashed_again_when_a_file_changes(cache: Path,
                                                                                         tmp_path: Path) -> None:
    import hashlib

    from gpualign.ensure import debian, image

    def direct(files: list[Path]) -> str:
        digest = hashlib.sha256()
        for ko in sorted(files):
            digest.update(ko.name.encode() + b"\0" + hashlib.sha256(ko.read_bytes()).digest())
        return digest.hexdigest()

    out = debian.modules_dir("6.1.0-50-amd64", "proprietary", "535.309.01", None)
    out.mkdir(parents=True)
    for name in ("nvidia.ko", "nvidia-uvm.ko"):
        (out / name).write_bytes(name.encode() * 1000)
    files = sorted(out.glob("*.ko"))
    assert image.modules_key(files) == direct(files) and (out / ".modules-sha256").exists()
    assert image.modules_key(files) == direct(files)  # from the memo
    (out / "nvidia.ko").write_bytes(b"rebuilt" * 999)
    assert image.modules_key(files) == direct(files)  # a changed file is hashed again
    given = tmp_path / "given"  # --modules-from: a user's directory is never written to
    given.mkdir()
    (given / "nvidia.ko").write_bytes(b"x")
    assert image.modules_key([given / "nvidia.ko"]) == direct([given / "nvidia.ko"])
    assert not (given / ".modules-sha256").exists()


def test_a_new_root_never_replaces_one_a_compile_holds_even_with_the_same_packages(cache: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch
                                                                                    ) -> None:
    import fcntl
    import subprocess

    stale = fake_root(cache, "stale", ["6.1.0-47-amd64"], ["proprietary"], source="535.261.03-1")
    made: list[list[str]] = []

    def mmdebstrap(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Stands in for mmdebstrap: the root's directory, and the extract hook's listing of what it unpacked; and
        for dpkg-deb, reading and unpacking the headers and module source downloaded."""
        if cmd[0] == "dpkg-deb":
            name = Path(cmd[-1]).stem if "--show" in cmd[1] else ""
            shown = f"{name}\t{'535.309.01-1' if name == 'nvidia-kernel-source' else '1'}"
            return subprocess.CompletedProcess(cmd, 0, shown if "--show" in cmd[1] else "", "")
        made.append(cmd)
        (Path(cmd[-1]) / "usr" / "bin").mkdir(parents=True)
        env = kwargs["env"]
        assert isinstance(env, dict)
        packages = next(c for c in cmd if c.startswith("--include=")).split("=", 1)[1].split(",")
        Path(env["GPUALIGN_LISTING"]).write_text("".join(
            f"{p}\t{'535.309.01-1' if p == 'nvidia-kernel-source' else '1'}\n" for p in packages))
        return subprocess.CompletedProcess(cmd, 0)

    class Archive(FakeArchive):
        def source_lines(self, native: bool = False) -> list[str]:
            return []

        def target(self, package: str) -> str:
            return package

        def target_depends(self, package: str) -> list[str]:
            return ["linux-headers-6.1.0-47-common", "linux-kbuild-6.1", "linux-compiler-gcc-12-x86"]

        def download(self, packages: list[str], into: Path) -> subprocess.CompletedProcess[str]:
            for package in packages:
                (into / f"{package}.deb").write_text("")
            return subprocess.CompletedProcess(packages, 0, "", "")

    monkeypatch.setattr(buildroot.subprocess, "run", mmdebstrap)
    monkeypatch.setattr(buildroot.os, "geteuid", lambda: 0)
    archive = Archive({"nvidia-kernel-source": "535.309.01-1", "linux-headers-6.1.0-47-amd64": "1"})
    with (stale.parent / "stale.use").open("w") as compiling:  # a compile still in the stale root
        fcntl.flock(compiling, fcntl.LOCK_SH)
        with buildroot.held(archive, "6.1.0-47-amd64", "proprietary") as root:  # type: ignore[arg-type]
            assert root.path != stale and root.version("nvidia-kernel-source") == "535.309.01"
            assert (root.rootfs / "usr/bin/awk").is_symlink() and (root.rootfs / "usr/bin/cc").is_symlink()
        assert stale.exists() and (stale / "manifest.json").exists()  # held: kept
    assert len(made) == 1 and "--variant=extract" in made[0]
    included = next(c for c in made[0] if c.startswith("--include=")).split("=", 1)[1].split(",")
    assert "linux-kbuild-6.1" in included and "linux-headers-6.1.0-47-amd64" not in included  # unpacked, alone
    with buildroot.held(archive, "6.1.0-47-amd64", "proprietary") as again:  # type: ignore[arg-type]
        assert again.path == root.path  # the new root serves the next compile; nothing is made
    assert len(made) == 1


def test_two_builds_of_one_kernel_at_once_compile_it_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two compiles of one kernel's flavour would share one directory of the build root (and remove each other's
    files): the second waits for the first, then takes its modules from the cache."""
    import contextlib

    from gpualign.ensure import debian

    compiles: list[str] = []
    started, finish = threading.Event(), threading.Event()

    class Root:
        def version(self, _package: str) -> str:
            return "535.309.01"

    @contextlib.contextmanager
    def held(*_a: object, **_k: object) -> Iterator[Root]:
        yield Root()

    def compile_(_root: object, kernel: str, flavour: str, version: str, *_a: object) -> debian.Built:
        compiles.append(kernel)
        started.set()
        finish.wait(10)
        out = debian.modules_dir(kernel, flavour, version, None)
        out.mkdir(parents=True)
        (out / "nvidia.ko").write_bytes(b"\x7fELF")
        (out / ".complete").write_text("1\n")
        return debian.Built(kernel, flavour, version, out, 1.0, False)

    monkeypatch.setattr(debian.buildroot, "held", held)
    monkeypatch.setattr(debian.buildroot, "roots", lambda _archive: [])
    monkeypatch.setattr(debian.buildroot, "cross_prefix", lambda _archive: "")
    monkeypatch.setattr(debian, "_compile", compile_)

    class Archive:
        suite = key = "bookworm"

    said: list[str] = []
    results: list[debian.Built] = []
    first = threading.Thread(target=lambda: results.append(
        debian.compile_modules(Archive(), "6.1.0-50-amd64")))  # type: ignore[arg-type]
    second = threading.Thread(target=lambda: results.append(
        debian.compile_modules(Archive(), "6.1.0-50-amd64", progress=said.append)))  # type: ignore[arg-type]
    try:  # the threads end before the test does, whatever fails: never writing once GPUALIGN_CACHE is restored
        first.start()
        assert started.wait(10)
        second.start()
        deadline = time.monotonic() + 10
        while not any("waiting for another build" in s for s in said) and time.monotonic() < deadline:
            time.sleep(0.01)
        waited = list(said)
    finally:
        finish.set()
        first.join(10)
        if second.ident is not None:
            second.join(10)
    assert any("waiting for another build of 6.1.0-50-amd64's proprietary modules" in s for s in waited)
    assert compiles == ["6.1.0-50-amd64"]  # compiled once
    assert sorted(r.cached for r in results) == [False, True]  # the second took the first's modules
