"""`gpualign ensure TAG…`: make the driver images exist in the ledger, verified against their kernels."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import BadInput, GpualignError
from gpualign.cli import complete
from gpualign.cli.common import progress, report, stdout
from gpualign.cli.flags import RegistryFlags
from gpualign.cli.hints import settled, worded
from gpualign.cli.options import (
    ContextOpt,
    DockerConfigOpt,
    InsecureRegistryOpt,
    KubeconfigOpt,
    Output,
    SignCertOpt,
    SignKeyOpt,
    SignSecretOpt,
    TrustedKeyOpt,
    trusted_keys,
)
from gpualign.cli.printers import Printers, Shown
from gpualign.model.flavours import FLAVOURS

if TYPE_CHECKING:
    from gpualign.ensure.outcome import Outcome
    from gpualign.ensure.request import Request
    from gpualign.ensure.sign import SigningKey
    from gpualign.model.driver_tag import TagSpec

NVIDIA = "nvcr.io/nvidia/driver"  # where published images are mirrored from, unless --upstream names another
HELP = """Make every driver image the fleet needs exist in the ledger repository, and prove each fits its kernel.

For each TAG (`<branch>-<kernel>-<os-tag>`, e.g. 535-6.1.0-50-amd64-debian12), or each missing image of a
check or plan report (`gpualign check -o json | gpualign ensure --from - …`): already in the ledger, nothing is
done (one manifest request); published upstream, it is mirrored by digest, every platform (skopeo); otherwise it
is built, verified and pushed.

What gpualign builds: Debian 12 (bookworm: 535, on its 6.1 and 6.12 kernels) and Debian 13 (trixie: 550) images,
amd64 and arm64, for real: NVIDIA's kernel module source from that release's archive compiled against
`linux-headers-<kernel>` (an arm64 kernel's across, with Debian's aarch64 cross compiler, on an amd64 machine),
stripped, laid out under /lib/modules/<kernel> with depmod, with an entrypoint that refuses to load on any other
kernel, labelled version=<branch>-<kernel>. An arm64 image is pushed as an index naming linux/arm64. Before anything
is pushed every module passes the kernel's own load checks, offline, against that kernel's Module.symvers: its
version magic names the kernel in the tag, every imported symbol's CRC equals the kernel's, and its version is the
driver's. A failure names the module and the first refused symbol, and nothing is pushed.

Only Debian 12 and 13 are built and verified end to end by gpualign. Ubuntu 22.04/24.04 (NVIDIA's precompiled recipe,
Canonical's linux-modules-nvidia packages) and RHEL 9 (NVIDIA's kmod-nvidia rpmbuild on the Driver Toolkit) are
rendered, to build where their archives are reachable: `--render DIR` writes any tag's recipe as a build context
(with the same verify step, in shell, refusing the build unless the modules fit the kernel).

Secure Boot: with --sign-key/--sign-cert (files) or --sign-secret NAMESPACE/NAME (a Secret on the cluster, with
data keys key and cert as KMM keeps them, or tls.key and tls.crt), every module is signed with the kernel's own
sign-file (from its headers' kbuild tree, with the kernel's CONFIG_MODULE_SIG_HASH), and nothing is pushed unless
each signature names that certificate's key (issuer and serial number) and verifies over its module.

Needs root (mmdebstrap, chroot and buildah, as they run here), buildah and skopeo. Compiled modules are cached
under ~/.cache/gpualign/ensure by (module source version, kernel, flavour), signed ones also by the certificate, so
a failed push never recompiles or re-signs; a run whose modules are all cached needs neither the archive nor a build
root. The build root (bookworm's compiler, the kernels' headers and the module source, unpacked by mmdebstrap) is
cached there too, and made again only for a kernel or a module source it lacks.

Shared modules: once verified, a build's modules are pushed beside the ledger (REPO-modules, tagged
<module source version>-<kernel>-<flavour>), and a build on any other machine pulls them instead of compiling,
checks them against their artifact's digests and then exactly as compiled ones. The image's user-space layer is
shared the same way (REPO-userspace, tagged <suite>-<arch>-<driver version>-<key>): a build that has none pulls it
instead of fetching NVIDIA's packages from Debian, and its push sends only the modules' layer; the image's user space
is checked all the same. --no-shared-modules does neither.

