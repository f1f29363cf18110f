"""The kernel load check's door: a driver image's modules loaded into their own Debian kernel, booted in a VM.

For a kernel release (6.1.0-50-amd64, 6.12.118+deb13-amd64, their arm64 kernels): its `linux-image-<release>`
package is read from Debian's archive through the same door as its headers (gpualign.archive.apt: the suites the
build reads, verified as apt verifies them), unpacked once, and cached with the module index depmod makes of it. A
VM boots that kernel (qemu: TCG emulation, or KVM where $GPUALIGN_KERNEL_ACCEL=kvm asks for it)
with an initramfs of busybox, the kernel's own modules nvidia.ko needs (in modules.dep's order) and nvidia.ko, and
an init that loads them one by one between markers. What the kernel said is judged by
gpualign.judging.kernel_console.

The initramfs is written here as the kernel reads it (newc cpio, uncompressed: nvidia.ko is about 65 MB, and an
uncompressed archive is copied into memory rather than inflated under emulation). Python's standard library writes
no cpio, and the format is a 110-byte header per file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpualign.base.errors import BadInput, GpualignError
from gpualign.judging import kernel_console, kmod, secure_boot
from gpualign.judging.kernel_console import KernelVerdict
from gpualign.judging.secure_boot import NotEnforced
from gpualign.model.kernels import Kernel

NVIDIA_CORE = "nvidia"  # the one NVIDIA module that loads without another NVIDIA module
QEMU = {"amd64": ("qemu-system-x86_64", ["-machine", "q35"], "ttyS0"),
        "arm64": ("qemu-system-aarch64", ["-machine", "virt", "-cpu", "max"], "ttyAMA0")}
# What the kernel's command line adds per architecture. x86: no_timer_check, as cloud images boot their VMs: an
# emulated CPU starved by a busy host misses the IO-APIC timer's test interrupts at boot, and the kernel panics
# ("IO-APIC + timer doesn't work!") before any module is loaded.
KERNEL_ARGS = {"amd64": " no_timer_check", "arm64": ""}
QEMU_PACKAGES = {"amd64": "qemu-system-x86", "arm64": "qemu-system-arm"}  # Debian's packages of those emulators
BUSYBOX = Path("/bin/busybox")
# TCG emulation by default: it boots Debian's kernels here in seconds, on any machine. KVM is asked for by name
# (kvm): a nested /dev/kvm may open and still never run the guest, which would cost the whole timeout.
ACCEL_ENV = "GPUALIGN_KERNEL_ACCEL"


@dataclass(frozen=True)
class KernelTree:
    """A kernel unpacked from its package: its image and its modules with their index."""

    release: str
    root: Path  # holds boot/vmlinuz-RELEASE and lib/modules/RELEASE

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.release

    def dependencies(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """module name (`_` for `-`) -> (its file under modules/, the files it needs), from modules.dep."""
        out: dict[str, tuple[str, tuple[str, ...]]] = {}
        for line in (self.modules / "modules.dep").read_text().splitlines():
            path, _, needs = line.partition(":")
            out[_name(path)] = (path, tuple(needs.split()))
        return out

    def builtin(self) -> set[str]:
        found = self.modules / "modules.builtin"
        return {_name(p) for p in found.read_text().split()} if found.exists() else set()


def _name(path: str) -> str:
    """A module's name as the kernel compares it: its file's stem, `-` and `_` alike."""
    base = path.rsplit("/", 1)[-1]
    for suffix in (".xz", ".zst", ".gz", ".ko"):
        base = base.removesuffix(suffix)
    return base.replace("-", "_")


def kernels_cache() -> Path:
    """Where unpacked kernels are kept, beside the build's caches (~/.cache/gpualign/ensure/kernels)."""
    from gpualign.loaders.archive_reading import ensure_root

    return ensure_root() / "kernels"


