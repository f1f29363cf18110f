"""A LIST page's continue token is read from the list's metadata at the head of the body, so the next page can be
asked for before this one is parsed; where the head does not say, the parsed page does."""

from __future__ import annotations

import orjson
import pytest

from gpualign.kube.client import continue_token


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


def test_pages_after_the_first_are_sized_by_bytes_within_their_bounds(serve, tmp_path):
    """The first page holds `limit` objects; each next one as many as make about page_bytes at the size of the
    objects read so far, between PAGE_MIN and PAGE_MAX; every object comes once, in order."""
    from urllib.parse import parse_qs, urlsplit

    from gpualign.kube import client as K
    from tests.support.loopback_http import loopback_kubeconfig, send

    objects = [{"metadata": {"name": f"n{i:04d}", "labels": {"pad": "x" * 80}}} for i in range(3000)]
    one = len(orjson.dumps(objects[0])) + 1  # an object and its comma

    def lister(h) -> None:
        q = parse_qs(urlsplit(h.path).query)
        start, limit = int(q.get("continue", ["0"])[0]), int(q["limit"][0])
        end = min(start + limit, len(objects))
        meta = {"resourceVersion": "7", **({"continue": str(end)} if end < len(objects) else {})}
        send(h, orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": meta,
                              "items": objects[start:end]}))

    srv = serve(lister)
    kube = K.Kube(str(loopback_kubeconfig(tmp_path, srv.url)))
    try:
        pages = list(kube.list_pages("/api/v1/nodes", limit=10, page_bytes=100 * one))
    finally:
        kube.close()
    limits = [int(parse_qs(urlsplit(p).query)["limit"][0]) for p, _, _ in srv.seen]
    # The list's head counts with the objects: a lot beside 10 objects, little beside a hundred.
    assert limits[0] == 10 and 85 <= limits[1] < 100 and all(97 <= n < 100 for n in limits[2:]), limits
    assert [n["metadata"]["name"] for p in pages for n in p] == [o["metadata"]["name"] for o in objects]
    srv.seen.clear()
    kube = K.Kube(str(loopback_kubeconfig(tmp_path, srv.url)))
    try:
        assert sum(len(p) for p in kube.list_pages("/api/v1/nodes", limit=10, page_bytes=1 << 40)) == 3000
        assert sum(len(p) for p in kube.list_pages("/api/v1/nodes", limit=10, page_bytes=1)) == 3000
    finally:
        kube.close()
    limits = [int(parse_qs(urlsplit(p).query)["limit"][0]) for p, _, _ in srv.seen]
    assert limits[:2] == [10, K.PAGE_MAX] and limits[2] == 10 and set(limits[3:]) == {K.PAGE_MIN}, limits
