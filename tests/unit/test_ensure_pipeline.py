"""ensure's pipeline, branch by branch, on fakes (ensure.kit): shared modules the kernel refuses are compiled again, a
refused compile pushes nothing, a refused share is said and the image still lands, a tag made while a run waited is
not built again, and a mirror must land the digest it copied. No root, no compile, no buildah: the registry is
gpualign's own client over a registry in memory, and the shared modules go through it for real."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.ensure import debian, run, shared
from gpualign.ensure.debian import Built
from gpualign.ensure.image import PushRefused
from gpualign.ensure.kit import Kit
from gpualign.ensure.outcome import (
    FoundMeanwhile,
    ModuleOrigin,
    Pushed,
    Shared,
    SharedState,
    TagAction,
    Timed,
    Verified,
    outcome_of,
)
from gpualign.ensure.stage import NotVerified, Options
from gpualign.judging.kernel_console import KernelVerdict, Load
from gpualign.judging.verify import ModuleResult, Verification
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.model import driver_tag
from tests.support.blob_registry import BlobRegistry

TAG = "580-6.1.0-50-amd64-debian12"
SPEC = driver_tag.parse(TAG)
VERSION = "580.95.05"
GOOD, BAD = b"\x7fELF compiled here", b"\x7fELF that the kernel refuses"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUALIGN_COSIGN_KEY", raising=False)
    monkeypatch.delenv("GPUALIGN_TRUSTED_KEYS", raising=False)


class Refusing(BlobRegistry):
    """Refuses every upload into `refused` (HTTP 403), as a registry whose token may not push there."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        if request.method in ("POST", "PUT") and request.url.path.startswith(f"/v2/{self.refused}/"):
            return httpx2.Response(403, json={"errors": [{"code": "DENIED", "message": "push denied"}]})
        return super().handler(request)


def client(fake: BlobRegistry, host: str = "ledger.test") -> RegistryClient:
    return RegistryClient(RegistryRef(host, "nvidia/driver", "https"), transport=httpx2.MockTransport(fake.handler))


@dataclass
class Archive:
    """What a build asks of Debian's archive."""

    key: str = "fake"
    suite: str = "bookworm"
    arch: str = "amd64"

    def for_tag_kernel(self, os_tag: str, kernel: str) -> Archive:
        return self

    def target_version(self, package: str) -> str:
        return f"{VERSION}-1~deb12u1"

    def require_headers(self, kernel: str) -> None:
        raise AssertionError("a ready build root is never asked for its headers")


@dataclass
class Compiler:
    """The module cache as debian.compile_modules keeps it: shared modules pulled into it are found there."""

    version: str = VERSION
    compiles: int = 0

    def ready(self, archive: object, kernel: str) -> bool:
        return True

    def cached(self, archive: object, kernel: str, flavour: str) -> bool:
        return False

    def compile(self, archive: object, kernel: str, flavour: str, **_: object) -> Built:
        directory = debian.modules_dir(kernel, flavour, self.version, None)
        cached = any(directory.glob("*.ko"))
        if not cached:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "nvidia.ko").write_bytes(GOOD)
            self.compiles += 1
        return Built(kernel, flavour, self.version, directory, 0.0 if cached else 42.0, cached, 0.0 if cached else 80.0)


def verifier(files: list[Path], spec: driver_tag.TagSpec, version: str, archive: object,
             signing: object) -> Verification:
    """The kernel's checks: modules whose bytes are BAD disagree about a symbol."""
    results = tuple(ModuleResult(f.name, 10, ("nv_symbol",) if f.read_bytes() == BAD else (),
                                 ("disagrees about version of symbol nv_symbol",) if f.read_bytes() == BAD else ())
                    for f in files)
    return Verification(spec.kernel, version, results)


