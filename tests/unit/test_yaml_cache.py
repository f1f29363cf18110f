"""yamlio.parse_cached: the built-in rules parsed once, read back as the same data."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from gpualign.base import yamlio


def test_read_back_is_what_parsing_gives(tmp_path: Path) -> None:
    text = resources.files("gpualign.rules").joinpath("driver_images.yaml").read_text()
    first = yamlio.parse_cached(text, "driver_images.yaml", tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    again = yamlio.parse_cached(text, "driver_images.yaml", tmp_path)
    assert again == first == yamlio.parse(text, "driver_images.yaml")


def test_data_json_cannot_hold_is_parsed_every_time(tmp_path: Path) -> None:
    text = "when: 2026-12-03\nbig: 123456789012345678901234567890\nnan: .nan\n"
    data = yamlio.parse_cached(text, "x.yaml", tmp_path)
    assert not list(tmp_path.glob("*.json"))
    assert str(data["when"]) == "2026-12-03" and data["big"] == 123456789012345678901234567890


def test_a_damaged_cache_is_parsed_past(tmp_path: Path) -> None:
    text = "a: [1, 2.5, true, null, 'x']\n"
    yamlio.parse_cached(text, "x.yaml", tmp_path)
    (cached,) = tmp_path.glob("*.json")
    cached.write_text("{not json")
    assert yamlio.parse_cached(text, "x.yaml", tmp_path) == {"a": [1, 2.5, True, None, "x"]}
    assert yamlio.parse_cached(text, "x.yaml", tmp_path / "absent" / "deeper") == {"a": [1, 2.5, True, None, "x"]}


def test_an_unwritable_cache_still_parses(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert yamlio.parse_cached("k: v\n", "x.yaml", blocker / "sub") == {"k": "v"}
