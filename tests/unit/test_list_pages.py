"""A LIST page's continue token is read from the list's metadata at the head of the body, so the next page can be
asked for before this one is parsed; where the head does not say, the parsed page does."""

from __future__ import annotations

import orjson
import pytest

from gpualign.kube import continue_token


def page(meta: dict, items: list | None = None, *, items_first: bool = False) -> bytes:
    items = items if items is not None else [{"metadata": {"name": "n1", "labels": {"continue": "x"}}}]
    body = {"items": items, "metadata": meta} if items_first else {"kind": "NodeList", "apiVersion": "v1",
                                                                    "metadata": meta, "items": items}
    return orjson.dumps(body)


@pytest.mark.parametrize(("body", "token"), [
    (page({"resourceVersion": "9", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", "remainingItemCount": 3}),
     "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"),
    (page({"resourceVersion": "9"}), ""),  # the last page
    (page({"resourceVersion": "9", "continue": ""}), ""),
    (page({"resourceVersion": "9"}, items_first=True), None),  # items before metadata: the parsed page says
    (page({"resourceVersion": "9"}, [{"metadata": {"name": "a", "annotations": {"x": '"continue":"forged"'}}}]),
     ""),  # an object's own text is never read as the list's token
    (b'{"kind":"Status","status":"Failure"}', None),
])
def test_the_continue_token_comes_from_the_lists_own_metadata(body: bytes, token: str | None) -> None:
    assert continue_token(body) == token