def kernel_tree(release: str, cache: Path) -> KernelTree:
    """The kernel's package unpacked under `cache` (once; a file lock keeps two runs from doing it twice)."""
    from gpualign.archive.apt import file_lock

    root = cache / release
    tree = KernelTree(release, root)
    if (root / ".complete").exists():
        return tree
    with file_lock(f"kernel-{release}.lock"):
        if (root / ".complete").exists():
            return tree
        package = f"linux-image-{release}"
        with tempfile.TemporaryDirectory(prefix="gpualign-kernel-", dir=cache.parent if cache.parent.exists()
                                         else None) as tmp:
            unpacked = _unpacked(release, package, Path(tmp))
            merged = unpacked / "usr" / "lib" / "modules"  # trixie's kernels keep their modules under /usr
            if merged.is_dir() and not (unpacked / "lib" / "modules").exists():
                (unpacked / "lib").mkdir(exist_ok=True)
                (unpacked / "lib" / "modules").symlink_to("../usr/lib/modules")
            _run(["depmod", "-b", str(unpacked), release], f"indexing {package}'s modules (depmod)")
            if root.exists():
                shutil.rmtree(root)
            root.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(unpacked), root)
        (root / ".complete").write_text(package + "\n")
    return tree


def _unpacked(kernel: str, package: str, tmp: Path) -> Path:
    """`package` of the kernel's archive (its release and architecture), downloaded as apt verifies it and unpacked
    under tmp: the unpacked tree."""
    from gpualign.archive.apt import Archive, ArchiveError

    archive = Archive.for_kernel(kernel)
    archive.update()
    res = archive._apt("download", archive.target(package), cwd=tmp)
    debs = list(tmp.glob("*.deb"))
    if res.returncode != 0 or not debs:
        raise ArchiveError(f"{package} is not in Debian's archive ({archive.describe()}): "
                           f"{(res.stderr.strip().splitlines() or ['no .deb'])[-1]}")
    unpacked = tmp / "root"
    _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], f"unpacking {debs[0].name}")
    return unpacked


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise BadInput(f"{cmd[0]} is not installed: {what} needs it (scripts/install-debs installs it)") from None
    if proc.returncode != 0:
        raise GpualignError(f"{what} failed: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")


def load_order(tree: KernelTree, wanted: list[str]) -> list[str]:
    """The kernel's own module files to load before NVIDIA's, dependencies first (modules.dep), for the module
    names NVIDIA's modules depend on; a built-in one needs nothing."""
    deps, builtin = tree.dependencies(), tree.builtin()
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for needed in deps.get(_name(path), (path, ()))[1]:
            visit(needed)
        order.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key in builtin:
            continue
        if key not in deps:
            raise GpualignError(f"kernel {tree.release} has no module {name}, which NVIDIA's modules need")
        visit(deps[key][0])
    return order


