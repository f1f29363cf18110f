"""The private apt state's questions: several packages' versions in one apt-cache call, the lists read again once
for a package they do not know, and the package cache kept beside the lists."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpualign.archive import apt as archive_mod
from gpualign.archive.apt import Archive

STANZAS = """Package: libcuda1
Version: 535.309.01-0+deb12u1
Architecture: amd64

Package: nvidia-smi
Version: 535.309.01-0+deb12u1
Architecture: amd64
"""


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    seen: list[list[str]] = []
    updates: list[bool] = []

    def run(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        known = STANZAS if updates else STANZAS.split("\n\n")[0] + "\n"  # nvidia-smi appears after a new read
        return subprocess.CompletedProcess(cmd, 0, known, "W: Unable to locate package nosuch\n")

    monkeypatch.setattr(archive_mod.subprocess, "run", run)
    monkeypatch.setattr(Archive, "update", lambda self, force=False: updates.append(force))
    return seen


def test_versions_of_asks_apt_cache_once_for_all_and_once_more_after_a_new_read(calls):
    found = Archive().versions_of(["libcuda1", "nvidia-smi", "nosuch"])
    assert found == {"libcuda1": "535.309.01-0+deb12u1", "nvidia-smi": "535.309.01-0+deb12u1", "nosuch": None}
    shows = [c for c in calls if c[0] == "apt-cache"]
    assert len(shows) == 2  # one call for all three; one more after the lists were read again (nosuch, nvidia-smi)
    assert shows[0][-3:] == ["libcuda1", "nvidia-smi", "nosuch"]


def test_the_package_cache_lives_beside_the_lists(calls):
    Archive().version_of("libcuda1")
    opts = calls[0]
    assert any(o.startswith("Dir::Cache::pkgcache=") and o.endswith("cache/pkgcache.bin") for o in opts)
    assert "Dir::Cache::pkgcache=" not in opts  # never empty, whatever the host's apt.conf says



def test_the_private_state_reads_the_lists_with_the_list_options(calls):
    Archive().version_of("libcuda1")
    given = {o for c in calls for i, o in enumerate(c) if i and c[i - 1] == "-o"}
    assert set(archive_mod.LIST_OPTIONS) <= given


def _apt_dump(conf: Path, options: list[str]) -> dict[str, str]:
    """apt-config's view of the list options, the host's configuration left out."""
    env = {"PATH": "/usr/bin:/bin", "APT_CONFIG": str(conf)}
    out = subprocess.run(["apt-config", *options, "dump"], capture_output=True, text=True, env=env, check=True).stdout
    wanted = ("Acquire::CompressionTypes::Order", "Acquire::GzipIndexes", "Acquire::Languages",
              "Acquire::IndexTargets::deb::DEP-11")
    return dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(wanted))


def test_mmdebstrap_is_given_the_same_list_options_as_apt_config_lines(tmp_path):
    """gzip preferred, lists kept uncompressed, no translations nor AppStream metadata: the same settings whether
    given to apt-get (-o) or written as mmdebstrap's apt.conf lines (--aptopt)."""
    (tmp_path / "parts").mkdir()  # the host's apt.conf.d left out too, as mmdebstrap leaves it out
    alone = f'Dir::Etc::Parts "{tmp_path / "parts"}";\n'
    empty, conf = tmp_path / "empty.conf", tmp_path / "apt.conf"
    empty.write_text(alone)
    conf.write_text(alone + "".join(o.removeprefix("--aptopt=") + ";\n"
                                    for o in archive_mod.mmdebstrap_list_options()))
    as_options = _apt_dump(empty, [a for o in archive_mod.LIST_OPTIONS for a in ("-o", o)])
    assert _apt_dump(conf, []) == as_options
    assert as_options["Acquire::CompressionTypes::Order::"] == '"gz";'
    assert as_options["Acquire::GzipIndexes"] == '"false";'
    assert as_options["Acquire::Languages::"] == '"none";'
    assert all(as_options[f"Acquire::IndexTargets::deb::{t}::DefaultEnabled"] == '"false";'
               for t in ("DEP-11", "DEP-11-icons-small", "DEP-11-icons", "DEP-11-icons-hidpi"))


def test_an_air_gapped_fleets_mirror_is_read_by_builds_and_rendered_recipes(monkeypatch):
    """Review 5's M6: Debian's archive was fixed at deb.debian.org in ensure and in the rendered recipes."""
    from gpualign.archive import apt as archive
    from gpualign.ensure import recipes
    from gpualign.model.driver_tag import parse

    monkeypatch.delenv(archive.MIRROR_ENV, raising=False)
    monkeypatch.delenv(archive.SECURITY_ENV, raising=False)
    assert archive.Archive().mirror == "http://deb.debian.org/debian"
    assert archive.Archive().security == "http://deb.debian.org/debian-security"
    monkeypatch.setenv(archive.MIRROR_ENV, "http://apt.corp.local:3142/debian/")
    arc = archive.Archive(suite="trixie", arch="amd64")
    assert (arc.mirror, arc.security) == ("http://apt.corp.local:3142/debian", "http://apt.corp.local:3142/debian-security")
    assert all("apt.corp.local:3142" in line and "deb.debian.org" not in line for line in arc.source_lines())
    monkeypatch.setenv(archive.SECURITY_ENV, "http://sec.corp.local/debian-security")
    assert archive.Archive().security == "http://sec.corp.local/debian-security"
    recipe = recipes.render(parse("535-6.1.0-57-amd64-debian12"), "535.309.01")
    text = recipe.files["Containerfile"]
    assert "ARG DEBIAN_MIRROR=http://apt.corp.local:3142/debian" in text and "deb.debian.org" not in text
    assert "ARG DEBIAN_SECURITY_MIRROR=http://sec.corp.local/debian-security" in text
