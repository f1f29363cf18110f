"""One report for several clusters: per-cluster results merged, missing images deduplicated across clusters with
their nodes grouped by cluster, summaries per cluster and in total, and the exit code. Pure.

Exit codes of a fleet report are bits, so "missing images" and "a cluster could not be read" stay apart:
0 every cluster read and clean; 1 findings in a cluster that was read; 4 some cluster could not be read
(unreachable, timed out, or access denied); 5 both. 2 stays bad usage or input, as everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpualign.model.makers import Maker

EXIT_UNREADABLE = 4


@dataclass(frozen=True)
class ClusterRead:
    """One cluster's outcome: its report body (None when it could not be read) or the one-line reason."""

    name: str
    server: str | None
    body: dict[str, Any] | None
    error: str | None = None
    clean: bool = True  # no findings (meaningful when body is not None)

    @property
    def readable(self) -> bool:
        return self.body is not None


def exit_code(reads: Iterable[ClusterRead]) -> int:
    reads = list(reads)
    code = 0
    if any(not r.readable for r in reads):
        code |= EXIT_UNREADABLE
    if any(r.readable and not r.clean for r in reads):
        code |= 1
    return code


def _total(summaries: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for s in summaries:
        for k, v in s.items():
            total[k] = total.get(k, 0) + v
    return total


def merge_check(reads: list[ClusterRead]) -> dict[str, Any]:
    """check reports of several clusters as one: nodes carry `cluster`; each missing image appears once, with its
    nodes per cluster; the summary per cluster and in total."""
    nodes: list[dict[str, Any]] = []
    missing: dict[str, dict[str, Any]] = {}
    wrong: dict[str, dict[str, Any]] = {}
    per_cluster: dict[str, dict[str, int]] = {}
    for r in reads:
        if r.body is None:
            continue
        nodes.extend({"cluster": r.name, **n} for n in r.body["nodes"])
        per_cluster[r.name] = r.body["summary"]
        for into, items in ((missing, r.body["missing"]), (wrong, r.body.get("wrong") or [])):
            for m in items:
                entry = into.setdefault(m["image"], {**{k: v for k, v in m.items() if k != "nodes"},
                                                     "clusters": {}})
                entry["clusters"][r.name] = list(m["nodes"])
    return {
        "clusters": [cluster_entry(r) for r in reads],
        "nodes": nodes,
        "missing": [missing[i] for i in sorted(missing)],
        "wrong": [wrong[i] for i in sorted(wrong)],
        "summary": {"total": _total(per_cluster.values()), "clusters": per_cluster,
                    "unreadable": [r.name for r in reads if not r.readable]},
    }


def merge_plan(reads: list[ClusterRead]) -> dict[str, Any]:
    """plan reports of several clusters as one: each needed image once, its nodes per cluster."""
    needed: dict[str, dict[str, Any]] = {}
    unknown: list[dict[str, str]] = []
    for r in reads:
        if r.body is None:
            continue
        for n in r.body["needed"]:
            entry = needed.setdefault(n["tag"], {**{k: v for k, v in n.items() if k != "nodes"}, "clusters": {}})
            entry["in_ledger"] = entry["in_ledger"] and n["in_ledger"]
            entry["clusters"][r.name] = list(n["nodes"])
        unknown.extend({"cluster": r.name, **u} for u in r.body["unknown"])
    merged = [needed[t] for t in sorted(needed)]
    return {"clusters": [cluster_entry(r) for r in reads], "needed": merged,
            # as one cluster's plan says them: what gpualign can make, and what nothing can (with why)
            "to_build": [n["tag"] for n in merged if not n["in_ledger"] and n["action"] != Maker.NONE],
            "cannot_make": [{"tag": n["tag"], "reason": n["action_reason"], "kind": n["action_kind"]}
                            for n in merged if not n["in_ledger"] and n["action"] == Maker.NONE],
            "modules": {n["tag"]: n["modules"] for n in merged if not n["in_ledger"] and n.get("modules")},
            "unknown": unknown,
            "unreadable": [r.name for r in reads if not r.readable]}


def merge_status(reads: list[ClusterRead]) -> dict[str, Any]:
    """status reports of several clusters as one: nodes carry `cluster`; counts per cluster and in total."""
    nodes: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for r in reads:
        if r.body is None:
            continue
        nodes.extend({"cluster": r.name, **n} for n in r.body["nodes"])
        counts[r.name] = r.body["counts"]
    trouble = {r.name: {k: int(r.body.get(k) or 0) for k in ("stuck", "gated", "no_driver")}
               for r in reads if r.body is not None}
    return {"clusters": [cluster_entry(r) for r in reads], "nodes": nodes,
            "counts": {"total": _total(counts.values()), "clusters": counts},
            "trouble": {"total": _total(trouble.values()), "clusters": trouble},
            "unreadable": [r.name for r in reads if not r.readable]}


def cluster_entry(r: ClusterRead) -> dict[str, Any]:
    extra: dict[str, Any] = {k: r.body[k] for k in ("operator", "rules", "warnings") if r.body and k in r.body}
    return {"name": r.name, "server": r.server, "readable": r.readable, "error": r.error, **extra}


def grouped(nodes_by_cluster: Mapping[str, list[str]]) -> str:
    """east:gpu-a1,gpu-a2 west:gpu-x, for a table cell."""
    return " ".join(f"{c}:{','.join(n)}" for c, n in sorted(nodes_by_cluster.items()))