@dataclass
class Images:
    """The image's path: what it was asked to push, and the digest the ledger answers."""

    pushed: list[bytes] = field(default_factory=list)
    getting_userspace: bool = False

    def start_userspace(self, driver_version: str) -> None:
        self.getting_userspace = True

    def image(self, made, checked) -> str:
        return "local/" + "+".join(sorted(hashlib.sha256(f.read_bytes()).hexdigest()[:8] for f in made.files))

    def push(self, made: str) -> str:
        self.pushed.append(made.encode())
        return "sha256:" + hashlib.sha256(made.encode()).hexdigest()


def kit(compiler: Compiler, images: Images, **more) -> Kit:
    return Kit(compiler=compiler, verifier=verifier, images=lambda *_a: images,
               **{"kernel_load": accepted_by_the_kernel, "kernel_prepare": lambda kernel: None, **more})


def accepted_by_the_kernel(files: list[Path], kernel: str, trust: tuple[bytes, ...] = ()) -> KernelVerdict:
    """The kernel's verdict on modules that got as far as a machine without a GPU allows (the VM's words)."""
    return KernelVerdict(kernel, Load.ACCEPTED, ("NVRM: No NVIDIA GPU found.",))


def options(target: RegistryClient, **more) -> Options:
    return Options(target=target, archive=Archive(), **{"cosign_key": None, **more})  # type: ignore[arg-type]


def VOUCHED(image: str, kernel: str, arch: str, authfile: str | None, modules: str) -> None:  # noqa: N802
    """An upstream image whose labels name its build: nothing against it."""
    return None


class _NeverSigns:
    name = "never"

    def sign(self, data: bytes) -> bytes:
        raise AssertionError("signed an image nothing vouched for")


NEVER_SIGNS = _NeverSigns()


def said() -> tuple[list[str], run.Say]:
    lines: list[str] = []
    return lines, lambda tag, message: lines.append(message)


def share_from_another_build(target: RegistryClient, content: bytes, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "nvidia.ko").write_bytes(content)
    shared.push(target, shared.Key(VERSION, SPEC.kernel, "proprietary"), [elsewhere / "nvidia.ko"])


def test_shared_modules_the_kernel_refuses_are_dropped_and_compiled_here(tmp_path):
    target = client(BlobRegistry())
    share_from_another_build(target, BAD, tmp_path)
    compiler, images = Compiler(), Images()
    lines, say = said()
    out = run.ensure_one(SPEC, options(target), say, run.TagPlan(SPEC, TagAction.BUILD), kit(compiler, images))
    assert compiler.compiles == 1 and images.getting_userspace
    assert out.done and out.action == TagAction.BUILD and out.modules == ModuleOrigin.COMPILED
    where = shared.where(target, shared.Key(VERSION, SPEC.kernel, "proprietary"))
    assert out.shared is not None and out.shared.state == SharedState.REFUSED
    assert re.fullmatch(rf"{re.escape(where)}@sha256:[0-9a-f]{{64}}: disagrees about version of symbol nv_symbol",
                        out.shared.why)
    assert out.as_dict()["shared"].startswith("refused: ")
    assert len(images.pushed) == 1 and hashlib.sha256(GOOD).hexdigest()[:8] in images.pushed[0].decode()
    assert out.digest == "sha256:" + hashlib.sha256(images.pushed[0]).hexdigest()
    assert any("refused by the kernel's checks" in line and "compiling instead" in line for line in lines)
    assert not any(debian.modules_dir(SPEC.kernel, "proprietary", VERSION, None).glob("*.ko.shared*"))


def test_shared_modules_the_kernel_accepts_are_taken_without_a_compile(tmp_path):
    target = client(BlobRegistry())
    share_from_another_build(target, GOOD, tmp_path)
    compiler, images = Compiler(), Images()
    out = run.ensure_one(SPEC, options(target), said()[1], run.TagPlan(SPEC, TagAction.BUILD), kit(compiler, images))
    assert compiler.compiles == 0 and out.modules == ModuleOrigin.SHARED
    assert out.shared == Shared(SharedState.PULLED) and "shared_pull" in out.seconds and out.done


