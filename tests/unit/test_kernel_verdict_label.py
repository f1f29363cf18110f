"""check, plan, the walk and the controller read the booted kernel's verdict an image records: its
io.gpualign.verified label (written by ensure.image.labels from the verdict ensure.build keeps). Over every console
recorded from Debian's kernels (tests/data/kernel-console): an image whose record says the kernel took its modules
is judged by its other labels alone; one whose record says the kernel refused them, or never finished, is wrong,
naming the kernel's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpualign.ensure.image import labels
from gpualign.judging import kernel_console
from gpualign.judging.inspect import by_labels
from gpualign.model.driver_tag import parse

CONSOLES = sorted((Path(__file__).resolve().parent.parent / "data" / "kernel-console").glob("*.txt"))
TAG = "535-6.1.0-50-amd64-debian12"


def recorded_labels(console: Path) -> tuple[kernel_console.KernelVerdict, dict[str, str]]:
    verdict = kernel_console.read("6.1.0-50-amd64", console.read_text())
    record = verdict.as_dict()
    kept = {k: record[k] for k in ("kernel", "verdict", "said", "seconds", "accel", "secure_boot")}  # as ensure keeps
    return verdict, labels(parse(TAG), "535.309.01", {"symbols": 773, "modules": 4, "kernel_load": kept})


@pytest.mark.parametrize("console", CONSOLES, ids=[c.stem for c in CONSOLES])
def test_the_kernels_recorded_verdict_decides_whether_the_image_is_wrong(console):
    verdict, image_labels = recorded_labels(console)
    why = by_labels(TAG, image_labels)
    if verdict.ok:
        assert why is None
    else:
        assert why is not None and f"records that kernel 6.1.0-50-amd64 {verdict.load} its modules" in why
        assert verdict.said and verdict.said[0] in why


def test_a_build_that_switched_the_kernel_off_or_recorded_nothing_is_judged_by_its_other_labels():
    skipped = labels(parse(TAG), "535.309.01", {"kernel_load": {"kernel": "6.1.0-50-amd64", "verdict": "skipped"}})
    assert by_labels(TAG, skipped) is None
    assert by_labels(TAG, labels(parse(TAG), "535.309.01", {"symbols": 773})) is None
    assert by_labels(TAG, {"io.gpualign.verified": "not json"}) is None
    assert by_labels(TAG, {"io.gpualign.verified": json.dumps({"kernel_load": "refused"})}) is None