def boot_and_load(modules: Path, kernel: str, cache: Path, *, timeout: float = 240.0,
                  accel: str | None = None, trust: tuple[bytes, ...] = ()) -> KernelVerdict:
    """Boot `kernel` and load the .ko files in `modules` (an image's) into it: the kernel's verdict.

    trust: certificates (PEM or DER) to boot with under UEFI Secure Boot, held as a node's MOK list would hold them
    (gpualign.judging.secure_boot): the kernel then locks itself down and refuses a module they did not sign. A
    kernel that did not lock down is no verdict on signatures: NotEnforced, never a pass."""
    arch = Kernel.of(kernel).arch_or_amd64
    qemu, machine, console = QEMU.get(arch, (None, [], ""))
    if qemu is None:
        raise BadInput(f"kernel {kernel}: gpualign boots amd64 and arm64 kernels, not {arch}")
    if shutil.which(qemu) is None:
        raise BadInput(f"{qemu} is not installed: the kernel load check boots the kernel in it (Debian's "
                       f"{QEMU_PACKAGES[arch]}; scripts/install-debs installs it)")
    if arch == _host_arch() and not BUSYBOX.exists():
        raise BadInput(f"{BUSYBOX} is not installed (Debian's busybox-static): the kernel load check's VM runs it")
    ko = {p.stem: p for p in sorted(modules.glob("*.ko"))}
    if NVIDIA_CORE not in ko:
        return KernelVerdict(kernel, kernel_console.Load.REFUSED, ("the image holds no nvidia.ko to load",))
    core = kmod.read_file(ko[NVIDIA_CORE])
    wanted = [d for d in (core.field("depends") or "").split(",") if d]
    tree = kernel_tree(kernel, cache)
    firmware = secure_boot.firmware_for(kernel, arch, tree.vmlinuz, trust, cache) if trust else None
    order = load_order(tree, wanted)
    others = tuple(sorted(n for n in ko if n != NVIDIA_CORE))
    with tempfile.TemporaryDirectory(prefix="gpualign-initramfs-") as tmp:
        initrd = Path(tmp) / "initramfs.cpio"
        names = [_name(p) for p in order] + [NVIDIA_CORE]
        files = {f"m/{_name(p)}.ko": _module_bytes(tree.modules / p) for p in order}
        files[f"m/{NVIDIA_CORE}.ko"] = ko[NVIDIA_CORE].read_bytes()
        _write_initramfs(initrd, files, _init_script(names, lockdown=firmware is not None),
                         busybox_for(arch, kernel, cache))
        accel = accel or os.environ.get(ACCEL_ENV) or "tcg"
        if accel == "kvm" and (arch != _host_arch() or not os.access("/dev/kvm", os.R_OK | os.W_OK)):
            raise BadInput(f"${ACCEL_ENV}=kvm: /dev/kvm does not answer for {arch} here; leave it unset (TCG)")
        level = 5
        if firmware is not None:  # and the kernel's notices: it gives its reason for a refused key at that level
            machine, level = firmware.qemu_args(Path(tmp) / "vars.fd"), 6
        extra = KERNEL_ARGS.get(arch, "")
        cmd = [qemu, *machine, "-accel", accel, "-m", "1024", "-smp", "1", "-kernel", str(tree.vmlinuz),
               "-initrd", str(initrd), "-append", f"console={console} panic=-1 loglevel={level}{extra}",
               "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-monitor", "none"]
        started = time.monotonic()
        try:
            # batch work: the VM yields the CPU to what answers people and clusters (a controller, a walk)
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout, preexec_fn=_lower_priority)
            out = proc.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode(errors="replace") + f"\n(no end after {timeout:.0f} s)"
        seconds = time.monotonic() - started
    verdict = kernel_console.read(kernel, out, others)
    if firmware is not None:
        if verdict.lockdown not in kernel_console.LOCKED:
            raise NotEnforced(f"kernel {kernel} booted under Secure Boot did not lock down (lockdown: "
                               f"{verdict.lockdown or 'not said'}): its module signature check was not made")
        verdict = dataclasses.replace(verdict, trusted=firmware.trusted)
    verdict = dataclasses.replace(verdict, seconds=seconds, accel=accel)
    if verdict.load is not kernel_console.Load.UNFINISHED:  # a timeout on a busy machine is no verdict to keep
        _keep(cache, verdict_key(ko[NVIDIA_CORE], kernel, trust), verdict)
    return verdict


def verdict_key(nvidia_ko: Path, kernel: str, trust: tuple[bytes, ...]) -> str:
    """What a verdict depends on: the bytes of nvidia.ko (the module the kernel decides on; the others need a
    GPU), the kernel release, and the certificates it trusted under Secure Boot (none: no Secure Boot)."""
    digest = hashlib.sha256()
    with nvidia_ko.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    for cert in sorted(secure_boot.der(c) for c in trust):
        digest.update(b"|" + hashlib.sha256(cert).digest())
    return f"{kernel}-{digest.hexdigest()[:32]}"


def kept_verdict(modules: Path, kernel: str, cache: Path, trust: tuple[bytes, ...] = ()) -> dict[str, Any] | None:
    """The verdict a boot of the same nvidia.ko in the same kernel with the same trust gave before (as_dict, with
    its line), or None. A kernel's verdict on the same bytes does not change."""
    core = modules / f"{NVIDIA_CORE}.ko"
    if not core.exists():
        return None
    try:
        return dict(json.loads((cache / "verdicts" / f"{verdict_key(core, kernel, trust)}.json").read_text()))
    except (OSError, ValueError):
        return None