def test_a_build_the_booted_kernel_refuses_pushes_nothing_and_one_it_accepts_says_so():
    """The kernel decides, after the offline checks: its refusal, in its words, stops the push; its acceptance is in
    the report (kernel_load) with the time it took."""
    refusing = KernelVerdict(SPEC.kernel, Load.REFUSED, ("nvidia: disagrees about version of symbol module_layout",))
    images = Images()
    with pytest.raises(NotVerified, match=r"kernel 6\.1\.0-50-amd64 refused the modules: nvidia: disagrees about "
                                          r"version of symbol module_layout; nothing pushed"):
        run.ensure_one(SPEC, options(client(BlobRegistry())), said()[1], run.TagPlan(SPEC, TagAction.BUILD),
                       kit(Compiler(), images, kernel_load=lambda files, kernel, trust: refusing))
    assert images.pushed == []
    loaded: list[tuple[list[str], str, tuple[bytes, ...]]] = []

    def booted(files: list[Path], kernel: str, trust: tuple[bytes, ...]) -> KernelVerdict:
        loaded.append(([f.name for f in files], kernel, trust))
        return accepted_by_the_kernel(files, kernel)

    lines, say = said()
    out = run.ensure_one(SPEC, options(client(BlobRegistry())), say, run.TagPlan(SPEC, TagAction.BUILD),
                         kit(Compiler(), Images(), kernel_load=booted))
    assert out.done and loaded == [(["nvidia.ko"], SPEC.kernel, ())]  # no signing key: no Secure Boot
    assert out.as_dict()["kernel_load"]["verdict"] == "accepted" and "kernel_load" in out.seconds
    assert "kernel 6.1.0-50-amd64 accepted the modules: NVRM: No NVIDIA GPU found." in lines
    skipped = run.ensure_one(SPEC, options(client(BlobRegistry()), kernel_load=False), said()[1],
                             run.TagPlan(SPEC, TagAction.BUILD), kit(Compiler(), Images(), kernel_load=refusing))
    assert skipped.done and skipped.as_dict()["kernel_load"] == {"kernel": SPEC.kernel, "verdict": "skipped",
                                                                 "why": "switched off for this run"}


def test_compiled_modules_the_kernel_refuses_push_nothing():
    target = client(BlobRegistry())

    class Broken(Compiler):
        def compile(self, archive, kernel, flavour, **more):
            built = super().compile(archive, kernel, flavour, **more)
            (built.directory / "nvidia.ko").write_bytes(BAD)
            return built

    images = Images()
    with pytest.raises(NotVerified, match=r"would not load on 6\.1\.0-50-amd64: disagrees about version of symbol "
                                          r"nv_symbol .*1 of 10 symbols refused\); nothing pushed"):
        run.ensure_one(SPEC, options(target), said()[1], run.TagPlan(SPEC, TagAction.BUILD), kit(Broken(), images))
    assert images.pushed == []
    assert not shared.has(target, shared.Key(VERSION, SPEC.kernel, "proprietary"))  # nothing refused is shared


def test_modules_of_another_branch_are_refused_before_anything_is_checked():
    images = Images()
    with pytest.raises(NotVerified, match="the modules are NVIDIA 535.261.03, not branch 580; nothing pushed"):
        run.ensure_one(SPEC, options(client(BlobRegistry())), said()[1], run.TagPlan(SPEC, TagAction.BUILD),
                       kit(Compiler(version="535.261.03"), images))
    assert images.pushed == []


def test_a_share_the_registry_refuses_is_said_and_the_image_still_lands():
    target = client(Refusing("nvidia/driver-modules"))
    lines, say = said()
    out = run.ensure_one(SPEC, options(target), say, run.TagPlan(SPEC, TagAction.BUILD), kit(Compiler(), Images()))
    assert out.done and out.modules == ModuleOrigin.COMPILED
    assert out.shared is not None and out.shared.state == SharedState.NOT_PUSHED and "403" in out.shared.why
    assert any(line.startswith("shared modules not pushed (") for line in lines)


