"""One printer per report and -o value: every command's report is printed through its Printers, which say which
formats it allows; any other is one line of bad input, before anything is printed."""
from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

import gpualign.cli
from gpualign.base.errors import BadInput
from gpualign.cli.options import Output
from gpualign.cli.printers import DATA, Printers, Shown


def every_printers() -> dict[str, Printers]:
    found = {}
    for info in pkgutil.iter_modules(gpualign.cli.__path__):
        module = importlib.import_module(f"gpualign.cli.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Printers):
                found[f"{info.name}.{name}"] = value
    return found


def test_the_commands_declare_their_printers():
    assert {"check.CHECK", "check.FLEET_CHECK", "plan.PLAN", "plan.FLEET_PLAN", "status.STATUS",
            "status.FLEET_STATUS", "status.WHY", "cuda.CUDA_CHECK", "verify.VERIFY", "gate.GATE_LIST",
            "gate.GATE_RELEASE", "build.BUILD_LIST", "build.SWEEP", "ensure.ENSURE", "ensure.RENDER",
            "upgrade.UPGRADE_PLAN", "rules.RULES", "lab.LAB_STATUS", "lab.RUN_DRIVER"} <= set(every_printers())


@pytest.mark.parametrize("name", sorted(every_printers()))
def test_every_report_is_a_document_and_other_formats_are_one_line_of_bad_input(name, capsys):
    printers = every_printers()[name]
    assert set(DATA) <= set(printers.formats)
    for fmt in Output:
        if fmt in printers.formats:
            printers.refuse_unless_allowed(fmt)
            continue
        with pytest.raises(BadInput) as refused:
            printers.print(fmt, {"kind": "X"})
        assert refused.value.message.startswith(f"-o {fmt.value}: ") and "\n" not in refused.value.message
    assert capsys.readouterr().out == ""


def test_the_refusals_name_what_the_command_prints():
    ensure, rules = every_printers()["ensure.ENSURE"], every_printers()["rules.RULES"]
    with pytest.raises(BadInput, match=r"^-o wide: ensure prints one line per image; use -o json or yaml"):
        ensure.refuse_unless_allowed(Output.wide)
    with pytest.raises(BadInput, match=r"^-o table: the rules are a document"):
        rules.refuse_unless_allowed(Output.table)
    plain = Printers(command="gate list")
    with pytest.raises(BadInput, match=r"^-o wide: gate list prints json, yaml$"):
        plain.refuse_unless_allowed(Output.wide)


def test_json_is_the_document_and_a_table_gets_how_it_is_shown_and_what_else_is_handed_on(capsys):
    seen = []
    printers = Printers(command="x", table=lambda doc, shown, *more: seen.append((doc, shown, more)))
    printers.print(Output.json, {"kind": "X", "n": 1}, "ignored")
    assert json.loads(capsys.readouterr().out) == {"kind": "X", "n": 1} and seen == []
    printers.print(Output.wide, {"kind": "X"}, "reads", no_headers=True)
    printers.print(Output.table, {"kind": "X"})
    assert seen == [({"kind": "X"}, Shown(wide=True, no_headers=True), ("reads",)),
                    ({"kind": "X"}, Shown(), ())]


def test_lab_status_prints_its_document_and_its_table_from_the_same_dict(capsys):
    """lab status as a table reads only what its json says: a dead component and a lab without a real node."""
    lab_status = every_printers()["lab.LAB_STATUS"]
    document = {"stateDir": "/s", "running": False, "scenario": None, "apiserver": "https://127.0.0.1:1",
                "registry": "127.0.0.1:2", "realNode": None,
                "components": [{"name": "etcd", "running": False, "pid": 7, "address": "127.0.0.1:3", "log": "/l",
                                "upSeconds": 3723}]}
    lab_status.print(Output.table, document)
    text = capsys.readouterr().out
    assert "lab in /s (scenario -)" in text and "DEAD" in text and "up 1h02m03s" in text and "no real node" in text
    lab_status.print(Output.json, document)
    assert json.loads(capsys.readouterr().out) == document
