"""Is a present image what its tag says? One judgement, used by check, the upgrade preflight, ensure and the
controller, so none of them can call an image "present" that another calls wrong.

Two levels:
- **labels** (cheap, always): the image's own config names its kernel and branch (`inspect.by_labels`);
- **modules** (a pull of its module layer, ~2 s an image, cached by digest): its kernel modules run through the
  kernel's load checks against the Module.symvers of every kernel that needs it (`verify`), in modprobe's order.

A module check that cannot be made (the kernel has no headers in Debian's archive, the image holds no modules,
the archive is unreachable) leaves the image *unverified*, with the reason: never silently "present".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base.errors import GpualignError
from gpualign.judging.inspect import ModulesVerdict, by_labels, checkable, modules_verdict
from gpualign.judging.signature_check import verify
from gpualign.ledger.registry import connect
from gpualign.model.driver_tag import try_parse
from gpualign.model.flavours import LABEL as FLAVOUR_LABEL
from gpualign.model.flavours import mismatch as flavour_mismatch
from gpualign.model.image_ref import ImageRef, tag_of
from gpualign.model.kernels import Kernel
from gpualign.model.ledger import Unsigned
from gpualign.model.platforms import platform_problem

if TYPE_CHECKING:
    from gpualign.ledger.registry import RegistryClient

class ModuleCheck(StrEnum):
    """How far an image's modules are checked: not at all (labels only), where the kernel has headers to judge
    them against, or everywhere asked (a kernel without headers leaves the image unverified)."""

    OFF = "off"
    AUTO = "auto"
    STRICT = "strict"


OFF, AUTO, STRICT = ModuleCheck.OFF, ModuleCheck.AUTO, ModuleCheck.STRICT


@dataclass
class Judgement:
    wrong: dict[str, str] = field(default_factory=dict)  # image -> why it is present but wrong
    unverified: dict[str, str] = field(default_factory=dict)  # image -> why its modules could not be checked
    verified: dict[str, int] = field(default_factory=dict)  # image -> symbol CRCs checked (modules passed)
    warnings: list[str] = field(default_factory=list)
    platforms: dict[str, tuple[str, ...]] = field(default_factory=dict)  # image -> the linux CPU archs it holds
    flavours: dict[str, str] = field(default_factory=dict)  # image -> the flavour of its modules, by its label
    labelled: set[str] = field(default_factory=set)  # images whose own labels name their kernel and branch, and agree

    def wrong_for(self, image: str, arch: str, module_type: str | None = None) -> str | None:
        """Why the image is wrong for a node of CPU architecture `arch` whose driver pod is given `module_type`
        (kernelModuleType, decided for the branch its tag names; None: not compared), or None."""
        if image in self.wrong:
            return self.wrong[image]
        if (why := platform_problem(image, arch, self.platforms)) is not None:
            return why
        if module_type is None or image not in self.flavours:
            return None

        spec = try_parse(tag_of(image))
        return flavour_mismatch(self.flavours[image], module_type, spec.branch if spec else None)


NO_LABELS = ("its config carries no labels (neither gpualign's io.gpualign.kernel nor NVIDIA's version), so nothing "
             "in it says which kernel and branch it was built for (--verify-modules checks its modules against the "
             "kernel, as the upgrade walk does)")


def _split(image: str) -> tuple[str, str]:
    ref = ImageRef.parse(image)
    return ref.name, ref.tag


Read = tuple[dict[str, Any], tuple[str, ...]]  # an image's config and the CPU architectures it holds


class Ahead:
    """Images' configs read before judge() is asked (a check reads those of the images its first pages need while
    the API server makes the next pages): judge() then takes them as read, for the same architectures, instead of
    asking the registry again. Labels only: a module check always pulls for itself. close() when judged."""

    def __init__(self, docker_config: Path | None = None) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        self._docker_config = docker_config
        self._clients: dict[str, RegistryClient | None] = {}
        self._reads: dict[tuple[str, tuple[str, ...]], Future[Read | GpualignError]] = {}
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="gpualign-ahead")

    def want(self, image: str, archs: Iterable[str]) -> None:
        """Start reading an image's config (for the first of `archs` it holds), unless it is read or being read."""
        key = (image, tuple(archs))
        if key in self._reads:
            return
        repo, tag = _split(image)
        if repo not in self._clients:
            from gpualign.ledger.registry import connect

            try:
                self._clients[repo] = connect(f"registry://{repo}", docker_config=self._docker_config)
            except GpualignError:
                self._clients[repo] = None  # judge() skips what it cannot read, and says so
        client = self._clients[repo]
        if client is not None:
            self._reads[key] = self._pool.submit(_read_config, client, tag, list(key[1]))

    def taken(self, image: str, archs: list[str]) -> Read | GpualignError | None:
        """The config read ahead for these architectures (or its error), else None."""
        read = self._reads.get((image, tuple(archs)))
        return None if read is None else read.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for client in self._clients.values():
            if client is not None:
                client.close()