def test_a_compile_is_shared_for_later_builds():
    target = client(BlobRegistry())
    out = run.ensure_one(SPEC, options(target), said()[1], run.TagPlan(SPEC, TagAction.BUILD),
                         kit(Compiler(), Images()))
    assert out.shared == Shared(SharedState.PUSHED)
    assert shared.has(target, shared.Key(VERSION, SPEC.kernel, "proprietary"))


def test_no_share_asked_for_takes_and_gives_nothing(tmp_path):
    target = client(BlobRegistry())
    share_from_another_build(target, GOOD, tmp_path)
    compiler = Compiler()
    out = run.ensure_one(SPEC, options(target, share_pull=False, share_push=False), said()[1],
                         run.TagPlan(SPEC, TagAction.BUILD), kit(compiler, Images()))
    assert compiler.compiles == 1 and out.shared is None and out.modules == ModuleOrigin.COMPILED


def push_tag(fake: BlobRegistry, target: RegistryClient, tag: str, body: bytes) -> str:
    config = target.push_blob(b"{}")
    layer = target.push_blob(body)
    target.push_manifest(tag, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": config, "size": 2},
                               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                           "digest": layer, "size": len(body)}]})
    digest = target.digest(tag)
    assert digest is not None
    return digest


def test_a_tag_made_while_the_run_waited_is_not_built_again():
    fake = BlobRegistry()
    target = client(fake)
    plan = run.TagPlan(SPEC, TagAction.BUILD)  # planned while the ledger had no such tag
    made = push_tag(fake, target, TAG, b"made by another run")
    compiler, images = Compiler(), Images()
    lines, say = said()
    out = run.ensure_one(SPEC, options(target), say, plan, kit(compiler, images))
    assert (out.action, out.digest, out.done) == (TagAction.PRESENT, made, True)
    assert compiler.compiles == 0 and images.pushed == []
    assert lines[-1] == "present in the ledger (made by another run meanwhile): nothing to do"


def mirroring(upstream_fake: BlobRegistry, target_fake: BlobRegistry, lands: bytes | None = None):
    def copy(source, target, tag, digest, authfile):
        """As skopeo copies by digest: the manifest's bytes and its blobs; `lands` replaces the image, as a
        registry that rewrote it would."""
        up, down = client(upstream_fake, source.host), client(target_fake, target.host)
        assert up.digest(tag) == digest  # named by digest, as skopeo is
        manifest = upstream_fake.manifests[(source.repo, tag)] if lands is None else None
        if manifest is None:
            push_tag(target_fake, down, tag, lands or b"")
            return
        for d in [json.loads(manifest)["config"]["digest"], *(x["digest"] for x in json.loads(manifest)["layers"])]:
            down.push_blob(up.blob(d))
        down.push_manifest(tag, json.loads(manifest))
    return copy


def test_a_mirror_lands_the_digest_it_copied():
    upstream_fake, target_fake = BlobRegistry(), BlobRegistry()
    upstream, target = client(upstream_fake, "nvcr.test"), client(target_fake)
    source = push_tag(upstream_fake, upstream, TAG, b"NVIDIA's image")
    compiler = Compiler()
    out = run.ensure_one(SPEC, options(target, upstream=upstream), said()[1], run.TagPlan(SPEC, TagAction.MIRROR),
                         kit(compiler, Images(), mirror=mirroring(upstream_fake, target_fake), vouch=VOUCHED))
    assert (out.action, out.digest, out.done) == (TagAction.MIRROR, source, True)
    assert target.digest(TAG) == source and compiler.compiles == 0 and "mirror" in out.seconds


