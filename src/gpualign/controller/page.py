"""The read-only fleet board, server-rendered HTML with no build step: nodes by upgrade state, missing images,
blockers with their reasons, stuck and gated nodes; a page per node (/node/NAME) says why it is where it is. Both
refresh themselves every 10 s."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

from gpualign.controller.build_trigger.decisions import BuildPhase
from gpualign.model.audit import Status
from gpualign.upgrade import states as S
from gpualign.upgrade.report import duration

STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px} .sub{color:#667;margin-bottom:18px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:18px}
.card{background:#fff;border:1px solid #dde;border-radius:8px;padding:10px 14px;min-width:120px}
.card b{display:block;font-size:22px} .bad b{color:#c0262d} .ok b{color:#1f7a3a}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:18px}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #eef} th{background:#eef1f6}
.state{font-family:ui-monospace,monospace} .blocker{color:#c0262d} .missing{color:#c0262d;font-weight:600}
h2{font-size:16px;margin:18px 0 8px} a{color:#1d4fb8} .why li{margin:4px 0}
"""
REFRESH = 10  # seconds
GROUP = {"none": "not upgrading"}


def _head(title: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='{REFRESH}'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>")


def _link(name: str) -> str:
    return f"<a href='/node/{quote(name)}'>{html.escape(name)}</a>"


def render(data: dict[str, Any]) -> str:
    """The fleet board: its cards, then a section per question (stuck, missing, builds, tonight, gated, blocked),
    then every node by the walk's state."""
    by_state: dict[str, list[dict[str, Any]]] = {}
    for n in data["nodes"]:
        by_state.setdefault(n["upgrade_state"] or "none", []).append(n)
    order = {s: i for i, s in enumerate(("none", *S.ORDER, S.FAILED))}
    states = sorted(by_state, key=lambda s: order.get(s, 99))
    e = html.escape
    parts = [_head("gpualign fleet"), "<h1>gpualign fleet board</h1>",
             f"<div class='sub'>cluster {e(str(data.get('cluster') or '?'))} · "
             f"{'leader' if data['leader'] else 'standby replica'} · updated {e(data['updated'])} · refreshes every "
             f"{REFRESH} s · ledger: {e(', '.join(data['ledger_sources']))}</div>",
             f"<div class='cards'>{''.join(_cards(data, by_state, states))}</div>",
             *_stuck(data), *_missing(data), *_builds(data.get("builds")), *_tonight(data),
             *_gated(data.get("gated") or {}), *_blocked(data)]
    for state in states:
        parts += _nodes_in(state, by_state[state])
    parts.append("</body></html>")
    return "".join(parts)


def _cards(data: dict[str, Any], by_state: dict[str, list[dict[str, Any]]], states: list[str]) -> list[str]:
    e = html.escape
    stuck, gated = data.get("stuck") or [], data.get("gated") or {}
    cards = [f'<div class="card"><span>GPU nodes</span><b>{len(data["nodes"])}</b></div>',
             f'<div class="card {"bad" if data["missing"] else "ok"}"><span>missing images</span>'
             f'<b>{len(data["missing"])}</b></div>',
             f'<div class="card {"bad" if stuck else "ok"}"><span>stuck nodes (no driver, or blocked in the '
             f'walk)</span><b>{len(stuck)}</b></div>',
             f'<div class="card {"bad" if data["blocked"] or stuck else "ok"}"><span>blocked nodes</span>'
             f'<b>{len(data["blocked"])}</b></div>',
             f'<div class="card {"bad" if gated else "ok"}"><span>gated (held off the operator\'s walk)</span>'
             f'<b>{len(gated)}</b></div>']
    builds = data.get("builds")
    if builds is not None:  # the controller runs with --build
        failed = sum(1 for j in builds["jobs"].values() if j["phase"] == BuildPhase.FAILED)
        cards.append(f'<div class="card {"bad" if failed else "ok"}"><span>builds: running · queued · failed</span>'
                     f'<b>{len(builds["running"])} · {len(builds["queued"])} · {failed}</b></div>')
    for state in states:
        cards.append(f'<div class="card"><span class="state">{e(GROUP.get(state, state))}</span>'
                     f'<b>{len(by_state[state])}</b></div>')
    return cards


def _stuck(data: dict[str, Any]) -> list[str]:
    e, stuck, nodes = html.escape, data.get("stuck") or [], data["nodes"]
    if not stuck:
        return []
    parts = ["<h2>Stuck nodes</h2><table><tr><th>node</th><th>state</th><th>driver pod</th><th>why</th></tr>"]
    for name in stuck:
        row: dict[str, Any] = next((x for x in nodes if x["name"] == name), {})
        blocker = next((r for b, r, _ in data["blocked"] if b == name), "")
        why = blocker or (f"no driver: its image {row.get('image') or row.get('tag')} is {row.get('status')}"
                          if row.get("status") == Status.MISSING else "no driver")
        parts.append(f"<tr><td>{_link(name)}</td><td class='state'>{e(row.get('upgrade_state') or 'none')}</td>"
                     f"<td class='{'' if row.get('pod_state') == 'Running' else 'blocker'}'>"
                     f"{e(row.get('pod_state') or '-')}</td>"
                     f"<td class='blocker'>{e(why)}</td></tr>")
    return [*parts, "</table>"]


def _missing(data: dict[str, Any]) -> list[str]:
    if not data["missing"]:
        return []
    parts = ["<h2>Missing driver images</h2><table><tr><th>image tag</th><th>nodes</th></tr>"]
    for tag, names in sorted(data["missing"].items()):
        parts.append(f"<tr><td class='missing'>{html.escape(tag)}</td>"
                     f"<td>{', '.join(map(_link, sorted(names)))}</td></tr>")
    return [*parts, "</table>"]


def _builds(builds: dict[str, Any] | None) -> list[str]:
    e = html.escape
    if not builds or not (builds["jobs"] or builds["queued"]):
        return []
    parts = ["<h2>Driver image builds</h2><table><tr><th>image tag</th><th>build</th></tr>"]
    for tag, job in sorted(builds["jobs"].items()):
        cls = "blocker" if job["phase"] == BuildPhase.FAILED else ""
        parts.append(f"<tr><td>{e(tag)}</td><td class='{cls}'>{e(job['line'])}</td></tr>")
    for tag in builds["queued"]:
        parts.append(f"<tr><td>{e(tag)}</td><td>queued: waiting for a build slot (--max-concurrent-builds)</td></tr>")
    return [*parts, "</table>"]


def _tonight(data: dict[str, Any]) -> list[str]:
    e, archive, builds = html.escape, data.get("archive"), data.get("builds")
    if archive is None or not (archive["pools"] or archive["error"]):
        return []
    parts = ["<h2>Tonight: the kernels Debian's archive installs next</h2>"]
    if archive["error"]:
        parts.append(f"<div class='sub blocker'>the archive could not be read: {e(archive['error'])}</div>")
    parts.append("<table><tr><th>pool</th><th>nodes</th><th>next kernel</th><th>first read here</th>"
                 "<th>image</th><th>status</th></tr>")
    for p in archive["pools"]:
        tag = p["tag"] or ""
        job = ((builds or {}).get("jobs") or {}).get(tag)
        if p["status"] == Status.PRESENT:
            status, cls = "present", ""
        elif p["reason"]:
            status, cls = f"cannot be built: {p['reason']}", "blocker"
        else:
            status, cls = (job["line"] if job else f"missing: {p['action']} ahead"), "missing"
        parts.append(f"<tr><td>{e(p['pool'])}</td><td>{len(p['nodes'])}</td><td>{e(p['next'])} "
                     f"({e(p['suite'] or '')})</td><td>{e(p['since'] or '-')}</td><td>{e(tag or '-')}</td>"
                     f"<td class='{cls}'>{e(status)}</td></tr>")
    return [*parts, "</table>"]


def _gated(gated: dict[str, str]) -> list[str]:
    if not gated:
        return []
    parts = ["<h2>Gated: held off the GPU Operator's upgrade walk</h2><table><tr><th>node</th><th>why</th></tr>"]
    parts += [f"<tr><td>{_link(name)}</td><td>{html.escape(why)}</td></tr>" for name, why in sorted(gated.items())]
    return [*parts, "</table>"]


def _blocked(data: dict[str, Any]) -> list[str]:
    e = html.escape
    if not data["blocked"]:
        return []
    parts = ["<h2>Blocked upgrades</h2><table><tr><th>node</th><th>state</th><th>reason</th><th>for</th></tr>"]
    for node, reason, seconds in data["blocked"]:
        state = next((n["upgrade_state"] for n in data["nodes"] if n["name"] == node), "")
        parts.append(f"<tr><td>{_link(node)}</td><td class='state'>{e(state or 'none')}</td>"
                     f"<td class='blocker'>{e(reason)}</td><td>{e(duration(seconds))}</td></tr>")
    return [*parts, "</table>"]


def _nodes_in(state: str, nodes: list[dict[str, Any]]) -> list[str]:
    e = html.escape
    parts = [f"<h2 class='state'>{e(GROUP.get(state, state))} ({len(nodes)})</h2><table><tr>"
             "<th>node</th><th>kernel</th><th>driver</th><th>required image</th><th>status</th>"
             "<th>driver pod</th></tr>"]
    for n in sorted(nodes, key=lambda x: x["name"]):
        cls = "missing" if n["status"] == Status.MISSING else ""
        pod_cls = "missing" if n["pod_state"] not in (None, "Running", "Pending", "ContainerCreating") else ""
        parts.append(f"<tr><td>{_link(n['name'])}</td><td>{e(n['kernel'] or '-')}</td>"
                     f"<td>{e(n['driver'] or '-')}</td><td>{e(n['tag'] or '-')}</td>"
                     f"<td class='{cls}'>{e(n['status'])}</td><td class='{pod_cls}'>{e(n['pod_state'] or '-')}"
                     "</td></tr>")
    return [*parts, "</table>"]


def node_lines(data: dict[str, Any], name: str) -> list[str] | None:
    """Why the node is where it is, in plain words (as `gpualign why` says it), from the board's view; None when
    the controller does not watch such a GPU node."""
    n = next((x for x in data["nodes"] if x["name"] == name), None)
    if n is None:
        return None
    state = n["upgrade_state"]
    lines = [f"{name} is {f'in {state}' if state else 'not upgrading'}; kernel {n['kernel'] or '?'}, "
             f"loaded driver {n['driver'] or 'unknown'}."]
    blocker = next((r for b, r, _ in data["blocked"] if b == name), None)
    if blocker:
        lines.append(f"blocked: {blocker}")
    if n.get("gated"):
        lines.append(f"gated: held off the GPU Operator's upgrade walk ({n['gated']}); released once the image is "
                     "in the ledger")
    if n.get("pod_state") and n["pod_state"] not in ("Running", "Pending", "ContainerCreating"):
        lines.append(f"no driver: its driver pod is {n['pod_state']}")
    build = ((data.get("builds") or {}).get("jobs") or {}).get(n["tag"] or "")
    if n["status"] == Status.MISSING and build:
        lines.append(f"its driver image {n.get('image') or n['tag']} is missing from the ledger; {build['line']}")
    elif n["status"] == Status.MISSING:
        lines.append(f"its driver image {n.get('image') or n['tag']} is missing from the ledger: "
                     f"{n.get('action') or 'build'} it (gpualign ensure {n['tag']})")
    elif n["status"]:
        lines.append(f"image status {n['status']}" + (f": {n['reason']}" if n.get("reason") else ""))
    return lines


def render_node(data: dict[str, Any], name: str) -> str | None:
    lines = node_lines(data, name)
    if lines is None:
        return None
    e = html.escape
    return "".join([_head(f"gpualign: {name}"), f"<h1>{e(name)}</h1>",
                    f"<div class='sub'>cluster {e(str(data.get('cluster') or '?'))} · updated {e(data['updated'])}"
                    f" · <a href='/'>fleet board</a></div>",
                    "<ul class='why'>", *(f"<li>{e(line)}</li>" for line in lines), "</ul></body></html>"])
