"""Present but wrong: an image in the ledger under the right tag whose own records name another kernel or branch.

`by_labels` (pure) reads only the image's config (cheap: no layers): NVIDIA's `version=<branch>-<kernel>` label and
gpualign's `io.gpualign.kernel` / `io.gpualign.driver-branch`. An image without such labels cannot be judged this
way (it passes). `modules_verdict` (check's --verify-modules, the upgrade preflight) pulls the image's modules
and runs the kernel's load checks on them against a kernel's Module.symvers.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from gpualign.base.errors import BadInput, GpualignError
from gpualign.judging.kernel_console import Load
from gpualign.ledger.registry import RegistryClient
from gpualign.model import driver_tag
from gpualign.model.kernels import Kernel

DEBIAN_KERNEL = re.compile(r"\d+\.\d+\.\d+(?:-\d+|\+deb1[23])-(?:cloud-|rt-)?(?:amd64|arm64)")


def checkable(kernel: str | None) -> bool:
    """A kernel whose headers (and Module.symvers) Debian's archive carries: Debian 12's 6.1.0-N-amd64 and
    6.12.N+deb12-amd64, Debian 13's 6.12.N+deb13-amd64 (NFD's label, 6.12.N_deb13-amd64, read back), with their
    -cloud/-rt flavours, and each of them for arm64 (6.1.0-N-arm64). Modules can be checked against it here; others
    (Ubuntu, RHEL) cannot."""
    return bool(kernel and DEBIAN_KERNEL.fullmatch(Kernel.of(kernel).release))


def by_labels(tag: str, labels: Mapping[str, str]) -> str | None:
    """Why the image under `tag` is wrong by its own labels, or None."""
    try:
        spec = driver_tag.parse(tag)
    except BadInput:
        return None  # not a precompiled tag: nothing kernel-specific to compare
    kernel = labels.get("io.gpualign.kernel")
    if kernel and not spec.kernel_value.names(kernel):  # either spelling of one kernel (gpualign.model.kernels)
        return f"its label io.gpualign.kernel says it was built for kernel {kernel}, not {spec.kernel}"
    branch = labels.get("io.gpualign.driver-branch")
    if branch and branch != spec.branch:
        return f"its label io.gpualign.driver-branch says branch {branch}, not {spec.branch}"
    version = labels.get("version")
    if version and "-" in version:
        v_branch, _, v_kernel = version.partition("-")
        if v_branch.isdigit() and (v_branch != spec.branch or not spec.kernel_value.names(v_kernel)):
            return f"its label version={version} names another build than {spec.branch}-{spec.kernel}"
    return kernel_refused(labels)


def kernel_refused(labels: Mapping[str, str]) -> str | None:
    """Why the image is wrong by the booted kernel's verdict it records (its io.gpualign.verified label's
    kernel_load, gpualign.judging.kernel_boot), or None: accepted, switched off, or not recorded."""
    try:
        loaded = json.loads(labels.get("io.gpualign.verified") or "{}").get("kernel_load") or {}
    except (ValueError, AttributeError):
        return None
    verdict = loaded.get("verdict") if isinstance(loaded, dict) else None
    if verdict not in (Load.REFUSED, Load.UNFINISHED):
        return None
    said = "; ".join(str(x) for x in loaded.get("said") or []) or "no reason recorded"
    kernel = loaded.get("kernel") or "?"
    return f"its label io.gpualign.verified records that kernel {kernel} {verdict} its modules: {said}"


# Where driver images keep their modules: the drop-in layout (modprobe's own tree) and the modules-only one (KMM's).
MODULE_DIRS = ("lib/modules/", "usr/lib/modules/", "opt/lib/modules/")
# What the GPU Operator's driver container must have besides its modules (its DaemonSet runs `nvidia-driver init`;
# its probes and the container toolkit use nvidia-smi and the libraries): recorded per image as CONTENTS.
ENTRY_PATHS = ("usr/local/bin/nvidia-driver", "usr/bin/nvidia-driver", "bin/nvidia-driver", "usr/sbin/nvidia-driver")
SMI_PATHS = ("usr/bin/nvidia-smi", "bin/nvidia-smi")
LIBRARY = re.compile(r"(?:^|/)(libcuda|libnvidia-ml)\.so\.(\d+\.\d+(?:\.\d+)?)$")
CONTENTS = "contents.json"


def contract_problem(directory: Path, modules_version: str) -> str | None:
    """Why an image holding modules could not run as the GPU Operator's precompiled driver container, or None:
    no `nvidia-driver` on PATH, no nvidia-smi, no libcuda/libnvidia-ml, or a user space of another version than
    the modules'. Read from what modules_of recorded of the image's files."""
    try:
        contents = json.loads((directory / CONTENTS).read_text())
    except (OSError, ValueError):
        return None  # modules_of always records it; without it there is nothing to judge
    paths = set(contents.get("paths", []))
    if not paths & set(ENTRY_PATHS):
        return "it has no nvidia-driver on PATH (the GPU Operator's driver container runs `nvidia-driver init`)"
    libs = {name for name, _ in contents.get("libraries", [])}
    missing = [n for n, found in (("nvidia-smi", bool(paths & set(SMI_PATHS))), ("libcuda", "libcuda" in libs),
                                  ("libnvidia-ml", "libnvidia-ml" in libs)) if not found]
    if missing:
        return f"it has no NVIDIA user space ({', '.join(missing)} missing): workloads would get no CUDA"
    other = sorted({v for _, v in contents.get("libraries", []) if v != modules_version})
    if modules_version and other:
        return f"its user space is NVIDIA {', '.join(other)}, its modules {modules_version}"
    return None


def modules_of(client: RegistryClient, tag: str, cache: Path, arch: str = "amd64") -> tuple[str, Path] | None:
    """(manifest digest, directory of its .ko files) for an image that holds kernel modules under /lib/modules (or
    /opt/lib/modules), else None. Of an image index, the `arch` entry's image is read, as a node of that
    architecture would pull it (None when the index has none; a single manifest is read whatever it says).
    Its layers are read once (streamed: a module layer is larger than the ledger client's body cap) and the modules
    kept under `cache`, by manifest digest."""
    manifest = client.manifest(tag)
    digest = client.digest(tag)
    if manifest is None or digest is None:
        return None
    read = digest
    if "manifests" in manifest:  # an index: the node's platform entry, as a node would pull
        entry = next((m for m in manifest["manifests"] if (m.get("platform") or {}).get("architecture") == arch),
                     None)
        if entry is None:
            return None
        manifest = client.manifest(entry["digest"]) or {}
        read = entry["digest"]  # each platform's modules cached apart
    out = cache / read.replace(":", "-")
    if (out / ".complete").exists() and (out / CONTENTS).exists():  # read before by a gpualign that records both
        return (digest, out) if list(out.glob("*.ko")) else None
    import shutil  # here, not at import: check judges images by their labels through the registry client alone
    import tarfile
    import tempfile

    import httpx2

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    paths: set[str] = set()
    libraries: set[tuple[str, str]] = set()
    try:
        for layer in manifest.get("layers") or []:
            url = f"{client.ref.base}/v2/{client.ref.repo}/blobs/{layer['digest']}"
            with httpx2.stream("GET", url, timeout=120, follow_redirects=True) as resp:  # a layer can be 70 MB
                if resp.status_code != 200:
                    raise GpualignError(f"pulling layer {layer['digest'][:19]}…: HTTP {resp.status_code}")
                data = resp.read()
            try:
                with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                    for member in tf.getmembers():
                        name = member.name.lstrip("./")
                        if name in ENTRY_PATHS or name in SMI_PATHS:
                            paths.add(name)
                        elif member.isfile() and (lib := LIBRARY.search(name)):
                            libraries.add((lib.group(1), lib.group(2)))
                        if member.isfile() and name.startswith(MODULE_DIRS) and name.endswith(".ko"):
                            blob = tf.extractfile(member)
                            if blob is not None:
                                (staging / Path(name).name).write_bytes(blob.read())
            except tarfile.TarError:
                continue  # not a tar layer: nothing to load from it
        (staging / CONTENTS).write_text(json.dumps({"paths": sorted(paths), "libraries": sorted(libraries)}))
        (staging / ".complete").write_text(digest + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return (digest, out) if list(out.glob("*.ko")) else None


class ModulesVerdict(StrEnum):
    OK = "ok"  # the modules would load, and the GPU Operator could run the image
    WRONG = "wrong"  # the kernel would refuse a module
    CONTRACT = "contract"  # the operator's pod would lack something it runs
    NONE = "none"  # the image holds no modules


def modules_verdict(client: RegistryClient, tag: str, kernel: str, cache: Path,
                    secure_boot: bool = False) -> tuple[ModulesVerdict, str | None]:
    """("ok", symbols checked) when the image's modules would load on `kernel` and it is a driver container the GPU
    Operator can run; ("wrong", the kernel's first refusal, in modprobe's order); ("contract", what the operator's
    pod would lack: contract_problem); ("none", None) when the image holds no modules. The kernel's Module.symvers comes
    from Debian's archive (its headers package). secure_boot: a node whose kernel enforces module signatures
    refuses an unsigned module first (which keys it holds is the node's own: a signed module is judged on the rest)."""
    # the ELF reader (pyelftools), the signature reader (cryptography) and the archive's reader (python-debian): a
    # check that judges labels only, not modules, never loads them (about 0.3 s of imports beside its LISTs)
    from gpualign.archive.apt import Archive
    from gpualign.judging import kmod, symvers
    from gpualign.judging.verify import verify

    found = modules_of(client, tag, cache, Kernel.of(kernel).arch_or_amd64)
    if found is None:
        return ModulesVerdict.NONE, None
    table = symvers.parse(Archive.for_kernel(kernel).symvers(kernel).read_text(), f"Module.symvers of {kernel}")
    modules = [kmod.read_file(p) for p in sorted(found[1].glob("*.ko"))]
    unsigned = sorted(m.name.removesuffix(".ko") for m in modules if m.signature is None)
    if secure_boot and unsigned:
        first = min(unsigned, key=lambda n: ["nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"].index(n)
                    if n in ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm") else 9)
        return ModulesVerdict.WRONG, (f"{first}: module is not signed, and the node has Secure Boot on: its kernel "
                                      "refuses it (Key was rejected by service)")
    version = modules[0].field("version") or "" if modules else ""
    result = verify(modules, kernel, table, version)
    if not result.ok:
        return ModulesVerdict.WRONG, result.first_refusal()
    if (problem := contract_problem(found[1], version)) is not None:
        return ModulesVerdict.CONTRACT, problem
    return ModulesVerdict.OK, str(result.symbols_checked)

