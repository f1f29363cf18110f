"""Which of a ledger's images and shared-module artifacts no node needs any more. Pure.

An image or artifact is named by its kernel (`535-6.1.0-50-amd64-debian12`; `535.261.03-6.1.0-50-amd64-open` in
`REPO-modules`). One goes when no node runs its kernel or announces it as the next (`gpualign.io/kernel.next`), in
any cluster read. What gpualign cannot read a kernel from (`latest`, a tag of another shape) is never touched, nor
is any digest that a kept tag also names: a registry deletes a manifest by digest, and with it every tag on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpualign.model.kernels import label_of

_MODULES_TAG = re.compile(r"(?P<version>\d+\.\d+(?:\.\d+)?)-(?P<kernel>.+)-(?P<flavour>[a-z]+)")


def image_kernel(tag: str) -> str | None:
    """The kernel a precompiled driver tag names, or None for a tag of another shape."""
    from gpualign.ensure.tagspec import try_parse

    spec = try_parse(tag)
    return spec.kernel if spec else None


def modules_kernel(tag: str) -> str | None:
    """The kernel a shared-modules artifact's tag names (`<source version>-<kernel>-<flavour>`), or None."""
    m = _MODULES_TAG.fullmatch(tag)
    return m.group("kernel") if m else None


@dataclass(frozen=True)
class Unused:
    """What would go, what stays because another tag shares its digest, and what is not gpualign's to judge."""

    images: tuple[str, ...]  # driver tags whose kernel no node runs or announces
    modules: tuple[str, ...]  # shared-modules tags, likewise
    shared_digest: tuple[str, ...]  # unused tags kept: a kept tag names the same manifest
    unknown: tuple[str, ...]  # tags no kernel could be read from: kept


def unused(image_digests: Mapping[str, str | None], module_digests: Mapping[str, str | None],
           kernels: Iterable[str]) -> Unused:
    """image_digests / module_digests: tag -> its manifest digest (None when unknown); kernels: every kernel a node
    runs or announces, in either spelling."""
    live = {label_of(k) for k in kernels}  # compared as NFD labels them, and tags hold them
    images: list[str] = []
    modules: list[str] = []
    shared: list[str] = []
    unknown: list[str] = []
    for table, kernel_of, out in ((image_digests, image_kernel, images), (module_digests, modules_kernel, modules)):
        kept_digests: set[str | None] = set()
        gone: list[str] = []
        for tag in sorted(table):
            kernel = kernel_of(tag)
            if kernel is None:
                unknown.append(tag)
                kept_digests.add(table[tag])
            elif label_of(kernel) in live:
                kept_digests.add(table[tag])
            else:
                gone.append(tag)
        for tag in gone:
            if table[tag] is None or table[tag] in kept_digests:
                shared.append(tag)
            else:
                out.append(tag)
    return Unused(tuple(images), tuple(modules), tuple(shared), tuple(unknown))
