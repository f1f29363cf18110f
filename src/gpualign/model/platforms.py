"""Whether an image holds a node's CPU architecture: a tag's manifest (or index) against kubernetes.io/arch. Pure.

A kubelet pulls the image of its own platform from an index, and fails to pull a single image of another one: such
an image is wrong for the node, however right its kernel and branch.
"""

from __future__ import annotations

from collections.abc import Mapping


def platform_problem(image: str, arch: str, platforms: Mapping[str, tuple[str, ...]]) -> str | None:
    """"no linux/arm64 in TAG" when the tag's manifest (or index) holds no image for the node's architecture; None
    when it does, or when its platforms were not read."""
    held = platforms.get(image)
    if held is None or arch in held:
        return None
    tag = image.rpartition(":")[2]
    return f"no linux/{arch} in {tag} (it holds {', '.join('linux/' + a for a in held) or 'no linux image'})"