def judge(needs: Mapping[str, Iterable[str | None]], *, docker_config: Path | None = None,
          modules: str = OFF, cache: Path | None = None, secure_boot: Iterable[str] = (),
          archs: Mapping[str, Iterable[str]] | None = None, unlabelled: bool = True,
          ahead: Ahead | None = None, trusted: tuple[Any, ...] = ()) -> Judgement:
    """needs: image reference (REPO:TAG) -> the kernels of the nodes that need it. modules: OFF (labels only),
    AUTO (also the modules, for kernels with headers to judge against) or STRICT (as AUTO, and a kernel without
    headers leaves the image unverified). secure_boot: the images some Secure Boot node needs: an image gpualign
    built unsigned (its labels), or whose modules carry no signature, is wrong for them. unlabelled: an image under a
    precompiled tag whose config has no labels at all, needed by a kernel whose modules could be checked here (as
    the walk checks them by default), is unverified when they were not checked (the walk passes False: its own
    module check, or the user's explicit opt-out, decides). ahead: configs already read (labels only). trusted: the
    keys an image must be signed by (cosign's format, as the command line loaded them; none: not checked): an image
    without such a signature over its digest is wrong, never present."""
    secure = set(secure_boot)

    if cache is None:
        from gpualign.loaders.archive_reading import ensure_root  # not archive.apt: that loads tarfile and more

        cache = ensure_root() / "images"
    out = Judgement()
    by_repo: dict[str, list[str]] = {}
    for image in sorted(needs):
        repo, tag = _split(image)
        by_repo.setdefault(repo, []).append(tag)
    for repo, tags in by_repo.items():
        try:
            client = connect(f"registry://{repo}", docker_config=docker_config)
        except GpualignError:
            continue  # not a registry reference gpualign can read: nothing to inspect
        try:
            # Labels only: every image's config at once (a manifest, then its config blob, for each).
            wants = {t: sorted(set((archs or {}).get(f"{repo}:{t}", ())) or ["amd64"]) for t in tags}
            fetched = _configs(client, tags, wants, repo, ahead) if modules == OFF else {}
            for tag in tags:
                image = f"{repo}:{tag}"
                if modules != OFF:  # the modules first: the kernel's own verdict names module and symbol
                    _modules(client, image, tag, needs[image], modules, cache, out, image in secure)
                if image in out.wrong:
                    continue
                read = fetched[tag] if tag in fetched else _config(client, tag, wants[tag])
                if isinstance(read, GpualignError):
                    raise read
                config, out.platforms[image] = read
                labels = (config.get("config") or {}).get("Labels") or {}
                if labels.get(FLAVOUR_LABEL):
                    out.flavours[image] = str(labels[FLAVOUR_LABEL])
                why = by_labels(tag, labels)
                if not why and image in secure and labels.get("io.gpualign.built-by") and \
                        not labels.get("io.gpualign.signer"):
                    why = ("gpualign built it unsigned (no io.gpualign.signer label), and a node that needs it has "
                           "Secure Boot on: its kernel refuses unsigned modules")
                if not why and trusted:
                    why = _unsigned(client, tag, trusted)
                if why:
                    out.wrong[image] = why
                    out.unverified.pop(image, None)
                    out.verified.pop(image, None)
                elif names_its_build(labels):
                    out.labelled.add(image)
                elif unlabelled and not labels and image not in out.verified and image not in out.unverified and \
                        try_parse(tag) is not None and any(checkable(k) for k in needs[image] if k):
                    # nothing in it says what it was built for, and its modules were not checked: never "present"
                    out.unverified[image] = NO_LABELS
        except GpualignError as err:
            out.warnings.append(f"could not read the images in {repo}: {err.message}")
        finally:
            client.close()
    return out