Exit codes: 0 every image is in the ledger (or, with --dry-run, the plan was printed); 1 an image could not be made
(it would not load on its kernel, a build step failed, the registry refused the push); 2 bad input."""


LedgerOpt = Annotated[list[str] | None, typer.Option(
    "--ledger", metavar="REGISTRY", help="the ledger repository to fill: registry://HOST[:PORT]/REPO "
                                         "(required, except with --render; one)")]
TagsOpt = Annotated[list[str] | None, typer.Argument(metavar="[TAG]...",
                                                 help="driver image tags to ensure")]
UpstreamOpt = Annotated[str | None, typer.Option(
    "--upstream", metavar="REGISTRY",
    help=f"where published images are mirrored from, or 'none' [default: {NVIDIA}, asked only for the OS "
         "tags NVIDIA publishes precompiled (ubuntu)]")]
CosignKeyOpt = Annotated[str | None, typer.Option(
    "--cosign-key", metavar="KEY", envvar="GPUALIGN_COSIGN_KEY",
    help="sign every image pushed (and attest a build's SBOM and provenance) with this key, named as cosign "
         "names keys: a key file from `cosign generate-key-pair` (its password in $COSIGN_PASSWORD) or an "
         "unencrypted PEM ECDSA P-256 key; k8s://NAMESPACE/SECRET (cosign's Secret); or a KMS or Vault "
         "reference (awskms://, gcpkms://, azurekms://, hashivault://), signed by cosign itself on PATH. "
         "Only what ensure built and verified, or judged, is signed [default: unsigned]")]
KernelLoadOpt = Annotated[bool, typer.Option(
    "--kernel-load/--no-kernel-load",
    help="boot each built image's own Debian kernel in a VM (qemu, TCG) and load its modules into it before the "
         "push: the kernel's verdict goes into the report (kernel_load), and a refusal pushes nothing "
         "(`gpualign verify` does the same for any image). --no-kernel-load is for where qemu cannot run: the "
         "report then says the check was skipped")]
UpstreamKeyOpt = Annotated[list[Path] | None, typer.Option(
    "--upstream-key", metavar="PUB", envvar="GPUALIGN_UPSTREAM_KEYS",
    help="a public key (cosign's PEM) the upstream signs its images with; repeatable (env: ':'-separated). "
         "A mirror's upstream signature over its digest is then verified before anything is copied. Every "
         "mirror is judged first either way (its labels, and its modules where the kernel has headers): "
         "gpualign signs only what it built or judged")]
JobsOpt = Annotated[int, typer.Option(
    "--jobs", "-j", metavar="N", min=1,
    help="work on up to N images at once, with N compile jobs in all (each image's make -j gets its share); "
         "the CPU-bound compile of one image then overlaps another's downloads, image assembly and push")]
FlavourOpt = Annotated[str | None, typer.Option(
    "--flavour", metavar="FLAVOUR", autocompletion=complete.flavours,
    help="the kernel modules to build: proprietary (nvidia-kernel-source) or open (nvidia-open-kernel-source), "
         "as the GPU Operator's kernelModuleType asks; default: what the --from report says its nodes load "
         "(check's `modules`), else proprietary")]
ModulesFromOpt = Annotated[Path | None, typer.Option(
    "--modules-from", metavar="DIR", help="verify and push the .ko files in DIR instead of compiling "
                                          "(they must pass the same checks)")]
FromReportOpt = Annotated[Path | None, typer.Option(
    "--from", metavar="FILE",
    help="ensure what a report lists: `gpualign check -o json` (its missing images), `gpualign plan -o json` "
         "(to_build) or `plan --build-matrix`; - for stdin")]
RenderOpt = Annotated[Path | None, typer.Option(
    "--render", metavar="DIR",
    help="write each tag's recipe (Containerfile, its verify step and entrypoint) to DIR/TAG, to build "
         "elsewhere with buildah bud or docker build; nothing is built or pushed. Ubuntu 22.04/24.04 and RHEL 9 "
         "are rendered only; Debian 12 and 13 are the recipes ensure runs here")]
CudaVersionOpt = Annotated[str, typer.Option(
    "--cuda-version", metavar="VERSION", help="with --render: the CUDA base image version (nvcr.io/nvidia/cuda)")]
VerifyModulesOpt = Annotated[bool, typer.Option(
    "--verify-modules", help="also check the modules of a tag already in the ledger against its kernel, as "
                             "check --verify-modules does (its labels, and with --sign-*, its signing "
                             "certificate, are always checked); a present image that fails is reported, exit "
                             "1")]
ReplaceWrongOpt = Annotated[bool, typer.Option(
    "--replace-wrong", help="make a present image that fails those checks again (mirror or build, verified) "
                            "and push it over its tag")]
SharedModulesOpt = Annotated[bool, typer.Option(
    "--shared-modules/--no-shared-modules",
    help="take modules another build compiled for the same source, kernel and flavour from REPO-modules in the "
         "ledger's registry (checked as compiled ones), and share the ones this run compiles there; the same "
         "for the image's user-space layer (REPO-userspace)")]
LeaseOpt = Annotated[str | None, typer.Option(
    "--lease", metavar="NAMESPACE",
    help="hold a Lease per image in NAMESPACE on the cluster (--kubeconfig/--context) while it is made, so "
         "runs on other machines never build the same image twice (on one machine a file lock does that)")]


DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="print what it would do for each tag; change nothing")]
EnsureOutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", metavar="FORMAT",
    help="table (one line per image), json or yaml (the report, failures included)")]


def ensure(
    ledger: LedgerOpt = None,
    tags: TagsOpt = None,
    upstream: UpstreamOpt = None,
    cosign_key: CosignKeyOpt = None,
    kernel_load: KernelLoadOpt = True,
    upstream_key: UpstreamKeyOpt = None,
    dry_run: DryRunOpt = False,
    jobs: JobsOpt = 2,
    flavour: FlavourOpt = None,
    modules_from: ModulesFromOpt = None,
    from_report: FromReportOpt = None,
    render: RenderOpt = None,
    cuda_version: CudaVersionOpt
    = "12.9.1",
    sign_key: SignKeyOpt = None,
    sign_cert: SignCertOpt = None,
    sign_secret: SignSecretOpt = None,
    verify_modules: VerifyModulesOpt = False,
    replace_wrong: ReplaceWrongOpt = False,
    shared_modules: SharedModulesOpt = True,
    lease: LeaseOpt
    = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: EnsureOutputOpt = Output.table,
    docker_config: DockerConfigOpt = None,
    insecure_registry: InsecureRegistryOpt = None,
    trusted_key: TrustedKeyOpt = None,
) -> None:
    run_ensure(EnsureFlags(**locals()))


def run_ensure(flags: EnsureFlags) -> None:
    flags.refuse_bad_input()
    signing = signing_key(flags.sign_key, flags.sign_cert, flags.sign_secret, flags.kubeconfig, flags.context)
    asked = _asked(flags)
    if asked is None:
        return
    failed = Failed()
    specs = _specs(asked, failed)
    if flags.render is not None:
        _render(specs, flags.render, flags.the_ledger, flags.cuda_version, flags.flavour or "proprietary",
                flags.output)
        return
    if flags.the_ledger is None:
        raise BadInput("--ledger is required: name the repository to fill (registry://HOST[:PORT]/REPO), or "
                       "--render DIR to write the recipes instead")
    request = flags.request(asked, signing, _upstream_keys(flags.upstream_key), cosign_signer(flags.cosign_key))
    _finish(flags, _make(flags, specs, request, failed), failed)


@dataclass(frozen=True, kw_only=True)
class EnsureFlags(RegistryFlags):
    """`ensure`'s flags, as given (its parameters; --insecure-registry and --trusted-key are read where they are
    declared)."""

    ledger: LedgerOpt
    tags: TagsOpt
    upstream: UpstreamOpt
    cosign_key: CosignKeyOpt
    kernel_load: KernelLoadOpt
    upstream_key: UpstreamKeyOpt
    dry_run: DryRunOpt
    jobs: JobsOpt
    flavour: FlavourOpt
    modules_from: ModulesFromOpt
    from_report: FromReportOpt
    render: RenderOpt
    cuda_version: CudaVersionOpt
    sign_key: SignKeyOpt
    sign_cert: SignCertOpt
    sign_secret: SignSecretOpt
    verify_modules: VerifyModulesOpt
    replace_wrong: ReplaceWrongOpt
    shared_modules: SharedModulesOpt
    lease: LeaseOpt
    kubeconfig: KubeconfigOpt
    context: ContextOpt
    output: EnsureOutputOpt

    @property
    def the_ledger(self) -> str | None:
        return self.ledger[0] if self.ledger else None

    def refuse_bad_input(self) -> None:
        if len(self.ledger or []) > 1:
            raise BadInput("--ledger given twice: ensure fills one repository; run it once per repository")
        if self.render is not None and self.dry_run:
            raise BadInput("--render writes recipes and builds nothing: drop --dry-run (or --render)")
        (RENDER if self.render is not None else ENSURE).refuse_unless_allowed(self.output)
        if self.flavour is not None and self.flavour not in FLAVOURS:
            raise BadInput(f"--flavour {self.flavour!r}: expected proprietary or open")
        if self.modules_from is not None and not self.modules_from.is_dir():
            raise BadInput(f"--modules-from {self.modules_from}: not a directory")

    def request(self, asked: Asked, signing: SigningKey | None, upstream_keys: tuple[Any, ...],
                cosign_signer: Any) -> Request:
        """The run's one bag for ensure/ (the keys and the signer already loaded: bad input before any work)."""
        from gpualign.ensure.request import Request

        assert self.the_ledger is not None
        return Request(ledger=self.the_ledger, upstream=self.upstream, docker_config=self.docker_config,
                       dry_run=self.dry_run, jobs=self.jobs, flavour=self.flavour, flavours=asked.flavours,
                       modules_from=self.modules_from, signing=signing, lease=self.lease,
                       kubeconfig=self.kubeconfig, context=self.context, verify_modules=self.verify_modules,
                       replace_wrong=self.replace_wrong, shared_modules=self.shared_modules,
                       skippable=frozenset(asked.reported), upstream_keys=upstream_keys, cosign_key=cosign_signer,
                       kernel_load=self.kernel_load, trusted=trusted_keys(self.trusted_key))