def test_an_upstream_image_nothing_vouches_for_is_not_copied_and_not_signed():
    """gpualign signs only what it built or judged: the upstream's image is judged before the copy, and refused
    (exit 1, naming why) when nothing vouches for it; nothing lands under the tag."""
    from gpualign.ensure.stage import UpstreamNotVouched

    upstream_fake, target_fake = BlobRegistry(), BlobRegistry()
    upstream, target = client(upstream_fake, "nvcr.test"), client(target_fake)
    push_tag(upstream_fake, upstream, TAG, b"an image with no labels")
    asked: list[tuple[str, str]] = []

    def unlabelled(image: str, kernel: str, arch: str, authfile: str | None, modules: str) -> str:
        asked.append((image, kernel))
        return "unverified: its config carries no labels"

    with pytest.raises(UpstreamNotVouched, match="is unverified: its config carries no labels: not mirrored, not "
                                                 "signed"):
        run.ensure_one(SPEC, options(target, upstream=upstream, cosign_key=NEVER_SIGNS), said()[1],
                       run.TagPlan(SPEC, TagAction.MIRROR),
                       kit(Compiler(), Images(), mirror=mirroring(upstream_fake, target_fake), vouch=unlabelled))
    assert asked == [(f"nvcr.test/nvidia/driver:{TAG}", SPEC.kernel)]
    assert target.digest(TAG) is None


def test_a_mirror_that_lands_another_digest_is_refused():
    upstream_fake, target_fake = BlobRegistry(), BlobRegistry()
    upstream, target = client(upstream_fake, "nvcr.test"), client(target_fake)
    source = push_tag(upstream_fake, upstream, TAG, b"NVIDIA's image")
    with pytest.raises(PushRefused, match=f"the ledger answers digest sha256:[0-9a-f]+ after mirroring {source}"):
        run.ensure_one(SPEC, options(target, upstream=upstream), said()[1], run.TagPlan(SPEC, TagAction.MIRROR),
                       kit(Compiler(), Images(), mirror=mirroring(upstream_fake, target_fake, b"something else"),
                           vouch=VOUCHED))


def test_a_dry_run_makes_nothing():
    compiler, images = Compiler(), Images()
    out = run.ensure_one(SPEC, options(client(BlobRegistry()), dry_run=True), said()[1],
                         run.TagPlan(SPEC, TagAction.BUILD), kit(compiler, images))
    assert not out.done and out.digest is None and compiler.compiles == 0 and images.pushed == []


# -- the fold --------------------------------------------------------------------------------------------------------
steps = st.sampled_from(["headers", "compile", "verify", "push", "mirror"])
events = st.lists(st.one_of(
    st.builds(Timed, steps, st.floats(0, 1e4)),
    st.builds(Shared, st.sampled_from(list(SharedState)), st.text(max_size=8)),
    st.builds(Pushed, st.text(min_size=1, max_size=8)),
    st.builds(FoundMeanwhile, st.none() | st.text(min_size=1, max_size=8)),
    st.builds(Verified, st.fixed_dictionaries({"ok": st.booleans()})),
), max_size=12)


@given(events)
def test_an_outcome_is_what_its_events_say_last(record):
    out = outcome_of(TAG, TagAction.BUILD, "ledger/x:" + TAG, record)
    timed = {e.step: e.seconds for e in record if isinstance(e, Timed)}
    assert out.seconds == timed
    finished = [e for e in record if isinstance(e, Pushed | FoundMeanwhile)]
    assert out.done == bool(finished)
    if finished:
        assert out.digest == finished[-1].digest
    assert out.action == (TagAction.PRESENT if any(isinstance(e, FoundMeanwhile) for e in record)
                          else TagAction.BUILD)
    said_shared = [e for e in record if isinstance(e, Shared)]
    assert out.shared == (said_shared[-1] if said_shared else None)
    assert json.dumps(out.as_dict())  # the report's record stays plain data


def test_the_kernels_package_is_got_as_the_build_starts_when_the_kernel_will_be_booted():
    """Beside the compile, not after it: a cold build Job waits for the kernel's package only where it must."""
    asked: list[str] = []
    out = run.ensure_one(SPEC, options(client(BlobRegistry())), said()[1], run.TagPlan(SPEC, TagAction.BUILD),
                         kit(Compiler(), Images(), kernel_prepare=asked.append))
    assert out.done and asked == [SPEC.kernel]
    asked.clear()
    run.ensure_one(SPEC, options(client(BlobRegistry()), kernel_load=False), said()[1],
                   run.TagPlan(SPEC, TagAction.BUILD), kit(Compiler(), Images(), kernel_prepare=asked.append))
    assert asked == []