def _keep(cache: Path, key: str, verdict: KernelVerdict) -> None:
    where = cache / "verdicts"
    where.mkdir(parents=True, exist_ok=True)
    record = verdict.as_dict() | {"ok": verdict.ok, "line": verdict.line()}
    with tempfile.NamedTemporaryFile("w", dir=where, prefix=".verdict-", delete=False) as tmp:
        json.dump(record, tmp)
    Path(tmp.name).replace(where / f"{key}.json")


def _lower_priority() -> None:
    os.nice(10)


# the kernel's lockdown state, as securityfs shows it ("none [integrity] confidentiality"): the word in brackets
_LOCKDOWN_SAID = r"""/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t securityfs securityfs /sys/kernel/security
echo "MARK lockdown [$(/bin/busybox sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/security/lockdown)]"
"""


def _init_script(names: list[str], *, lockdown: bool = False) -> bytes:
    """The VM's /init: each module loaded between markers; under Secure Boot, first the kernel's lockdown state."""
    said = (_LOCKDOWN_SAID.replace("MARK", kernel_console.MARK)) if lockdown else ""
    loads = said + "".join(f'echo "{kernel_console.MARK} insmod {n}"\n/bin/busybox insmod /m/{n}.ko\n'
                    f'echo "{kernel_console.MARK} rc {n} $?"\n' for n in names)
    return ("#!/bin/busybox sh\n/bin/busybox mkdir -p /proc /sys /dev\n"
            "/bin/busybox mount -t proc proc /proc\n/bin/busybox mount -t devtmpfs dev /dev\n"
            f"{loads}echo \"{kernel_console.MARK} done\"\n/bin/busybox poweroff -f\n").encode()


def _module_bytes(path: Path) -> bytes:
    """A kernel module as insmod takes it: Debian compresses some kernels' modules with xz."""
    if path.exists():
        data = path.read_bytes()
        return lzma.decompress(data) if path.suffix == ".xz" else data
    raise GpualignError(f"{path}: not in the kernel's package")


def busybox_for(arch: str, kernel: str, cache: Path) -> Path:
    """A static busybox the kernel's architecture runs: this machine's own, or for another architecture Debian's
    busybox-static of that architecture, read from the kernel's archive (verified as apt verifies it) and cached."""
    if arch == _host_arch():
        return BUSYBOX
    from gpualign.archive.apt import file_lock

    found = cache / f"busybox-{arch}" / "busybox"
    if found.exists():
        return found
    with file_lock(f"busybox-{arch}.lock"):
        if found.exists():
            return found
        with tempfile.TemporaryDirectory(prefix="gpualign-busybox-") as tmp:
            unpacked = _unpacked(kernel, "busybox-static", Path(tmp))
            found.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(unpacked / "bin" / "busybox", found.with_suffix(".part"))
            found.with_suffix(".part").replace(found)
    return found


def _write_initramfs(out: Path, files: dict[str, bytes], init: bytes, busybox: Path = BUSYBOX) -> None:
    """A newc cpio archive: /init, /bin/busybox, and the modules."""
    entries: list[tuple[str, int, bytes]] = [("bin", 0o040755, b""), ("m", 0o040755, b""),
                                             ("init", 0o100755, init),
                                             ("bin/busybox", 0o100755, busybox.read_bytes())]
    entries += [(name, 0o100644, data) for name, data in files.items()]
    with out.open("wb") as handle:
        for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
            encoded = name.encode() + b"\0"
            fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
            handle.write(b"070701" + b"".join(f"{v:08X}".encode() for v in fields))
            handle.write(encoded + b"\0" * ((-(110 + len(encoded))) % 4))
            handle.write(data + b"\0" * ((-len(data)) % 4))


def _host_arch() -> str:
    from gpualign.archive.apt import host_arch

    return host_arch()
