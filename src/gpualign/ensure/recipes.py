"""Driver image recipes per OS family, rendered as a build context (a Containerfile and its scripts). Pure.

Only Debian 12 is built and verified end to end by gpualign (gpualign.ensure.debian runs the same steps with
mmdebstrap and chroot). Ubuntu's and RHEL's archives are unreachable from here, so their recipes are rendered, to
be built elsewhere with `buildah bud` or `docker build`, and unit-tested against the facts of NVIDIA's own recipes
(github.com/NVIDIA/gpu-driver-container):
- **Ubuntu 22.04 / 24.04**, `ubuntu*/precompiled`: Canonical's prebuilt packages from the Ubuntu archive
  (`linux-objects-nvidia-<branch>-server[-open]-<kernel>`, `linux-signatures-nvidia-<kernel>`,
  `linux-modules-nvidia-<branch>-server[-open]-<kernel>`, whose install links the objects into signed modules), on
  NVIDIA's CUDA base image, with DRIVER_BRANCH and KERNEL_VERSION in the environment;
- **RHEL 9**, `rhel9/precompiled`: a builder stage on the OpenShift Driver Toolkit image of that kernel (its
  kernel-devel), NVIDIA's .run extracted and packaged with `yum-packaging-precompiled-kmod`'s kmod-nvidia.spec by
  `rpmbuild --define "kernel …" --define "kernel_release …" --define "kernel_dist …"`, signed with a key given as
  private_key.priv / public_key.der; the final stage on CUDA's UBI 9 base.

Every recipe ends the same way, which is what NVIDIA's lack: a verify stage that refuses the build unless each module
passes the kernel's own load checks against that kernel's Module.symvers (the release in vermagic, every imported
symbol's CRC: `modprobe --dump-modversions`), and the same drop-in image: the modules under /lib/modules/<kernel>
with depmod, the distribution's NVIDIA user space at the modules' version (a build whose `nvidia-smi -h` names
another version fails), and gpualign's `nvidia-driver` (the GPU Operator's contract, refusing any other kernel),
labelled version=<branch>-<kernel>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.archive.apt import configured_mirror, configured_security
from gpualign.base.errors import BadInput
from gpualign.ensure.buildroot import FLAVOURS
from gpualign.ensure.image import NVIDIA_DRIVER
from gpualign.model.driver_tag import TagSpec, parse
from gpualign.model.flavours import Flavour
from gpualign.model.makers import DebianTable, newer_than_carried, nvidia_repository

UBUNTU = {"22.04": "jammy", "24.04": "noble"}
UBUNTU_ARCHIVE = "http://archive.ubuntu.com/ubuntu"
NVIDIA_RUN = "https://us.download.nvidia.com/tesla"
KMOD_SPEC = "https://github.com/NVIDIA/yum-packaging-precompiled-kmod"
CUDA_BASE = "nvcr.io/nvidia/cuda"
DEFAULT_CUDA = "12.9.1"  # the CUDA base image of NVIDIA's driver containers (build arg CUDA_VERSION)
_RHEL_KERNEL = re.compile(
    r"(?P<ver>\d+\.\d+\.\d+)-(?P<rel>[\d.]+?)(?P<dist>\.el\d+(?:_\d+)?)\.(?P<arch>x86_64|aarch64)")

# The same rule as gpualign.judging.verify, in the build's own shell: the release in vermagic, then every imported
# symbol's CRC against the kernel's Module.symvers (a symbol the set exports to itself is skipped). Exit 1 names the
# module and the first refused symbol; nothing is tagged.
VERIFY = r"""#!/bin/sh
# gpualign: the kernel's load checks, offline, before the image is made. Usage: verify-modules KERNEL SYMVERS DIR
set -eu
kernel="$1"; symvers="$2"; dir="$3"
[ -s "$symvers" ] || { echo "verify: no Module.symvers at $symvers" >&2; exit 1; }
found=0; ownsyms=$(mktemp)
for ko in "$dir"/*.ko; do nm "$ko" 2>/dev/null | sed -n 's/.* __ksymtab_//p' >> "$ownsyms" || true; done
for ko in "$dir"/*.ko; do
  [ -e "$ko" ] || continue
  found=$((found + 1)); name=$(basename "$ko" .ko)
  release=$(modinfo -F vermagic "$ko" | cut -d' ' -f1)
  if [ "$release" != "$kernel" ]; then
    echo "verify: $name: version magic names $release, not $kernel" >&2; exit 1
  fi
  modprobe --dump-modversions "$ko" | while read -r crc sym; do
    want=$(awk -v s="$sym" '$2 == s { print $1; exit }' "$symvers")
    if [ -z "$want" ]; then
      grep -qx "$sym" "$ownsyms" && continue
      echo "verify: $name: Unknown symbol $sym ($kernel does not export it)" >&2; exit 1
    fi
    if [ $((want)) -ne $((crc)) ]; then
      echo "verify: $name: disagrees about version of symbol $sym (module $crc, kernel $kernel $want)" >&2; exit 1
    fi
  done
done
rm -f "$ownsyms"
[ "$found" -gt 0 ] || { echo "verify: no .ko in $dir" >&2; exit 1; }
echo "verify: $found modules fit $kernel"
"""


@dataclass(frozen=True)
class Recipe:
    tag: str
    family: str
    runs_here: bool  # False: rendered only (gpualign renders the recipe; it is built where its archive is reachable)
    files: dict[str, str]  # build-context path -> content
    build_args: dict[str, str]
    notes: tuple[str, ...]

    def build_command(self, context: str, image: str) -> str:
        """The build, for the kernel's architecture: an arm64 kernel's recipe is built as linux/arm64 (natively on an
        arm64 builder; the stages' bases and packages are then arm64's)."""
        args = [f"--build-arg {k}={v}" for k, v in self.build_args.items()]

        arch = parse(self.tag).kernel_value.arch
        platform = [f"--platform linux/{arch}"] if arch and arch != "amd64" else []
        return " ".join(["buildah bud --layers", *platform, *args, f"-t {image}:{self.tag} {context}"])


def labels(spec: TagSpec, driver_version: str) -> dict[str, str]:
    return {"version": f"{spec.branch}-{spec.kernel}", "io.gpualign.kernel": spec.kernel,
            "io.gpualign.driver-branch": spec.branch, "io.gpualign.driver-version": driver_version,
            "io.gpualign.os-tag": spec.os_tag, "name": "NVIDIA Driver Container",
            "io.k8s.display-name": "NVIDIA Driver Container", "release": f"{spec.kernel}-{spec.os_tag}",
            "summary": "Provision the NVIDIA driver through containers",
            "org.opencontainers.image.title": "NVIDIA driver container (precompiled)",
            "org.opencontainers.image.version": f"{driver_version}-{spec.kernel}"}


def userspace_check(driver_version: str) -> str:
    """A build step refusing user space of another version than the modules'."""
    return (f'RUN v="$(nvidia-smi -h | head -n 1)"; case "$v" in *"v{driver_version}") ;; '
            f'*) echo "user space $v does not match the modules\' NVIDIA {driver_version}" >&2; exit 1 ;; esac')


def _final(spec: TagSpec, driver_version: str, base: str, install: str) -> str:
    """install: the RUN steps that put kmod and NVIDIA's user space (at driver_version) in the image."""
    label_lines = "\n".join(f'LABEL {k}="{v}"' for k, v in labels(spec, driver_version).items())
    return f"""
FROM {base}
{install}
{userspace_check(driver_version)}
COPY --from=verify /out/ /lib/modules/{spec.kernel}/kernel/drivers/video/
RUN depmod {spec.kernel}
COPY --chmod=0755 nvidia-driver /usr/local/bin/nvidia-driver
ENV DRIVER_VERSION={driver_version} DRIVER_BRANCH={spec.branch} KERNEL_VERSION={spec.kernel} \\
    GPUALIGN_KERNEL={spec.kernel} NVIDIA_VISIBLE_DEVICES=void
{label_lines}
WORKDIR /drivers
ENTRYPOINT ["nvidia-driver", "init"]
"""


def _verify_stage(builder: str, symvers: str, modules_dir: str, kernel: str) -> str:
    """Every NVIDIA module of the build (decompressed: Ubuntu 24.04 and RHEL ship .ko.zst / .ko.xz) into /out, and
    the build refused unless they pass."""
    return f"""
FROM {builder} AS verify
COPY --chmod=0755 verify-modules /usr/local/bin/verify-modules
RUN mkdir -p /out && find {modules_dir} -path '*nvidia*' \\( -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' \\) \\
      -exec cp {{}} /out/ \\; \\
 && for z in /out/*.ko.xz; do [ -e "$z" ] && xz -d "$z"; done; \\
    for z in /out/*.ko.zst; do [ -e "$z" ] && zstd -q -d --rm "$z"; done; \\
    verify-modules {kernel} {symvers} /out
"""


def ubuntu(spec: TagSpec, driver_version: str, cuda: str, flavour: str) -> Recipe:
    version = spec.os_tag.removeprefix("ubuntu")
    codename = UBUNTU.get(version)
    if codename is None:
        raise BadInput(f"{spec.tag}: no recipe for {spec.os_tag}: NVIDIA's precompiled recipe covers Ubuntu "
                       f"{' and '.join(UBUNTU)}")
    b, k = spec.branch, spec.kernel
    open_ = "-open" if flavour == Flavour.OPEN else ""
    modules = [f"linux-objects-nvidia-{b}-server{open_}-{k}", f"linux-signatures-nvidia-{k}",
               f"linux-modules-nvidia-{b}-server{open_}-{k}"]
    sources = " ".join(f"{codename}{s}" for s in ("", "-updates", "-security"))
    builder = f"""# Rendered by gpualign for {spec.tag}: NVIDIA's Ubuntu precompiled recipe (Canonical's
# prebuilt, signed modules), verified against the kernel before the image is made. Build it where the Ubuntu
# archive is reachable.
ARG CUDA_VERSION={cuda}
FROM {CUDA_BASE}:${{CUDA_VERSION}}-base-ubuntu{version} AS builder
ENV DEBIAN_FRONTEND=noninteractive DRIVER_BRANCH={b} KERNEL_VERSION={k}
RUN for s in {sources}; do \\
      echo "deb [arch=amd64] {UBUNTU_ARCHIVE} $s main restricted universe"; done > /etc/apt/sources.list \\
 && rm -f /etc/apt/sources.list.d/cuda* \\
 && apt-get update && apt-get install -y --no-install-recommends kmod binutils xz-utils zstd linux-headers-{k} \\
      {' '.join(modules)} \\
 && rm -rf /var/lib/apt/lists/*
"""
    verify = _verify_stage("builder", f"/usr/src/linux-headers-{k}/Module.symvers", f"/lib/modules/{k}", k)
    # NVIDIA's own user-space step: the server driver's packages, then what a container does not need
    userspace = (f"RUN apt-get update && apt-get install -y --no-install-recommends kmod nvidia-driver-{b}-server \\\n"
                 f" && apt-get purge -y libnvidia-egl-wayland1 nvidia-dkms-{b}-server nvidia-kernel-source-{b}-server "
                 f"xserver-xorg-video-nvidia-{b}-server \\\n && rm -rf /var/lib/apt/lists/*")
    final = _final(spec, driver_version, f"{CUDA_BASE}:${{CUDA_VERSION}}-base-ubuntu{version}", userspace)
    files = {"Containerfile": builder + verify + f"\nARG CUDA_VERSION={cuda}" + final,
             "verify-modules": VERIFY, "nvidia-driver": NVIDIA_DRIVER.read_text()}
    return Recipe(tag=spec.tag, family="ubuntu", runs_here=False, files=files, build_args={"CUDA_VERSION": cuda},
                  notes=("Ubuntu images are not built by gpualign: build this recipe where Canonical's archive is "
                   "reachable; its verify step refuses modules that do not fit the kernel.",
                   f"Canonical ships NVIDIA {b} for {k} only if {modules[-1]} exists in {codename}-updates; "
                   "otherwise the build fails at apt-get install, naming it."))


def rhel_kernel(kernel: str) -> dict[str, str]:
    """'5.14.0-427.37.1.el9_4.x86_64' → version 5.14.0, release 427.37.1, dist .el9_4, arch x86_64 (the rpmbuild
    defines of NVIDIA's kmod spec)."""
    m = _RHEL_KERNEL.fullmatch(kernel)
    if m is None:
        raise BadInput(f"kernel {kernel!r}: not a RHEL kernel release such as 5.14.0-427.37.1.el9_4.x86_64")
    return m.groupdict()


def rhel(spec: TagSpec, driver_version: str, cuda: str, flavour: str) -> Recipe:
    major = spec.os_tag.removeprefix("rhel").split(".")[0]
    if major != "9":
        raise BadInput(f"{spec.tag}: no recipe for {spec.os_tag}: the RHEL recipe covers RHEL 9")
    parts = rhel_kernel(spec.kernel)
    arch, k = parts["arch"], spec.kernel
    path = "kernel-open" if flavour == Flavour.OPEN else "kernel"
    builder = f"""# Rendered by gpualign for {spec.tag}: NVIDIA's RHEL 9 precompiled recipe (kmod-nvidia
# built with rpmbuild against the Driver Toolkit's kernel-devel, signed with your key), verified against the kernel
# before the image is made. Build it with DRIVER_TOOLKIT_IMAGE set to the Driver Toolkit of this kernel, and
# private_key.priv / public_key.der (the key enrolled on the nodes) in the build context.
ARG DRIVER_TOOLKIT_IMAGE
ARG CUDA_VERSION={cuda}
FROM ${{DRIVER_TOOLKIT_IMAGE}} AS builder
WORKDIR /build
COPY private_key.priv public_key.der /build/keys/
RUN git clone --depth 1 --single-branch -b rhel{major} {KMOD_SPEC} kmod && cd kmod \\
 && mkdir -p BUILD BUILDROOT RPMS SRPMS SOURCES SPECS nvidia-kmod-{driver_version}-{arch} \\
 && curl -fsSLO {NVIDIA_RUN}/{driver_version}/NVIDIA-Linux-{arch}-{driver_version}.run \\
 && sh NVIDIA-Linux-{arch}-{driver_version}.run --extract-only --target run \\
 && mv run/{path} nvidia-kmod-{driver_version}-{arch}/kernel \\
 && tar -cJf SOURCES/nvidia-kmod-{driver_version}-{arch}.tar.xz nvidia-kmod-{driver_version}-{arch} \\
 && cp /build/keys/private_key.priv /build/keys/public_key.der SOURCES/ && mv kmod-nvidia.spec SPECS/ \\
 && rpmbuild --define "_topdir $(pwd)" --define "debug_package %{{nil}}" \\
      --define "kernel {parts['ver']}" --define "kernel_release {parts['rel']}" \\
      --define "kernel_dist {parts['dist']}" --define "driver {driver_version}" --define "epoch 1" \\
      --define "driver_branch {spec.branch}" -bb SPECS/kmod-nvidia.spec \\
 && mkdir -p /build/kmod-root && cd /build/kmod-root \\
 && for r in /build/kmod/RPMS/{arch}/kmod-nvidia-*.rpm; do rpm2cpio "$r" | cpio -idm; done \\
 && find . -name '*.ko.xz' -exec xz -d {{}} \\;
"""
    verify = _verify_stage("builder", f"/usr/src/kernels/{k}/Module.symvers", "/build/kmod-root", k)
    # NVIDIA's own user-space step: the CUDA repository's driver stream, at the modules' version
    userspace = (f"RUN dnf -y module enable nvidia-driver:{spec.branch}-open/default && dnf -y install kmod \\\n"
                 f"    nvidia-driver-cuda-{driver_version} nvidia-driver-libs-{driver_version} "
                 f"libnvidia-ml-{driver_version} nvidia-persistenced-{driver_version} \\\n && dnf clean all")
    final = _final(spec, driver_version, f"{CUDA_BASE}:${{CUDA_VERSION}}-base-ubi{major}", userspace)
    files = {"Containerfile": builder + verify + f"\nARG CUDA_VERSION={cuda}" + final,
             "verify-modules": VERIFY, "nvidia-driver": NVIDIA_DRIVER.read_text()}
    args = {"CUDA_VERSION": cuda, "DRIVER_TOOLKIT_IMAGE": "$DRIVER_TOOLKIT_IMAGE"}
    return Recipe(tag=spec.tag, family="rhel", runs_here=False, files=files, build_args=args,
                  notes=("RHEL images are not built by gpualign: build this recipe where Red Hat's archive and the "
                   "Driver Toolkit are reachable; its verify step refuses modules that do not fit the kernel.",
                   "Give the signing key as private_key.priv (PEM) and public_key.der (DER) in the build context: "
                   "Secure Boot nodes load the modules only if that certificate is enrolled."))


def debian(spec: TagSpec, driver_version: str, flavour: str, suite: str = "bookworm") -> Recipe:
    """The recipe gpualign runs here (mmdebstrap and chroot instead of these stages), for building elsewhere."""
    package, tarball, subdir = FLAVOURS[flavour]
    k = spec.kernel
    mirror, security = configured_mirror(), configured_security()  # $GPUALIGN_DEBIAN_MIRROR; --build-arg to change
    builder = f"""# Rendered by gpualign for {spec.tag}: the Debian ({suite}) recipe `gpualign ensure` runs on
# its own machine (there with mmdebstrap and chroot), as container stages.
ARG BUILDER_BASE=debian:{suite}
ARG FINAL_BASE=debian:{suite}-slim
ARG DEBIAN_MIRROR={mirror}
ARG DEBIAN_SECURITY_MIRROR={security}
FROM ${{BUILDER_BASE}} AS builder
ARG DEBIAN_MIRROR
ARG DEBIAN_SECURITY_MIRROR
RUN echo "deb ${{DEBIAN_MIRROR}} {suite} main contrib non-free non-free-firmware" > /etc/apt/sources.list \\
 && echo "deb ${{DEBIAN_SECURITY_MIRROR}} {suite}-security main contrib non-free" >> /etc/apt/sources.list \\
 && rm -f /etc/apt/sources.list.d/debian.sources \\
 && apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev kmod xz-utils binutils \\
      linux-headers-{k} {package} && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /build && cd /build && tar -xf /usr/src/{tarball} && cd modules/{subdir} \\
 && make -j"$(nproc)" modules KERNEL_UNAME={k} \\
 && for ko in $(find . -name '*.ko'); do strip --strip-debug "$ko"; done
"""
    # Debian's user space from non-free (maintainer scripts run here, so update-alternatives makes the links)
    userspace = (f'ARG DEBIAN_MIRROR\nRUN echo "deb ${{DEBIAN_MIRROR}} {suite} main contrib non-free" \\\n'
                 "    > /etc/apt/sources.list && rm -f /etc/apt/sources.list.d/debian.sources && apt-get update \\\n"
                 " && apt-get install -y --no-install-recommends kmod util-linux mount libcuda1 libnvidia-ml1 "
                 "libnvidia-ptxjitcompiler1 libnvidia-cfg1 nvidia-smi nvidia-persistenced \\\n"
                 " && rm -rf /var/lib/apt/lists/*")
    return _debian_recipe(spec, driver_version, builder, userspace, True, {},
                          ("Built and verified here by `gpualign ensure` itself.",))


def _debian_recipe(spec: TagSpec, driver_version: str, builder: str, userspace: str, runs_here: bool,
                   build_args: dict[str, str], notes: tuple[str, ...]) -> Recipe:
    """A Debian recipe from its builder stage (the modules under /build/modules) and its user space step: the
    verify stage, then the image."""
    k = spec.kernel
    verify = _verify_stage("builder", f"/usr/src/linux-headers-{k}/Module.symvers", "/build/modules", k)
    final = _final(spec, driver_version, "${FINAL_BASE}", userspace)
    files = {"Containerfile": builder + verify + final, "verify-modules": VERIFY,
             "nvidia-driver": NVIDIA_DRIVER.read_text()}
    return Recipe(tag=spec.tag, family="debian", runs_here=runs_here, files=files, build_args=build_args, notes=notes)


def nvidia_debian(spec: TagSpec, driver_version: str, flavour: str, suite: str) -> Recipe:
    """A Debian release's image of a branch newer than its archive carries (Blackwell's 570 and later), from NVIDIA's
    own Debian repository: its dkms module source at the driver's version, compiled for the kernel's headers from
    Debian's archive, and its user space at the same version. Rendered only: that repository is not reachable here,
    and NVIDIA's packages are not what ensure builds from."""
    k, release = spec.kernel, spec.os_tag.removeprefix("debian")
    arch = spec.kernel_value.arch_or_amd64
    repo = nvidia_repository(spec.os_tag, arch)
    dkms = "nvidia-kernel-open-dkms" if flavour == Flavour.OPEN else "nvidia-kernel-dkms"
    mirror, security = configured_mirror(), configured_security()
    keyring = ('RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \\\n'
               ' && curl -fsSLo /tmp/cuda-keyring.deb "${NVIDIA_REPOSITORY}cuda-keyring_1.1-1_all.deb" \\\n'
               " && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb")
    builder = f"""# Rendered by gpualign for {spec.tag}: Debian {suite} carries no NVIDIA {spec.branch}, so the module
# source and user space come from NVIDIA's own Debian {release} repository, at {driver_version}; the kernel's headers
# come from Debian's archive. Rendered only, not built or verified here: build it where NVIDIA's repository is
# reachable. Its verify step refuses modules that do not fit the kernel.
ARG BUILDER_BASE=debian:{suite}
ARG FINAL_BASE=debian:{suite}-slim
ARG DEBIAN_MIRROR={mirror}
ARG DEBIAN_SECURITY_MIRROR={security}
ARG NVIDIA_REPOSITORY={repo}
ARG DRIVER_VERSION={driver_version}
FROM ${{BUILDER_BASE}} AS builder
ARG DEBIAN_MIRROR
ARG DEBIAN_SECURITY_MIRROR
ARG NVIDIA_REPOSITORY
ARG DRIVER_VERSION
ENV DEBIAN_FRONTEND=noninteractive
RUN echo "deb ${{DEBIAN_MIRROR}} {suite} main contrib non-free non-free-firmware" > /etc/apt/sources.list \\
 && echo "deb ${{DEBIAN_SECURITY_MIRROR}} {suite}-security main contrib non-free" >> /etc/apt/sources.list \\
 && rm -f /etc/apt/sources.list.d/debian.sources
{keyring}
RUN apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev kmod xz-utils binutils \\
      linux-headers-{k} dkms "{dkms}=${{DRIVER_VERSION}}-*" \\
 && dkms build -m nvidia -v "${{DRIVER_VERSION}}" -k {k} \\
 && mkdir -p /build/modules \\
 && cp /var/lib/dkms/nvidia/"${{DRIVER_VERSION}}"/{k}/*/module/*.ko* /build/modules/ \\
 && for z in /build/modules/*.ko.xz; do [ -e "$z" ] && xz -d "$z"; done; \\
    for ko in /build/modules/*.ko; do strip --strip-debug "$ko"; done
"""
    userspace = (f"ARG NVIDIA_REPOSITORY\nARG DRIVER_VERSION\n{keyring}\n"
                 "RUN apt-get update && apt-get install -y --no-install-recommends kmod util-linux mount \\\n"
                 '      "libcuda1=${DRIVER_VERSION}-*" "libnvidia-ml1=${DRIVER_VERSION}-*" '
                 '"libnvidia-ptxjitcompiler1=${DRIVER_VERSION}-*" \\\n'
                 '      "libnvidia-cfg1=${DRIVER_VERSION}-*" "nvidia-smi=${DRIVER_VERSION}-*" '
                 '"nvidia-persistenced=${DRIVER_VERSION}-*" \\\n'
                 " && rm -rf /var/lib/apt/lists/*")
    return _debian_recipe(spec, driver_version, builder, userspace, False, {"DRIVER_VERSION": driver_version}, (
                  f"Debian {suite} carries no NVIDIA {spec.branch}: this recipe takes it from NVIDIA's own Debian "
                   f"{release} repository ({repo}), which is not reachable here; it is rendered, not built or "
                   "verified here.",
                   f"DRIVER_VERSION pins NVIDIA's packages ({driver_version}, the rules' version of {spec.branch}); "
                   "its verify step refuses modules that do not fit the kernel."))


def render(spec: TagSpec, driver_version: str, *, cuda: str = DEFAULT_CUDA, flavour: str = "proprietary",
           debian_table: DebianTable | None = None) -> Recipe:
    """The recipe for a tag (BadInput for an OS family without one). `debian_table`: the Debian releases as their
    archives carry them (Archive.debian_table); the rules' (with the archive's last reading) when not given."""
    if flavour not in FLAVOURS:
        raise BadInput(f"flavour {flavour!r}: expected proprietary or open")
    if spec.family == "ubuntu":
        return ubuntu(spec, driver_version, cuda, flavour)
    if spec.family == "rhel":
        return rhel(spec, driver_version, cuda, flavour)
    if spec.family == "debian":
        from gpualign.judging.tagspec import buildable_here

        # the recipe ensure runs, for what ensure builds: else its reason, never a false note
        if debian_table is None:
            from gpualign.loaders.rules import load_rules

            debian_table = load_rules().debian
        table = debian_table
        release = table.get(spec.os_tag)
        if release is not None and spec.branch not in release.branches and newer_than_carried(release, spec.branch):
            return nvidia_debian(spec, driver_version, flavour, release.suite)
        return debian(spec, driver_version, flavour, buildable_here(spec, debian=table))
    raise BadInput(f"{spec.tag}: no recipe for {spec.os_tag}: gpualign has recipes for debian12 and debian13 "
                   f"(built here), ubuntu{' and ubuntu'.join(UBUNTU)} and rhel9 (rendered)")