@dataclass
class Asked:
    """The tags to ensure: those named, then those a --from report lists."""

    tags: list[str]
    reported: set[str] = field(default_factory=set)  # a report's tag gpualign cannot make fails; it is not bad input
    flavours: dict[str, str] = field(default_factory=dict)  # tag -> the modules its nodes load, as the report says


@dataclass
class Failed:
    """The images not made: each error, and each tag's reason (for the report)."""

    errors: list[GpualignError] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)

    def add(self, tag: str, err: GpualignError) -> None:
        self.errors.append(err)
        self.why[tag] = worded(err)

    def cannot_make(self, tag: str, err: GpualignError) -> None:
        """A tag from --from's report that gpualign cannot make: listed under `failed`, the others still made, and
        the run exits 1 (in a mixed fleet, one unsupported node must not stop the runbook's fix for every other)."""
        from gpualign.base.errors import Refused

        said = worded(err)
        message = said if said.startswith(tag) else f"{tag}: {said}"
        self.add(tag, Refused(message))
        progress(f"{tag}: not made: {message.removeprefix(tag + ': ')}")

    def first(self) -> GpualignError:
        """The error the run exits with: bad input wins (2), and it counts the others."""
        first = self.errors[max(range(len(self.errors)), key=lambda i: self.errors[i].exit_code)]
        return settled(first, f" (and {len(self.errors) - 1} more images failed)" if len(self.errors) > 1 else "")


