"""The import rule, read from the source (scripts/structure.py): rooms import only from their own and the rooms
below them, and nothing outside cli/ imports from cli/."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
assert _spec and _spec.loader
structure = importlib.util.module_from_spec(_spec)
sys.modules["structure"] = structure
_spec.loader.exec_module(structure)


def test_no_import_runs_upward():
    assert structure.upward() == []


def test_every_room_has_its_place_in_the_order():
    assert structure.unknown_rooms() == []


def test_nothing_outside_cli_imports_from_cli():
    outside = [(name, target) for name, edges in structure.graph().items() for target in edges
               if target.startswith("gpualign.cli") and not name.startswith("gpualign.cli")
               and name != "gpualign.__main__"]
    assert outside == []


def test_only_the_lab_command_imports_the_lab():
    """The lab stays separable (docs/contributing.md, "The lab's place")."""
    outside = sorted(name for name, edges in structure.graph().items() for target in edges
                     if target.startswith("gpualign.lab") and not name.startswith("gpualign.lab"))
    assert set(outside) <= {"gpualign.cli.lab", "gpualign.cli.complete"}, outside


def test_the_reading_sees_an_upward_import(tmp_path):
    """The rule can fail: a ledger module importing the controller is reported, with its file and line."""
    src = tmp_path / "gpualign"
    (src / "ledger").mkdir(parents=True)
    (src / "controller").mkdir()
    for f in ("__init__.py", "ledger/__init__.py", "controller/__init__.py", "controller/gate.py"):
        (src / f).write_text("")
    (src / "ledger" / "file.py").write_text("def f():\n    from gpualign.controller import gate\n")
    assert structure.upward(src) == [
        "gpualign/ledger/file.py:2: gpualign.ledger.file (ledger) imports gpualign.controller.gate (controller)"]


def test_no_test_module_imports_another():
    """What tests share lives in tests/support/; a test module is never a library."""
    import ast

    tests = ROOT / "tests"
    bad = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in names
                    if n.startswith("tests.") and (n.split(".")[-1].startswith("test_") or n == "tests.conftest")]
    assert bad == []


def test_no_import_cycle():
    """Over every import, at module level, inside functions and under TYPE_CHECKING: a cycle hidden in a function,
    or made of a type-only import, is one too (two modules that need each other's names are one idea)."""
    assert structure.cycles() == []


def ensure_package(tmp_path, modules: dict[str, str]):
    """A package gpualign/ensure/ holding `modules` (name -> source), for the reading to judge."""
    src = tmp_path / "gpualign"
    (src / "ensure").mkdir(parents=True)
    for f in ("__init__.py", "ensure/__init__.py"):
        (src / f).write_text("")
    for name, text in modules.items():
        (src / "ensure" / f"{name}.py").write_text(text)
    return src


def test_the_reading_sees_a_cycle_made_of_a_type_only_import(tmp_path):
    src = ensure_package(tmp_path, {
        "compose": "from gpualign.ensure.image import modules_dir\n",
        "image": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                 "    from gpualign.ensure.compose import RemoteUserSpace\n"})
    assert structure.cycles(src) == [["gpualign.ensure.compose", "gpualign.ensure.image"]]
    assert structure.cycles(src, types_too=False) == []


def test_the_reading_sees_a_cycle_through_a_function(tmp_path):
    src = ensure_package(tmp_path, {
        "build": "from gpualign.ensure.run import Options\n",
        "run": "def one():\n    from gpualign.ensure.build import build\n",
        "types": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpualign.ensure.run import Options\n"})
    assert structure.cycles(src) == [["gpualign.ensure.build", "gpualign.ensure.run"]]


def test_values_of_more_than_five_fields_are_built_by_keyword():
    assert structure.positional_constructors() == []


def test_a_kernel_is_spelled_only_through_its_value():
    """Outside model/, no call site converts a kernel's `+`/`_` spelling or reads its architecture itself."""
    assert structure.kernel_spellings() == []


def test_the_reading_sees_a_kernel_spelled_at_its_call_site(tmp_path):
    src = ensure_package(tmp_path, {
        "use": "from gpualign.model.kernels import label_of\nfrom gpualign.model import makers\n"
               "def f(k):\n    a = label_of(k)\n    b = makers.kernel_arch(k)\n    c = k.replace('_', '+')\n"
               "    return k.replace('-', '_')\n"})
    assert structure.kernel_spellings(src) == ["gpualign/ensure/use.py:4: label_of",
                                               "gpualign/ensure/use.py:5: makers.kernel_arch",
                                               "gpualign/ensure/use.py:6: k.replace"]


def test_every_report_is_printed_by_its_commands_printers():
    assert structure.reports_printed_by_hand() == []


def test_the_reading_sees_a_report_printed_by_hand(tmp_path):
    src = ensure_package(tmp_path, {
        "use": "from gpualign.cli.common import emit_data, report\n"
               "def f(fmt):\n    emit_data(report('X', {}, {}), fmt)\n    emit_data({'a': 1}, fmt)\n"})
    assert structure.reports_printed_by_hand(src) == ["gpualign/ensure/use.py:3: emit_data(report(...))"]


def test_no_word_of_the_vocabulary_is_compared_as_a_string():
    """A StrEnum's value spelled as a string where its member belongs (`flavour == "open"`) is found."""
    assert structure.vocabulary_compares() == []


def test_the_reading_sees_a_vocabulary_word_compared_as_a_string_and_a_positional_constructor(tmp_path):
    src = ensure_package(tmp_path, {
        "words": "from enum import StrEnum\nclass Flavour(StrEnum):\n    OPEN = 'open'\n",
        "use": "def f(flavour, mapping):\n    a = flavour == 'open'\n    b = flavour in ('open', 'x')\n"
               "    c = 'open' in mapping\n    return Recipe(1, 2, 3, 4, 5, 6)\n"})
    assert structure.vocabulary_compares(src) == ["gpualign/ensure/use.py:2: 'open' (Flavour)",
                                                  "gpualign/ensure/use.py:3: 'open' (Flavour)"]
    assert structure.positional_constructors(src) == ["gpualign/ensure/use.py:5: Recipe with 6 positional arguments"]


def _variable(read: str) -> str:
    """The variable a read names: `os.environ.get(X)`, `os.getenv(X)`, `os.environ[X]`, `X in os.environ`."""
    import re

    code = read.split(": ", 1)[1]
    found = re.match(r"os\.(?:environ\.get|getenv)\(([^,)]+)|os\.environ\[([^]]+)\]|(\S+) (?:not )?in os\.environ",
                     code)
    assert found, read
    return next(g for g in found.groups() if g)


def test_each_setting_below_the_command_line_is_read_from_the_environment_in_one_place():
    """What cli/ does not read and hand on (another tool's variable, the archive's mirror) is read in one place, so
    no two places can disagree on its default."""
    from collections import Counter

    reads = Counter(_variable(read) for read in structure.environment_reads())
    assert reads and [name for name, count in reads.items() if count > 1] == []
