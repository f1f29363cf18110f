"""The tags to ensure, read from what check and plan print: check's report (`missing[].tag` and `wrong[].tag`,
which ensure repairs only with --replace-wrong), plan's report
(`to_build[]`) or its build matrix (`include[].tag`), as JSON or YAML. Pure."""

from __future__ import annotations

from typing import Any

from gpualign.base.errors import BadInput
from gpualign.model.flavours import FLAVOURS


def tags_from_report(data: Any, where: str) -> list[str]:
    if not isinstance(data, dict):
        raise BadInput(f"{where}: expected a gpualign check or plan report (a mapping), got {type(data).__name__}")
    kind = data.get("kind")
    if isinstance(data.get("missing"), list):  # CheckReport (and a fleet's): its missing images, then its wrong ones
        tags = [m.get("tag") for m in [*data["missing"], *(data.get("wrong") or [])] if isinstance(m, dict)]
    elif isinstance(data.get("to_build"), list):  # PlanReport
        tags = list(data["to_build"])
    elif isinstance(data.get("include"), list):  # plan --build-matrix
        tags = [m.get("tag") for m in data["include"] if isinstance(m, dict)]
    else:
        raise BadInput(f"{where}: {kind or 'this document'} has none of missing, to_build or include: expected "
                       "the output of `gpualign check -o json`, `gpualign plan -o json` or `gpualign plan "
                       "--build-matrix`")
    bad = [t for t in tags if not isinstance(t, str) or not t]
    if bad:
        raise BadInput(f"{where}: an entry without a tag ({bad[0]!r})")
    return list(dict.fromkeys(str(t) for t in tags))


def flavours_from_report(data: Any) -> dict[str, str]:
    """tag -> the kernel modules its nodes load (`modules`: proprietary or open), where a check report says so."""
    if not isinstance(data, dict):
        return {}
    entries = [*(data.get("missing") or []), *(data.get("wrong") or []), *(data.get("include") or [])]
    found = {str(e["tag"]): str(e["modules"]) for e in entries
             if isinstance(e, dict) and e.get("tag") and e.get("modules") in FLAVOURS}
    planned = data.get("modules")  # a plan report: tag -> modules, beside its to_build
    if isinstance(planned, dict):
        found.update({str(t): str(m) for t, m in planned.items() if m in FLAVOURS})
    return found
