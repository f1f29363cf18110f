"""A kernel's two spellings, in one place. Pure.

A node's kernel is named twice:
- its **release**, as `uname -r` says it, and as the headers package (`linux-headers-<release>`), the modules'
  version magic, `/lib/modules/<release>` and `status.nodeInfo.kernelVersion` spell it: `6.12.117+deb13-amd64`;
- its **label**, as Node Feature Discovery publishes it (`feature.node.kubernetes.io/kernel-version.full`), and so
  as the GPU Operator's precompiled tag holds it: a label value (and an image tag) cannot hold `+`, so NFD writes
  every character outside `[-A-Za-z0-9_.]` as `_` (node-feature-discovery PRs #309, #402; KMM's
  `KernelNormalizedVersion`, PR #824): `6.12.117_deb13-amd64`.

Most kernels read the same both ways (`6.1.0-50-amd64`, `5.15.0-124-generic`; RHEL's `el9_4` has a real `_`).
From a label alone the release is found where a distribution's naming says it: Debian's 6.12 kernels carry
`+debNN` (`+deb12` in bookworm-security, `+deb13` in trixie; `+deb13.1` for a point release's new ABI) or
`+bpo` (older backports). Where a node's
`status.nodeInfo.kernelVersion` is at hand, it is the release, and its label must be its spelling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.model import debian_kernels

_UNSAFE = re.compile(r"[^-A-Za-z0-9_.]")
# Debian's releases that hold `+`: 6.12.117+deb13-amd64, 6.12.12+bpo-cloud-amd64, 6.12.117+deb12-rt-arm64
# and a point release's ABI, 6.12.115+deb13.1-amd64
# and a re-upload of one upstream release, 6.12.74+deb13+1-amd64 (package 6.12.74-2)
_DEBIAN_MARK = re.compile(r"[+_](deb(\d+)(?:\.\d+)?(?:[+_]\d+)?|bpo)(?=-)")
_DEBIAN_PLUS = re.compile(r"(?P<version>\d+\.\d+\.\d+)_(?P<mark>deb\d+(?:\.\d+)?|bpo)(?:_(?P<again>\d+))?"
                          r"(?P<rest>-[a-z0-9]+(?:-[a-z0-9]+)*)")


def label_of(release: str) -> str:
    """A kernel release as a label value (and a tag) holds it, as NFD writes it."""
    return _UNSAFE.sub("_", release)


def debian_release(kernel: str) -> str | None:
    """The Debian release a kernel is built for, as its release names it ("13" for 6.12.117+deb13-amd64; "12" for
    a bookworm-backports +bpo kernel), in either spelling; None for a kernel that names none (6.1.0-50-amd64)."""
    m = _DEBIAN_MARK.search(kernel)
    return None if m is None else "12" if m.group(1) == "bpo" else m.group(2)


def release_of(label: str) -> str:
    """The release a kernel label stands for, where the distribution's naming says it (6.12.117_deb13-amd64 →
    6.12.117+deb13-amd64); the label itself otherwise."""
    m = _DEBIAN_PLUS.fullmatch(label)
    if m is None:
        return label
    again = f"+{m.group('again')}" if m.group("again") else ""
    return f"{m.group('version')}+{m.group('mark')}{again}{m.group('rest')}"


# Where a release names no Debian kernel, its architecture as other distributions' releases end (RHEL: .x86_64,
# .aarch64; Ubuntu's -nvidia-64k kernels are arm64 only), spelled as Kubernetes (and Go) spell architectures
_OTHER_ARCH = ((re.compile(r".*-amd64$"), "amd64"), (re.compile(r".*-arm64$"), "arm64"),
               (re.compile(r".*-powerpc64le$"), "ppc64le"), (re.compile(r".*-s390x$"), "s390x"),
               (re.compile(r".*-riscv64$"), "riscv64"), (re.compile(r".*-armmp(-lpae)?$"), "arm"),
               (re.compile(r".*[._]x86_64$"), "amd64"), (re.compile(r".*[._]aarch64(_64k)?$"), "arm64"),
               (re.compile(r".*-64k$"), "arm64"))


@dataclass(frozen=True)
class Kernel:
    """One kernel, by both its names, and what its release says of it: its CPU architecture and, for Debian's, its
    parts (series, variant, the Debian release it is built for). Made once where a kernel is read (a node's facts,
    a tag, a flag) and carried from there: nothing outside model/ converts a spelling itself."""

    release: str  # uname -r, headers, version magic, /lib/modules
    label: str  # NFD's label, the tag's kernel

    @classmethod
    def from_label(cls, label: str) -> Kernel:
        return cls(release_of(label), label)

    @classmethod
    def of(cls, either: str) -> Kernel:
        """A kernel named in either spelling (a release, a label, a tag's kernel)."""
        label = label_of(either)
        return cls(release_of(label), label)

    @classmethod
    def from_node(cls, label: str | None, node_info_release: str | None) -> Kernel | None:
        """The node's kernel: its nodeInfo release when it has one whose label spelling is the NFD label (a
        label left from an older kernel, before NFD relabels, is not trusted over it), else the label's reading."""
        if node_info_release and (label is None or label_of(node_info_release) == label):
            return cls(node_info_release, label_of(node_info_release))
        return cls.from_label(label) if label else None

    @property
    def spelled_twice(self) -> bool:
        return self.release != self.label

    def names(self, either: str) -> bool:
        """Whether `either` (in either spelling) names this kernel."""
        return label_of(either) == self.label

    @property
    def debian(self) -> debian_kernels.DebianKernel | None:
        """Its parts, for a Debian kernel; None for a release of another shape."""
        return debian_kernels.parse(self.release)

    @property
    def arch(self) -> str | None:
        """The CPU architecture its release names (6.1.0-50-amd64 → amd64), as Kubernetes spells it; None when it
        names none."""
        debian = self.debian
        if debian is not None:
            return debian.arch
        return next((arch for pattern, arch in _OTHER_ARCH if pattern.fullmatch(self.label)), None)

    @property
    def arch_or_amd64(self) -> str:
        """Its architecture, amd64 where its release names none (as NVIDIA's images and Debian's default are)."""
        return self.arch or "amd64"

    @property
    def built_for(self) -> str | None:
        """The Debian release its name says it is built for ("13" for 6.12.117+deb13-amd64, "12" for +bpo)."""
        return debian_release(self.release)


def candidates(label: str, releases: list[str]) -> list[str]:
    """The releases in `releases` (e.g. an archive's headers packages, less their prefix) a label can stand for."""
    return sorted(r for r in releases if label_of(r) == label)