def _asked(flags: EnsureFlags) -> Asked | None:
    """The tags named and those the --from report lists; None when a report lists none (said so)."""
    asked = Asked(list(flags.tags or []))
    if flags.from_report is not None:
        from gpualign.base import yamlio
        from gpualign.ensure.inputs import flavours_from_report, tags_from_report

        where = "stdin" if str(flags.from_report) == "-" else str(flags.from_report)
        stdin = str(flags.from_report) == "-"
        data = yamlio.parse(sys.stdin.read(), where) if stdin else yamlio.read(flags.from_report)
        asked.reported = set(tags_from_report(data, where)) - set(asked.tags)
        asked.flavours = flavours_from_report(data)
        asked.tags += sorted(asked.reported)
    if not asked.tags:
        if flags.from_report is not None:
            stdout.print("nothing to ensure: the report lists no missing image")
            return None
        raise BadInput("no TAG given: name the tags, or pass --from with a check or plan report")
    return asked


def _specs(asked: Asked, failed: Failed) -> list[TagSpec]:
    """Each tag read; a bad tag named is bad input, a report's is a failure and the others go on."""
    from gpualign.model import driver_tag

    specs = []
    for t in dict.fromkeys(asked.tags):
        try:
            specs.append(driver_tag.parse(t))
        except GpualignError as err:
            if t not in asked.reported:
                raise
            failed.cannot_make(t, err)
    return specs


