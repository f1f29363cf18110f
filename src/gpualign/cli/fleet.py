"""Several clusters on the command line, for check, plan and status: which contexts (--context repeated, or
--all-contexts), --request-timeout, each cluster's outcome on stderr, and the fleet mode the three share
(read_fleet: read at once, say, merge; Fleet.emit). The reading itself is gpualign.usecases.read_clusters.read_all."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpualign.base.errors import BadInput
from gpualign.cli import complete
from gpualign.cli.common import warn
from gpualign.cli.hints import worded

if TYPE_CHECKING:  # the fleet's report is read only in fleet mode: one cluster never imports it
    from gpualign.model.fleet_report import ClusterRead

ContextsOpt = Annotated[list[str] | None, typer.Option(
    "--context", metavar="NAME", autocompletion=complete.contexts,
    help="kubeconfig context to use, from any file of $KUBECONFIG [default: the current-context]; repeat it to "
         "read several clusters into one report")]
AllContextsOpt = Annotated[bool, typer.Option(
    "--all-contexts", help="read every context of the kubeconfig (all files of $KUBECONFIG) into one report")]
RequestTimeoutOpt = Annotated[str | None, typer.Option(
    "--request-timeout", metavar="DURATION",
    help="give up on a cluster after this long, as kubectl takes it: 30s, 1m, 90 (seconds), 0 for no limit; a "
         "cluster that times out is reported unreadable and the others still are [default: 30s per request, no "
         "limit per cluster]")]

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?")


def parse_timeout(text: str | None) -> float | None:
    """kubectl's --request-timeout: a bare number of seconds or a Go duration (1h2m3s, 500ms); 0 means no limit."""
    if text is None:
        return None
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        m = _DURATION.fullmatch(text)
        if not m or not any(m.groups()):
            raise BadInput(f"--request-timeout {text!r}: expected a duration such as 30s, 1m or 90")
        h, mins, s, ms = (float(g) if g else 0.0 for g in m.groups())
        seconds = h * 3600 + mins * 60 + s + ms / 1000
    return seconds or None


def kubeconfig_read(kubeconfig: str | None) -> str | None:
    """The kubeconfig file(s) a report was read from, as $KUBECONFIG lists them (for its JSON source)."""
    from gpualign.kube import kubeconfig as kc

    return ":".join(str(f) for f in kc.files_to_read(kubeconfig)) or None


def contexts(kubeconfig: str | None, given: list[str] | None, all_contexts: bool) -> list[str] | None:
    """The contexts to read, or None for the one-cluster path (no --context, or exactly one, without --all). The
    kubeconfig is read here, once: a missing file or an unknown context is one usage error, not one per cluster."""
    several = list(dict.fromkeys(given or []))
    if not all_contexts and len(several) < 2:
        return None
    if all_contexts and given:
        raise BadInput("--all-contexts reads every context: drop --context")
    from gpualign.kube import kubeconfig as kc

    files = kc.files_to_read(kubeconfig)
    if not files:
        raise BadInput("several clusters need a kubeconfig to name them (no --kubeconfig, $KUBECONFIG or "
                       "~/.kube/config)")
    if kubeconfig is None and os.environ.get("KUBECONFIG"):  # kubectl skips a missing file; a report says so
        for listed in (p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p):
            if not Path(listed).expanduser().exists():
                warn(f"$KUBECONFIG lists {listed}, which does not exist: the clusters it named are not in this "
                     "report")
    merged = kc.merge(files)
    known = [str(c["name"]) for c in merged.config["contexts"]]
    if all_contexts:
        if not known:
            raise BadInput(f"--all-contexts: kubeconfig {merged.describe()} has no context")
        return known
    unknown = [n for n in several if n not in known]
    if unknown:
        raise BadInput(f"kubeconfig {merged.describe()}: no context {', '.join(map(repr, unknown))} (known: "
                       f"{', '.join(sorted(known)) or 'none'})")
    return several


def say_outcomes(reads: list[ClusterRead]) -> None:
    """On stderr, per cluster: its warnings, and one line for a cluster that could not be read."""
    import sys

    for r in reads:
        if r.body is None:
            print(f"gpualign: error: cluster {r.name}: {r.error}", file=sys.stderr, flush=True)
            continue
        for w in r.body.get("warnings") or []:
            warn(f"cluster {r.name}: {w}")


@dataclass(frozen=True)
class Fleet:
    """Several clusters read into one report: each cluster's outcome, the merged body, and the exit code (its bits:
    1 findings, 4 a cluster unreadable)."""

    names: list[str]
    reads: list[ClusterRead]
    merged: dict[str, Any]

    @property
    def code(self) -> int:
        from gpualign.model.fleet_report import exit_code

        return exit_code(self.reads)

    def document(self, kind: str, kubeconfig: str | None, ledger: list[str]) -> dict[str, Any]:
        """The merged report in gpualign's envelope, naming the kubeconfig and contexts read."""
        from gpualign.cli.common import report

        return report(kind, {"kubeconfig": kubeconfig_read(kubeconfig), "contexts": self.names, "ledger": ledger},
                      self.merged)


def read_fleet(names: list[str], one: Callable[[str], tuple[dict[str, Any], bool, str | None]],
               timeout: float | None, merge: Callable[[list[ClusterRead]], dict[str, Any]]) -> Fleet:
    """What check, plan and status do over several clusters: `one(context)` for each at once (a cluster's failure
    is its line, not the report's), each outcome said on stderr, the reports merged."""
    from gpualign.usecases.read_clusters import read_all

    reads = read_all(names, one, timeout, worded)
    say_outcomes(reads)
    return Fleet(names, reads, merge(reads))