def names_its_build(labels: Mapping[str, str]) -> bool:
    """Whether an image's labels say which kernel and branch it was built for (gpualign's, or NVIDIA's
    `version=<branch>-<kernel>`): what by_labels can then hold against its tag."""
    version = labels.get("version") or ""
    return bool(labels.get("io.gpualign.kernel") and labels.get("io.gpualign.driver-branch")) or \
        (version.partition("-")[0].isdigit() and bool(version.partition("-")[2]))


def unvouched(image: str, kernel: str, *, docker_config: Path | None = None, modules: str = AUTO,
              archs: Iterable[str] = ("amd64",)) -> str | None:
    """Why gpualign cannot vouch for an image under its tag, or None when it can: nothing wrong in it, its modules
    passed the kernel's checks or its own labels name the build its tag names, and it could be read. What ensure
    asks of an image before it mirrors it, and so before it signs anything it did not build."""
    found = judge({image: (kernel,)}, docker_config=docker_config, modules=modules, archs={image: tuple(archs)},
                  trusted=())
    if image in found.wrong:
        return f"wrong: {found.wrong[image]}"
    if image in found.unverified:
        return f"unverified: {found.unverified[image]}"
    if found.warnings:
        return f"not judged: {found.warnings[0]}"
    if image in found.verified or image in found.labelled:
        return None
    return f"unverified: {NO_LABELS}"


def _unsigned(client: RegistryClient, tag: str, trusted: tuple[Any, ...]) -> str | None:
    """Why the image under `tag` is not signed by a trusted key (present but unsigned), or None."""
    digest = client.digest(tag)
    if digest is None:
        return None
    verdict = verify(client, digest, trusted)
    return None if verdict.ok else Unsigned(f"unsigned: no signature by a trusted key over its digest "
                                            f"({verdict.why})")


def _config(client: RegistryClient, tag: str, archs: list[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A tag's image config ({} if it has none), read from the image of the first wanted architecture it holds,
    and the architectures it holds."""
    config, platforms = client.image_config_and_platforms(tag, arch=archs[0])
    chosen = next((a for a in archs if a in platforms), archs[0])
    if chosen != archs[0]:
        config = client.image_config(tag, arch=chosen)
    return config or {}, platforms


def _read_config(client: RegistryClient, tag: str, archs: list[str]) -> Read | GpualignError:
    """`_config`, or the error reading it."""
    try:
        return _config(client, tag, archs)
    except GpualignError as err:
        return err


def _configs(client: RegistryClient, tags: list[str], archs: Mapping[str, list[str]], repo: str = "",
             ahead: Ahead | None = None) -> dict[str, Read | GpualignError]:
    """Each tag's config and platforms (`_config`), or the error reading it: those read ahead as they were, the
    others side by side."""
    out: dict[str, Read | GpualignError] = {}
    for tag in tags:
        if ahead is not None and (read := ahead.taken(f"{repo}:{tag}", archs[tag])) is not None:
            out[tag] = read
    rest = [t for t in tags if t not in out]
    if len(rest) < 2:
        return {**out, **{t: _read_config(client, t, archs[t]) for t in rest}}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(8, len(rest)), thread_name_prefix="gpualign-judge") as pool:
        return {**out, **dict(zip(rest, pool.map(lambda t: _read_config(client, t, archs[t]), rest), strict=True))}


def _modules(client: RegistryClient, image: str, tag: str, kernels: Iterable[str | None], modules: str, cache: Path,
             out: Judgement, secure_boot: bool = False) -> None:
    checked = 0
    for kernel in sorted({Kernel.of(k).release for k in kernels if k}):  # a node's label: checked as its release
        if not checkable(kernel):
            if modules == STRICT:
                out.unverified[image] = (f"kernel {kernel} has no headers in Debian's archive to check its modules "
                                         "against")
            continue
        try:
            verdict, detail = modules_verdict(client, tag, kernel, cache, secure_boot)
        except GpualignError as err:
            out.unverified[image] = f"its modules could not be checked against {kernel}: {err.message}"
            continue
        if verdict in (ModulesVerdict.WRONG, ModulesVerdict.CONTRACT):
            out.wrong[image] = (f"its modules would not load on {kernel}: {detail}"
                                if verdict is ModulesVerdict.WRONG else f"the GPU Operator could not run it: {detail}")
            out.unverified.pop(image, None)
            return
        if verdict is ModulesVerdict.NONE:
            out.unverified[image] = (f"it holds no kernel modules under /lib/modules or /opt/lib/modules to check "
                                     f"against {kernel}")
        else:
            checked += int(detail or 0)
    if checked and image not in out.unverified:
        out.verified[image] = checked
