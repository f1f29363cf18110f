"""What makes an image holding modules a GPU Operator driver container, as recorded from its layers."""

from __future__ import annotations

import json

from gpualign.judging.inspect import CONTENTS, contract_problem

DROPIN = {"paths": ["usr/bin/nvidia-smi", "usr/local/bin/nvidia-driver"],
          "libraries": [["libcuda", "535.309.01"], ["libnvidia-ml", "535.309.01"]]}


def judged(tmp_path, contents, version="535.309.01"):
    (tmp_path / CONTENTS).write_text(json.dumps(contents))
    return contract_problem(tmp_path, version)


def test_a_drop_in_image_passes(tmp_path):
    assert judged(tmp_path, DROPIN) is None


def test_a_modules_only_image_has_no_nvidia_driver(tmp_path):
    assert judged(tmp_path, {"paths": [], "libraries": []}) == (
        "it has no nvidia-driver on PATH (the GPU Operator's driver container runs `nvidia-driver init`)")


def test_an_image_without_user_space_names_what_is_missing(tmp_path):
    problem = judged(tmp_path, {"paths": ["usr/local/bin/nvidia-driver"], "libraries": [["libcuda", "535.309.01"]]})
    assert problem == "it has no NVIDIA user space (nvidia-smi, libnvidia-ml missing): workloads would get no CUDA"


def test_user_space_of_another_version_is_named_with_the_modules_version(tmp_path):
    other = {**DROPIN, "libraries": [["libcuda", "535.261.03"], ["libnvidia-ml", "535.309.01"]]}
    assert judged(tmp_path, other) == "its user space is NVIDIA 535.261.03, its modules 535.309.01"
