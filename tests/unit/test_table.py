"""Tables as kubectl prints them: every column as wide as its widest cell, three spaces apart, nothing cropped, no
trailing padding; colour codes around a styled cell never count in its width."""

import re

from hypothesis import given
from hypothesis import strategies as st

from gpualign.cli.table import Styled, render

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# stripped: a painted cell keeps its own trailing blanks inside its codes
text = st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=12).map(str.strip)
cell = st.one_of(text, st.builds(Styled, text, st.sampled_from(["green", "bold red", "yellow", "", "unknown"])))


def tabwriter(headers: list[str], rows: list[list[str]], no_headers: bool) -> str:
    """The layout, spelled out cell by cell."""
    lines = rows if no_headers else [headers, *rows]
    if not lines:
        return ""
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    out = []
    for line in lines:
        padded = [c + " " * (widths[i] - len(c)) for i, c in enumerate(line)]
        out.append("   ".join(padded).rstrip())
    return "\n".join(out) + "\n"


@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.lists(text, min_size=n, max_size=n),
                                                     st.lists(st.lists(cell, min_size=n, max_size=n), max_size=6))),
       st.booleans())
def test_the_layout_is_kubectls_and_colour_changes_nothing_but_the_codes(table, no_headers):
    headers, rows = table
    plain_rows = [[c.text if isinstance(c, Styled) else c for c in r] for r in rows]
    expected = tabwriter(headers, plain_rows, no_headers)
    assert render(headers, rows, no_headers=no_headers) == expected
    assert render(headers, iter(rows), no_headers=no_headers) == expected  # any iterable of rows
    coloured = render(headers, rows, color=True, no_headers=no_headers)
    assert ANSI.sub("", coloured) == expected


def test_a_styled_cell_is_painted_and_padded_after_its_codes():
    out = render(["NODE", "STATUS", "POD"], [["a", Styled("missing", "bold red"), "-"],
                                             ["bb", Styled("present", "green"), "Running"]], color=True)
    assert out.splitlines() == ["NODE   STATUS    POD",
                                "a      \x1b[1;31mmissing\x1b[0m   -",
                                "bb     \x1b[32mpresent\x1b[0m   Running"]


def test_no_rows_and_no_headers_is_nothing():
    assert render(["A"], [], no_headers=True) == ""
    assert render(["A", "B"], []) == "A   B\n"
