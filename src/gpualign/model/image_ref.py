"""An image reference, taken apart once, as a container runtime reads it: `[HOST[:PORT]/]REPO[:TAG][@DIGEST]`. Pure.

The tag is what follows the last `:` after the last `/` (a registry's port is before a `/`); the digest is what
follows `@`. Every room asks these questions of a reference here, not with its own split: `tag_of` for "the tag of
this image", `repository_of` for "the image without its tag".
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ImageRef:
    name: str  # HOST/REPO, or REPO: the repository, without tag or digest
    tag: str = ""
    digest: str = ""  # sha256:…

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        rest, _, digest = text.partition("@")
        slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > slash:
            return cls(rest[:colon], rest[colon + 1:], digest)
        return cls(rest, "", digest)

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def with_tag(self, tag: str) -> ImageRef:
        return ImageRef(self.name, tag)


def tag_of(image: str) -> str:
    """'registry.local:5000/nvidia/driver:535-6.1.0-50-amd64-debian12' -> '535-6.1.0-50-amd64-debian12'; '' when
    the reference has no tag."""
    return ImageRef.parse(image).tag


def repository_of(image: str) -> str:
    """The reference without its tag and digest: 'registry.local:5000/nvidia/driver'."""
    return ImageRef.parse(image).name


def sha256_hex(digest: str) -> str | None:
    """'sha256:<64 hex>' -> its hex; None for another algorithm or a malformed digest (nothing to check it by)."""
    algorithm, _, hexed = digest.partition(":")
    return hexed if algorithm == "sha256" and re.fullmatch(r"[0-9a-f]{64}", hexed) else None


def digest_hex(digest: str) -> str:
    """'sha256:ab12…' -> 'ab12…' (a content digest's hex, as blob paths and cosign's tags spell it)."""
    return digest.partition(":")[2] if ":" in digest else digest
