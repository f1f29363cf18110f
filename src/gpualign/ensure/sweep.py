"""Which of a ledger's images and shared-module artifacts no node needs any more. Pure.

An image or artifact is named by its kernel (`535-6.1.0-50-amd64-debian12`; `535.261.03-6.1.0-50-amd64-open` in
`REPO-modules`). Kernels are grouped by their **line**, the kernels one package manager moves a node along
(Debian's 6.1 amd64 kernels; bookworm's 6.12 cloud kernels; Ubuntu's 5.15.0 generic ones). An image stays when its
kernel is:

- **in use**: a node runs it, or announces it as its next (`gpualign.io/kernel.next`), in any cluster read;
- **a fallback**: one of the `keep_previous` kernels just before a kernel in use, in its line. A node that fails to
  boot its new kernel comes back on the one it ran before (GRUB's previous entry), and Debian may no longer carry
  that kernel's headers, so its image could not be built again;
- **the newest of its line**: a pool scaled to zero comes back on it, and the kernel Debian's archive offers next
  is the newest its line has, so an image built ahead of it is never swept before a node boots it;
- **offered next**: the kernel Debian's archive installs next on a pool, as read (`offered`), whatever else the
  line holds.

What gpualign cannot read a kernel from (`latest`, a tag of another shape) is never touched, nor is any digest that
a kept tag also names: a registry deletes a manifest by digest, and with it every tag on it.

A signature, attestation or attached SBOM (`sha256-<hex>.sig|.att|.sbom`, cosign's tags) goes with the image it is
attached to, and so does one whose image no tag names any more (left by an earlier sweep); it stays while any kept
tag names its image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpualign.model.cosign import attached_to
from gpualign.model.driver_tag import try_parse
from gpualign.model.kernels import Kernel

_MODULES_TAG = re.compile(r"(?P<version>\d+\.\d+(?:\.\d+)?)-(?P<kernel>.+)-(?P<flavour>[a-z]+)")
# Ubuntu's and most distributions' releases: 5.15.0-124-generic, 6.8.0-1017-aws (upstream, ABI, flavour)
_ABI_FLAVOUR = re.compile(r"(?P<upstream>\d+\.\d+\.\d+)-(?P<abi>\d+)(?:\.\d+)?-(?P<flavour>[a-z0-9-]+)")

Line = tuple[str, ...]


def image_kernel(tag: str) -> str | None:
    """The kernel a precompiled driver tag names, or None for a tag of another shape."""
    spec = try_parse(tag)
    return spec.kernel if spec else None


def modules_kernel(tag: str) -> str | None:
    """The kernel a shared-modules artifact's tag names (`<source version>-<kernel>-<flavour>`), or None."""
    m = _MODULES_TAG.fullmatch(tag)
    return m.group("kernel") if m else None


def line_of(kernel: str) -> tuple[Line, tuple[int, ...]] | None:
    """A kernel's line and its place in it, in either spelling; None for a kernel of no known shape (its image is
    kept only while in use)."""
    named = Kernel.of(kernel)
    release, debian = named.release, named.debian
    if debian is not None:
        return ("debian", debian.built_for or "", *debian.line), debian.abi
    m = _ABI_FLAVOUR.fullmatch(release)
    if m is not None:
        return ("abi", m.group("upstream"), m.group("flavour")), (int(m.group("abi")),)
    return None


def kept_kernels(kernels: Iterable[str], live: Iterable[str], keep_previous: int = 1,
                 offered: Iterable[str] = ()) -> dict[str, str]:
    """Of `kernels` (a ledger's, in either spelling), those to keep, as NFD labels them, and why: "in use",
    "offered next" (Debian's archive installs it next on a pool), "fallback" or "newest of its line"; the rest may
    go."""
    labels = {Kernel.of(k).label for k in kernels}
    live_labels = {Kernel.of(k).label for k in live}
    by_line: dict[Line, list[tuple[tuple[int, ...], str]]] = {}
    for label in labels:
        found = line_of(label)
        if found is not None:
            by_line.setdefault(found[0], []).append((found[1], label))
    kept = dict.fromkeys(labels & live_labels, "in use")
    for label in labels & {Kernel.of(k).label for k in offered}:
        kept.setdefault(label, "offered next")
    for members in by_line.values():
        kept.setdefault(max(members)[1], "newest of its line")
    for label in live_labels:  # whether or not the kernel in use has an image here, its fallbacks stay
        found = line_of(label)
        if found is None or keep_previous <= 0:
            continue
        line, place = found
        older = sorted(m for m in by_line.get(line, ()) if m[0] < place)
        for _, other in older[-keep_previous:]:
            kept.setdefault(other, "fallback")
    return kept


@dataclass(frozen=True)
class Unused:
    """What would go, what stays because another tag shares its digest, and what is not gpualign's to judge."""

    images: tuple[str, ...]  # driver tags whose kernel no node runs or announces, nor falls back to
    modules: tuple[str, ...]  # shared-modules tags, likewise
    shared_digest: tuple[str, ...]  # unused tags kept: a kept tag names the same manifest
    unknown: tuple[str, ...]  # tags no kernel could be read from: kept
    kept: tuple[tuple[str, str], ...] = ()  # (tag, why) for tags kept though no node runs or announces their kernel
    # signatures, attestations and SBOMs whose image goes, or went before: (repository "images" or "modules", tag)
    attachments: tuple[tuple[str, str], ...] = ()


def unused(image_digests: Mapping[str, str | None], module_digests: Mapping[str, str | None],
           kernels: Iterable[str], keep_previous: int = 1, offered: Iterable[str] = ()) -> Unused:
    """image_digests / module_digests: tag -> its manifest digest (None when unknown); kernels: every kernel a node
    runs or announces, in either spelling; offered: the kernels Debian's archive installs next on the pools."""
    live = {Kernel.of(k).label for k in kernels}  # compared as NFD labels them, and tags hold them
    offered = {Kernel.of(k).label for k in offered}
    images: list[str] = []
    modules: list[str] = []
    shared: list[str] = []
    unknown: list[str] = []
    kept_for: list[tuple[str, str]] = []
    attachments: list[tuple[str, str]] = []
    for name, everything, kernel_of, out in (("images", image_digests, image_kernel, images),
                                             ("modules", module_digests, modules_kernel, modules)):
        attached = {tag: subject for tag in everything if (subject := attached_to(tag))}
        table = {tag: digest for tag, digest in everything.items() if tag not in attached}
        of_tag = {tag: kernel_of(tag) for tag in table}
        keep = kept_kernels((k for k in of_tag.values() if k), live, keep_previous, offered)
        kept_digests: set[str | None] = set()
        gone: list[str] = []
        for tag in sorted(table):
            kernel = of_tag[tag]
            if kernel is None:
                unknown.append(tag)
                kept_digests.add(table[tag])
            elif (why := keep.get(Kernel.of(kernel).label)) is not None:
                kept_digests.add(table[tag])
                if why != "in use":
                    kept_for.append((tag, why))
            else:
                gone.append(tag)
        for tag in gone:
            if table[tag] is None or table[tag] in kept_digests:
                shared.append(tag)
            else:
                out.append(tag)
        attachments.extend((name, tag) for tag, subject in sorted(attached.items())
                           if subject not in kept_digests and everything[tag] not in kept_digests)
    return Unused(images=tuple(images), modules=tuple(modules), shared_digest=tuple(shared), unknown=tuple(unknown),
                  kept=tuple(kept_for), attachments=tuple(attachments))
