"""A small in-repo fake of the distribution API, for pagination and auth cases Debian's registry cannot show.

It is an httpx2 transport (lightkube's HTTP stack), so the real RegistryClient code runs unchanged against it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx2


@dataclass
class FakeRegistry:
    tags: list[str]
    page_size: int = 2
    auth: str | None = None  # None | "bearer" | "ngc" | "basic"
    credentials: tuple[str, str] | None = None
    link_loop: bool = False
    requests: list[httpx2.Request] = field(default_factory=list)
    token_requests: list[httpx2.Request] = field(default_factory=list)
    status_override: int | None = None
    body_override: bytes | None = None

    TOKEN = "fake-token-123"

    def _challenge(self) -> httpx2.Response:
        if self.auth == "bearer":
            header = ('Bearer realm="https://auth.fake.io/token",service="fake.io",'
                      'scope="repository:nvidia/driver:pull"')
        elif self.auth == "ngc":
            header = 'Bearer realm="https://nvcr.io/proxy_auth",scope="repository:nvidia/driver:pull"'
        else:
            header = 'Basic realm="fake"'
        return httpx2.Response(401, headers={"WWW-Authenticate": header}, json={"errors": [{"code": "UNAUTHORIZED"}]})

    def _authorized(self, request: httpx2.Request) -> bool:
        if self.auth is None:
            return True
        got = request.headers.get("Authorization", "")
        if self.auth == "basic":
            user, secret = self.credentials or ("", "")
            return got == "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
        return got == f"Bearer {self.TOKEN}"

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        url = urlsplit(str(request.url))
        if url.path in ("/token", "/proxy_auth"):
            self.token_requests.append(request)
            if self.credentials:
                want = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
                if request.headers.get("Authorization") != want:
                    return httpx2.Response(401, json={"details": "bad credentials"})
            return httpx2.Response(200, json={"token": self.TOKEN})
        self.requests.append(request)
        if not self._authorized(request):
            return self._challenge()
        if self.status_override:
            return httpx2.Response(self.status_override, json={"errors": []})
        if self.body_override is not None:
            return httpx2.Response(200, content=self.body_override, headers={"Content-Type": "application/json"})
        query = parse_qs(url.query)
        last = query.get("last", [None])[0]
        n = int(query.get("n", [self.page_size])[0])
        n = min(n, self.page_size)
        ordered = sorted(self.tags)
        start = 0 if last is None else ordered.index(last) + 1
        page = ordered[start:start + n]
        headers = {}
        if start + n < len(ordered):
            nxt = "/v2/nvidia/driver/tags/list?n=2" if self.link_loop else \
                f"/v2/nvidia/driver/tags/list?n={n}&last={page[-1]}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return httpx2.Response(200, headers=headers, content=json.dumps({"name": "nvidia/driver", "tags": page}))

    @property
    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handler)
