"""The rules as gpualign loads them: the built-in rules/driver_images.yaml, an override file (--rules) whose sections
replace the built-in ones, and the Debian releases' module sources as the archive was last read. The model
(gpualign.model.tags) reasons over what this returns and reads no file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpualign import rules as data_files
from gpualign.base import yamlio
from gpualign.base.cache import cache_root
from gpualign.base.errors import BadInput
from gpualign.loaders import archive_reading as readings
from gpualign.model.makers import DebianRelease, DebianTable, sources_from
from gpualign.model.tags import Rules, eras_from


def _read_yaml(path: Path) -> Any:
    return yamlio.read(path)


KNOWN_SECTIONS = ("schema", "operator_version", "os_tag", "precompiled", "branches", "default_branch", "debian")


def merged_rules(override: Path | None = None) -> dict[str, Any]:
    """The built-in rules as a mapping, with each top-level section of `override` replacing the built-in one."""
    base = yamlio.parse_cached(data_files.text("driver_images.yaml"),
                               "driver_images.yaml", cache_root() / "rules")
    if override is None:
        return dict(base)
    extra = _read_yaml(override)
    if not isinstance(extra, dict):
        raise BadInput(f"{override}: rules file must be a mapping (print the built-in one with `gpualign rules`)")
    unknown = sorted(str(k) for k in extra if k not in KNOWN_SECTIONS)
    if unknown:
        raise BadInput(f"{override}: unknown rules section {', '.join(map(repr, unknown))} (known: "
                       f"{', '.join(KNOWN_SECTIONS)})")
    if extra.get("schema", base.get("schema")) != base.get("schema"):
        raise BadInput(f"{override}: rules schema {extra.get('schema')!r} is not the one this gpualign reads "
                       f"({base.get('schema')})")
    base.update(extra)
    return dict(base)


def _debian(raw: Any) -> DebianTable:
    return DebianTable(tuple(
        (str(os_tag), DebianRelease(str(r["suite"]), tuple(str(a) for a in r["archs"]),
                                    tuple(str(x) for x in r["series"]),
                                    sources_from({str(k): str(v) for k, v in r["sources"].items()})))
        for os_tag, r in sorted(raw.items())))


def load_rules(override: Path | None = None, *, archive_reading: bool = True) -> Rules:
    """The rules; the Debian releases' module sources as the archive was last read (gpualign.loaders.archive_reading),
    unless an override file gives its own `debian` section (or `archive_reading` is False: the rules' copy)."""
    base = merged_rules(override)
    source = "built-in" if override is None else str(override)
    try:
        debian = _debian(base["debian"])
        if archive_reading and (override is None or "debian" not in (_read_yaml(override) or {})):
            debian = readings.overlay(debian)
        pre = base["precompiled"]
        return Rules(
            major_version_only=frozenset(str(x) for x in base["os_tag"]["major_version_only"]),
            flavours=frozenset(str(x) for x in pre["flavours"]),
            kernels={str(k): tuple(str(x) for x in v) for k, v in pre["kernels"].items()},
            published_branches=frozenset(str(x) for x in pre["branches"]),
            branches={str(k): str(v) for k, v in base["branches"].items()},
            default_branch=str(base["default_branch"]),
            source=source,
            eras=eras_from(base["os_tag"].get("eras")),
            matrix_version=str(base.get("operator_version", "?")),
            debian=debian,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        hint = ("; a section given in --rules replaces the built-in one whole: copy it from `gpualign rules` and "
                "edit it" if override is not None else "")
        raise BadInput(f"{source}: rules file lacks or mistypes {err}{hint}") from None