def _upstream_keys(paths: list[Path] | None) -> tuple[Any, ...]:
    """The upstream's public keys (--upstream-key, or $GPUALIGN_UPSTREAM_KEYS ':'-separated), loaded now: a bad one
    is bad input before anything is asked."""
    if not paths:
        return ()
    import os

    from gpualign.judging.signature_check import load_trusted

    named = [p for path in paths for p in str(path).split(os.pathsep) if p]
    return load_trusted(named)


def cosign_signer(reference: str | None) -> Any:
    """The signer --cosign-key ($GPUALIGN_COSIGN_KEY) names, opened now (a wrong password or an unreadable key is
    bad input before any work); None: nothing is signed."""
    if not reference:
        return None
    from gpualign.ensure.cosign_keys import load_signer

    return load_signer(reference)


def _make(flags: EnsureFlags, specs: list[TagSpec], req: Request, failed: Failed) -> list[Outcome]:
    """Every image made (or found, or planned with --dry-run), up to --jobs at once; a failure stops only its own."""
    from gpualign.kube.lease import LeaseNamespaceMissing
    from gpualign.usecases.ensure_images import UpstreamUnusable, ensure_images

    def say(tag: str, message: str) -> None:
        if flags.output is Output.table:
            progress(f"{time.strftime('%H:%M:%S')} {tag}: {message}")

    try:
        return ensure_images(req, specs, say, failed.add, failed.cannot_make)
    except UpstreamUnusable as err:
        raise BadInput(f"--upstream {flags.upstream!r}: {err.why}") from None
    except LeaseNamespaceMissing as err:
        raise BadInput(f"{err.message} or pass --lease NAMESPACE") from None


def _finish(flags: EnsureFlags, outcomes: list[Outcome], failed: Failed) -> None:
    """The report (failures included, before exiting), then the first failure."""
    ENSURE.print(flags.output, report(
        "EnsureReport", {"ledger": flags.the_ledger, "upstream": flags.upstream or NVIDIA},
        {"dry_run": flags.dry_run, "images": [o.as_dict() for o in outcomes],
         "failed": [{"tag": t, "error": m} for t, m in failed.why.items()]}), outcomes, failed)
    if failed.errors:
        raise failed.first()


def _ensured_lines(document: dict[str, Any], _shown: Shown, outcomes: list[Outcome], failed: Failed) -> None:
    """One line per image. With failures, the images that were made are in the ledger: they are named on stderr
    before the run fails on the first error."""
    from gpualign.ensure.outcome import TagAction

    if failed.errors:
        for o in outcomes:
            if o.action == TagAction.PRESENT:
                progress(f"{o.tag}: present ({o.digest})")
            elif not o.done:  # a dry run: nothing was done
                progress(f"{o.tag}: would {o.action}")
            else:
                progress(f"{o.tag}: {o.action} done ({o.digest})")
        return
    for o in outcomes:
        if o.action == TagAction.PRESENT:
            stdout.print(f"{o.tag}: present ({o.digest})")
        elif not o.done:
            source = f" from {document['source']['upstream']}" if o.action == TagAction.MIRROR else ""
            unasked = (f" if the ledger lacks it (not asked: {o.unasked})" if o.unasked else "")
            stdout.print(f"{o.tag}: would {o.action}{source}{unasked}")
        else:
            figures = (f", {o.verification['symbols_checked']} symbol CRCs verified" if o.verification else "")
            signers = sorted({(m.get("signer"), m.get("key_id")) for m in (o.verification or {}).get("per_module", [])
                              if m.get("signer")})
            if signers:
                figures += ", signed by " + "; ".join(f"{s} (key {k})" for s, k in signers)
            done = "built" if o.action == TagAction.BUILD else "mirrored"
            stdout.print(f"{o.tag}: {done} → {o.reference}@{o.digest}{figures}")
    sys.stdout.flush()


def _rendered_lines(document: dict[str, Any], _shown: Shown) -> None:
    """Where each recipe was written, its build command and its notes."""
    for row in document["recipes"]:
        stdout.print(f"{row['tag']}: {row['family']} recipe written to {row['directory']}/"
                     + ("" if row["builtHere"] else " (rendered only: not built or verified here)"))
        stdout.print(f"  build: {row['build']}", soft_wrap=True)
        for note in row["notes"]:
            stdout.print(f"  note: {note}", soft_wrap=True)


