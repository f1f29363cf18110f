"""The read-only fleet board, server-rendered HTML with no build step: nodes by upgrade state, missing images, and
blockers with their reasons."""

from __future__ import annotations

import html
from typing import Any

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
h2{font-size:16px;margin:18px 0 8px}
"""


def render(data: dict[str, Any]) -> str:
    e = html.escape
    nodes = data["nodes"]
    order = {s: i for i, s in enumerate(("none", *S.ORDER, S.FAILED))}
    by_state: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        by_state.setdefault(n["upgrade_state"] or "none", []).append(n)
    cards = [f'<div class="card"><span>GPU nodes</span><b>{len(nodes)}</b></div>',
             f'<div class="card {"bad" if data["missing"] else "ok"}"><span>missing images</span>'
             f'<b>{len(data["missing"])}</b></div>',
             f'<div class="card {"bad" if data["blocked"] else "ok"}"><span>blocked nodes</span>'
             f'<b>{len(data["blocked"])}</b></div>']
    for state in sorted(by_state, key=lambda s: order.get(s, 99)):
        cards.append(f'<div class="card"><span class="state">{e(state)}</span><b>{len(by_state[state])}</b></div>')
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>gpualign fleet</title>"
             f"<style>{STYLE}</style></head><body>",
             "<h1>gpualign fleet board</h1>",
             f"<div class='sub'>{'leader' if data['leader'] else 'standby replica'} · updated "
             f"{e(data['updated'])} · ledger: {e(', '.join(data['ledger_sources']))}</div>",
             f"<div class='cards'>{''.join(cards)}</div>"]
    if data["missing"]:
        parts.append("<h2>Missing driver images</h2><table><tr><th>image tag</th><th>nodes</th></tr>")
        for tag, names in sorted(data["missing"].items()):
            parts.append(f"<tr><td class='missing'>{e(tag)}</td><td>{e(', '.join(sorted(names)))}</td></tr>")
        parts.append("</table>")
    if data["blocked"]:
        parts.append("<h2>Blocked upgrades</h2><table><tr><th>node</th><th>state</th><th>reason</th>"
                     "<th>for</th></tr>")
        for node, reason, seconds in data["blocked"]:
            state = next((n["upgrade_state"] for n in nodes if n["name"] == node), "")
            parts.append(f"<tr><td>{e(node)}</td><td class='state'>{e(state or 'none')}</td>"
                         f"<td class='blocker'>{e(reason)}</td><td>{e(duration(seconds))}</td></tr>")
        parts.append("</table>")
    for state in sorted(by_state, key=lambda s: order.get(s, 99)):
        parts.append(f"<h2 class='state'>{e(state)} ({len(by_state[state])})</h2><table><tr><th>node</th>"
                     "<th>kernel</th><th>driver</th><th>required image</th><th>status</th><th>driver pod</th></tr>")
        for n in sorted(by_state[state], key=lambda x: x["name"]):
            cls = "missing" if n["status"] == "missing" else ""
            parts.append(f"<tr><td>{e(n['name'])}</td><td>{e(n['kernel'] or '-')}</td>"
                         f"<td>{e(n['driver'] or '-')}</td><td>{e(n['tag'] or '-')}</td>"
                         f"<td class='{cls}'>{e(n['status'])}</td><td>{e(n['pod_state'] or '-')}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)
