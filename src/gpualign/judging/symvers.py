"""A kernel's Module.symvers: `0xCRC<TAB>symbol<TAB>module<TAB>EXPORT_SYMBOL[_GPL]<TAB>namespace` a line. Pure."""

from __future__ import annotations

from gpualign.base.errors import BadInput


def parse(text: str, where: str = "Module.symvers") -> dict[str, int]:
    """symbol -> CRC. A line that is not of that shape is BadInput naming the line."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t", 2)  # the CRC and the name; the rest is not needed
        try:
            out[parts[1]] = int(parts[0], 16)
        except (IndexError, ValueError):
            raise BadInput(f"{where}:{n}: expected 0xCRC<TAB>symbol<TAB>module<TAB>export, got {line[:60]!r}") from None
    return out