ONE_LINE_EACH = "ensure prints one line per image; use -o json or yaml for the report"
ENSURE = Printers(command="ensure", table=_ensured_lines, wide=False, wide_refused=ONE_LINE_EACH)
RENDER = Printers(command="ensure --render", table=_rendered_lines, wide=False, wide_refused=ONE_LINE_EACH)


def _render(specs: list[TagSpec], into: Path, ledger: str | None, cuda: str, flavour: str, output: Output) -> None:
    """Each tag's recipe into DIR/TAG (written whole: a directory is moved into place only when complete)."""
    import os
    import shutil
    import tempfile

    from gpualign.ensure import recipes
    from gpualign.loaders.rules import load_rules

    if into.exists() and not into.is_dir():
        raise BadInput(f"--render {into}: not a directory")
    branches = load_rules().branches
    rendered = []
    for spec in specs:  # every tag is checked before anything is written
        table = None
        if spec.family == "debian":  # the release's archive says which branches it carries, at which version
            from gpualign.archive.apt import Archive
            from gpualign.judging.tagspec import buildable_here
            from gpualign.model.makers import newer_than_carried

            table = Archive.for_os(spec.os_tag).debian_table(spec.os_tag)
            release = table.get(spec.os_tag)
            if release is not None and spec.branch not in release.branches and \
                    newer_than_carried(release, spec.branch):  # NVIDIA's own repository's recipe, at the rules' version
                version = branches.get(spec.branch)
            else:
                buildable_here(spec, debian=table)
                version = release.version(spec.branch, flavour) if release else None
                if version is None:
                    raise BadInput(f"{spec.tag}: Debian {release.suite if release else spec.os_tag} carries no "
                                   f"{flavour} module source of NVIDIA {spec.branch}")
        else:
            version = branches.get(spec.branch)
        if version is None:
            raise BadInput(f"{spec.tag}: branch {spec.branch} has no pinned driver version in the rules "
                           f"(known: {', '.join(sorted(branches))})")
        rendered.append(recipes.render(spec, version, cuda=cuda, flavour=flavour, debian_table=table))
    image = ledger.removeprefix("registry://") if ledger else "REGISTRY/REPO"
    into.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for recipe in rendered:
        staging = Path(tempfile.mkdtemp(prefix=f".{recipe.tag}.", dir=into))
        for name, text in recipe.files.items():
            (staging / name).write_text(text)
            if name != "Containerfile":
                (staging / name).chmod(0o755)
        staging.chmod(0o755)
        final = into / recipe.tag
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        command = recipe.build_command(str(final), image)
        rows.append({"tag": recipe.tag, "family": recipe.family, "directory": str(final),
                     "builtHere": recipe.runs_here, "build": command, "notes": list(recipe.notes)})
    RENDER.print(output, report("RenderedRecipes", {"ledger": ledger}, {"recipes": rows}))


def signing_key(key: Path | None, cert: Path | None, secret: str | None, kubeconfig: str | None,
             context: str | None) -> SigningKey | None:
    """The signing key, checked before any work (None: modules are not signed)."""
    if secret is None and key is None and cert is None:
        return None  # (the signing modules, with cryptography and asn1crypto, are not even loaded)
    from gpualign.ensure import sign

    if secret is not None:
        if key is not None or cert is not None:
            raise BadInput("--sign-secret: give either the Secret or --sign-key/--sign-cert, not both")
        namespace, _, name = secret.partition("/")
        if not namespace or not name or "/" in name:
            raise BadInput(f"--sign-secret {secret!r}: expected NAMESPACE/NAME")
        from gpualign.usecases.ensure_images import signing_key_from_secret

        return signing_key_from_secret(kubeconfig, context, namespace, name, f"--sign-secret {secret}")
    if (key is None) != (cert is None):
        raise BadInput("--sign-key and --sign-cert go together: the key signs, the certificate names it")
    if key is None or cert is None:
        return None
    return sign.from_files(key, cert)


def register(app: typer.Typer) -> None:
    app.command("ensure", help=HELP, short_help="Build or mirror the missing driver images, verified against "
                                                "their kernels, into the ledger.")(ensure)
