"""Signing and trust are options of the commands that use them, named in their --help with their environment
variables; a key that cannot be used is one line and exit 2, before anything is read."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tests.support.cosign_keys import key_pair


@pytest.mark.parametrize("command", ["check", "plan", "status", "why", "ensure", "upgrade", "controller"])
def test_every_command_that_judges_images_names_its_trusted_key_option(command):
    text = run_cli(command, "--help").out
    assert "--trusted-key" in text and "GPUALIGN_TRUSTED_KEYS" in text


def test_ensure_names_its_cosign_key_option_and_the_upstreams():
    text = run_cli("ensure", "--help").out
    for said in ("--cosign-key", "GPUALIGN_COSIGN_KEY", "COSIGN_PASSWORD", "k8s://NAMESPACE/SECRET",
                 "--upstream-key"):
        assert said in text, said


def test_a_private_key_given_as_trusted_is_refused_in_one_line(tmp_path):
    private, public = key_pair(tmp_path, "team")
    res = run_cli("check", "--nodes-file", "-", "--ledger", "-", "--trusted-key", str(private), input="")
    assert res.code == 2 and res.err.count("\n") == 1 and str(private) in res.err, res.err


def test_an_encrypted_key_without_its_password_is_refused_in_one_line(tmp_path):
    key = tmp_path / "team.key"
    key.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n"
                   "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    res = run_cli("ensure", "535-6.1.0-57-amd64-debian12", "--ledger", "registry://127.0.0.1:1/nvidia/driver",
                  "--cosign-key", str(key))
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "needs its password in $COSIGN_PASSWORD" in res.err, res.err


def test_the_trusted_keys_are_loaded_once_by_the_command_line_and_handed_on(tmp_path):
    """--trusted-key (repeatable) and $GPUALIGN_TRUSTED_KEYS (':'-separated) name the same keys; the command line
    loads them and hands them to what judges images: nothing below it reads the environment for them."""
    import os

    from gpualign.cli.options import trusted_keys

    _, team = key_pair(tmp_path, "team")
    _, other = key_pair(tmp_path, "other")
    loaded = trusted_keys([f"{team}{os.pathsep}{other}"])
    assert [k.path for k in loaded] == [str(team), str(other)]
    assert trusted_keys([str(team), str(other)]) == loaded and trusted_keys(None) == () == trusted_keys([])


def test_only_the_command_line_reads_the_trusted_keys_variable():
    from pathlib import Path

    import gpualign

    root = Path(gpualign.__file__).parent
    readers = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if p.parts[len(root.parts)] != "cli" and p.relative_to(root) != Path("model/cosign.py")
               and "TRUSTED_ENV" in p.read_text()]
    assert readers == []
