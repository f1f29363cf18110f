"""One printer per report and output format, as kubectl has one per `-o` value: json and yaml print every report the
same way (its versioned document, gpualign.cli.common.emit_data); table and wide are the report's own. Each command
declares its report's printers (`Printers`), and so the formats it allows: any other `-o` is one line of bad input
before any work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpualign.base.errors import BadInput
from gpualign.cli.common import emit_data
from gpualign.cli.options import Output

DATA = (Output.json, Output.yaml)


@dataclass(frozen=True)
class Shown:
    """How a report's table is shown: -o wide (every column, the long reasons), --no-headers."""

    wide: bool = False
    no_headers: bool = False


# writes the report's table (its notes on stderr) from its document, as shown, and what else the command hands on
# (a fleet's clusters as read)
Table = Callable[..., None]


@dataclass(frozen=True, kw_only=True)
class Printers:
    """A report's printers: its table (None: it is a document only) and which -o values it allows."""

    command: str  # as the user typed it: "check", "cuda check"
    table: Table | None = None
    wide: bool = True  # -o wide is the table with every column
    table_refused: str = ""  # without a table: why, after "-o FORMAT: " (else the formats it prints are named)
    wide_refused: str = ""  # without -o wide: why, likewise

    @property
    def formats(self) -> tuple[Output, ...]:
        return tuple(f for f in Output if self._allows(f))

    def _allows(self, fmt: Output) -> bool:
        return fmt in DATA or (self.table is not None and (fmt is Output.table or self.wide))

    def refuse_unless_allowed(self, fmt: Output) -> None:
        """BadInput for an -o value this report has no printer for."""
        if self._allows(fmt):
            return
        why = self.wide_refused if fmt is Output.wide and self.table is not None else self.table_refused
        raise BadInput(f"-o {fmt.value}: " + (why or f"{self.command} prints "
                                               f"{', '.join(f.value for f in self.formats)}"))

    def print(self, fmt: Output, document: dict[str, Any], *more: Any, no_headers: bool = False) -> None:
        """The report in `fmt`: its document for json and yaml, its table otherwise (given `more`)."""
        self.refuse_unless_allowed(fmt)
        if fmt in DATA:
            emit_data(document, fmt)
            return
        assert self.table is not None
        self.table(document, Shown(wide=fmt is Output.wide, no_headers=no_headers), *more)
