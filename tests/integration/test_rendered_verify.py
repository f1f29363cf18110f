"""The verify step every rendered recipe runs before it makes an image (a shell script: the build has no gpualign),
run here on the real NVIDIA modules of the one real build, against real Module.symvers files: it passes them for
their own kernel and refuses them, naming the module and symbol, against another's. The oracle for the refusal is
`modprobe --dump-modversions` read by the test itself."""

from __future__ import annotations

import subprocess

import pytest

from gpualign.archive.apt import Archive
from gpualign.ensure import debian, recipes
from tests.support.ensure_build import KERNEL, OTHER, modversions, symvers

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.mark.timeout(1800)
def test_the_rendered_verify_step_passes_fitting_modules_and_refuses_others_naming_the_symbol(tmp_path):
    modules = debian.compile_modules(Archive(), KERNEL).directory  # cached after the one real build
    script = tmp_path / "verify-modules"
    script.write_text(recipes.VERIFY)
    own, other = Archive().symvers(KERNEL), Archive().symvers(OTHER)

    ok = subprocess.run(["sh", str(script), KERNEL, str(own), str(modules)], capture_output=True, text=True,
                        timeout=600)
    assert ok.returncode == 0, ok.stderr
    count = len(list(modules.glob("*.ko")))
    assert ok.stdout.strip() == f"verify: {count} modules fit {KERNEL}"

    magic = subprocess.run(["sh", str(script), OTHER, str(other), str(modules)], capture_output=True, text=True,
                           timeout=600)
    assert magic.returncode == 1 and f"version magic names {KERNEL}, not {OTHER}" in magic.stderr, magic.stderr

    crc = subprocess.run(["sh", str(script), KERNEL, str(other), str(modules)], capture_output=True, text=True,
                         timeout=600)
    assert crc.returncode == 1, crc.stderr
    line = crc.stderr.strip().splitlines()[-1]
    assert "disagrees about version of symbol" in line, line
    module, symbol = line.split("verify: ", 1)[1].split(":")[0], line.split("symbol ")[1].split()[0]
    assert modversions(modules / f"{module}.ko")[symbol] != symvers(OTHER)[symbol]
