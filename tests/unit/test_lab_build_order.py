"""`lab build` says what it builds and about how long it takes (the last build's time here, else what a cold build
took on two cores), and builds the largest first, a target that waits for another last."""

from __future__ import annotations

import json

from gpualign.lab import build


def test_each_build_says_how_long_it_usually_takes_largest_first(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "build-times.json").write_text(json.dumps({"etcd": 61.0}))
    built: list[str] = []

    def fake(target, where, log):
        built.append(target.name)
        return 1.0

    monkeypatch.setattr(build, "build_target", fake)
    said: list[str] = []
    build.build(bin_dir, only=["etcd", "kubelet", "kubernetes", "helm"], progress=said.append, jobs=1)
    assert built == ["kubernetes", "etcd", "kubelet", "helm"]  # helm and the kubelet wait for Kubernetes' packages
    starts = {line.split(":")[0]: line for line in said if ": building " in line}
    assert "(about 12 min on 2 cores; log: " in starts["kubernetes"]
    assert "(about 61 s last time; log: " in starts["etcd"]
    assert "(about 31 s on 2 cores; log: " in starts["kubelet"]
