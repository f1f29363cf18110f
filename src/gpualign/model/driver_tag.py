"""A precompiled driver tag, `<branch>-<kernel>-<os-tag>`, taken apart once: its one parser (`parse`) and its
reading of an image reference (`of_image`). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpualign.base.errors import BadInput
from gpualign.model.image_ref import ImageRef
from gpualign.model.kernels import Kernel, label_of, release_of

_OS_TAG = re.compile(r"(ubuntu\d+\.\d+|rhel\d+(?:\.\d+)?|debian\d+|rocky\d+(?:\.\d+)?|sles\d+(?:\.\d+)?)")
_TAG = re.compile(r"(?P<branch>\d{3,4})-(?P<kernel>.+)-(?P<os>[a-z]+[0-9.]+)")
_OCI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # the OCI distribution spec's tag

@dataclass(frozen=True)
class TagSpec:
    tag: str
    branch: str
    kernel: str  # the release (uname -r, headers, version magic): 6.12.117+deb13-amd64
    os_tag: str
    kernel_label: str = ""  # the tag's spelling, as NFD labels it: 6.12.117_deb13-amd64 (gpualign.model.kernels)

    @property
    def family(self) -> str:
        return re.sub(r"[0-9.]+$", "", self.os_tag)

    @property
    def kernel_value(self) -> Kernel:
        """The tag's kernel, by both its names and what its release says (its architecture, its Debian parts)."""
        return Kernel(self.kernel, self.kernel_label or label_of(self.kernel))


def parse(tag: str) -> TagSpec:
    """'535-6.1.0-50-amd64-debian12' → branch 535, kernel 6.1.0-50-amd64, OS tag debian12. A kernel NFD labels
    with `_` for the release's `+` is read back as the release: '535-6.12.117_deb12-amd64-debian12' → kernel
    6.12.117+deb12-amd64 (its headers, version magic and /lib/modules), kernel_label 6.12.117_deb12-amd64."""
    text = ImageRef.parse(tag).tag or tag if "/" in tag or ":" in tag else tag
    if not _OCI_TAG.fullmatch(text):
        bad = sorted({c for c in text if not (c.isascii() and (c.isalnum() or c in "._-"))})
        fix = f" (write it as NFD labels the kernel: {text.replace('+', '_')})" if "+" in text else ""
        raise BadInput(f"{tag!r}: not a valid image tag: {' '.join(repr(c) for c in bad) or 'its length'} "
                       f"cannot be in one{fix}")
    m = _TAG.fullmatch(text)
    if not m or not _OS_TAG.fullmatch(m.group("os")):
        raise BadInput(f"{tag!r}: not a precompiled driver tag <branch>-<kernel>-<os-tag>, e.g. "
                       "535-6.1.0-50-amd64-debian12")
    return TagSpec(text, m.group("branch"), release_of(m.group("kernel")), m.group("os"), m.group("kernel"))


def try_parse(tag: str) -> TagSpec | None:
    """The tag taken apart, or None for a tag of another shape (`latest`, a regular image's `<version>-<os-tag>`)."""
    try:
        return parse(tag)
    except BadInput:
        return None


def of_image(image: str) -> TagSpec | None:
    """The driver tag of an image reference, taken apart, or None when its tag is of another shape."""
    return try_parse(ImageRef.parse(image).tag)
