"""plan's table says who makes each missing image once, in the words check uses."""

from __future__ import annotations

import pytest

from gpualign.cli.plan import _render
from gpualign.loaders.rules import load_rules
from gpualign.model.facts import NodeFacts
from gpualign.model.needed_images import Needed
from gpualign.model.tags import required_image
from tests.support import debian_archive
from tests.support.debian_archive import OS_OF


def _row(kernel: str, os_id: str, os_version: str, branch: str) -> dict:
    rules = load_rules()
    req = required_image(NodeFacts("gpu-0", True, kernel, os_id, os_version, None, None), branch, rules)
    assert req.tag is not None
    assert req.os_tag is not None
    n = Needed(req.tag, branch, kernel, req.os_tag, req.published, False, ("gpu-0",), reason=req.reason,
               debian=rules.debian, advice=req.advice)
    return {"tag": n.tag, "branch": branch, "kernel": kernel, "os_tag": req.os_tag, "in_ledger": False, "wrong": None,
            "nodes": list(n.nodes), "reason": n.told, "action": n.action, "action_reason": n.making.why}


def test_a_built_image_is_said_to_be_built_once() -> None:
    row = _row("6.1.0-50-amd64", "debian", "12", "535")
    assert row["action"] == "build"
    text = _render([row], [], "registry.example/nvidia/driver", True, False, False)
    assert text.count(row["action_reason"]) == 1, text
    assert "build it in-house" not in text


@pytest.mark.parametrize("branch", ["535", "550", "580"])
def test_every_kernel_debian_carries_is_said_once_who_makes_it(branch: str) -> None:
    """Over every kernel whose headers Debian's archive carries (tests/data/debian-kernels.tsv): the REASON column says
    who makes the image (build, render or none) once, and never the rules' generic advice beside it."""
    rows = [_row(release, "debian", OS_OF[suite.split("-")[0]].removeprefix("debian"), branch)
            for suite, _arch, release in debian_archive.kernels()]
    assert {r["action"] for r in rows} - {"mirror"}, "every Debian tag is made here, or cannot be: never mirrored"
    text = _render(rows, [], "registry.example/nvidia/driver", True, False, False)
    for row, line in zip(rows, text.splitlines()[1:], strict=False):
        assert line.count(row["action_reason"]) == 1, line
    assert "build it in-house" not in text


def test_a_mirrored_image_keeps_the_rules_advice() -> None:
    row = _row("5.15.0-124-generic", "ubuntu", "22.04", "580")
    assert row["action"] == "mirror"
    text = _render([row], [], "registry.example/nvidia/driver", True, False, False)
    assert row["reason"] in text
