"""A registry in memory, for tests that push and pull through gpualign's registry client (httpx2's MockTransport)."""

from __future__ import annotations

import hashlib
import json
import re

import httpx2


class BlobRegistry:
    """Just enough of the distribution API for a push and a pull: blobs per repository (HEAD, monolithic upload, a
    cross-repository mount when `mounts`), manifests by tag or digest (deleted by digest), a repository's tags.
    Records every request."""

    def __init__(self, mounts: bool = True) -> None:
        self.mounts = mounts
        self.listing_fails = False  # tags/list answers 500
        self.blobs: dict[str, dict[str, bytes]] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.requests: list[str] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        path, params = request.url.path, request.url.params
        self.requests.append(f"{request.method} {path}" + (f"?{request.url.query.decode()}" if params else ""))
        if m := re.fullmatch(r"/v2/(.+)/blobs/(sha256:[0-9a-f]+)", path):
            found = self.blobs.get(m.group(1), {}).get(m.group(2))
            if found is None:
                return httpx2.Response(404)
            return httpx2.Response(200, stream=httpx2.ByteStream(found if request.method == "GET" else b""))
        if m := re.fullmatch(r"/v2/(.+)/blobs/uploads/", path):
            repo, digest, source = m.group(1), params.get("mount"), params.get("from")
            if self.mounts and digest and digest in self.blobs.get(source or "", {}):
                self.blobs.setdefault(repo, {})[digest] = self.blobs[source or ""][digest]
                return httpx2.Response(201)
            return httpx2.Response(202, headers={"Location": f"/v2/{repo}/blobs/uploads/1"})
        if m := re.fullmatch(r"/v2/(.+)/blobs/uploads/1", path):
            if request.method == "DELETE":
                return httpx2.Response(204)
            data = request.read()
            assert params["digest"] == f"sha256:{hashlib.sha256(data).hexdigest()}"
            self.blobs.setdefault(m.group(1), {})[params["digest"]] = data
            return httpx2.Response(201)
        if m := re.fullmatch(r"/v2/(.+)/tags/list", path):
            if self.listing_fails:
                return httpx2.Response(500)
            tags = sorted(t for (repo, t) in self.manifests if repo == m.group(1) and not t.startswith("sha256:"))
            return httpx2.Response(200, json={"name": m.group(1), "tags": tags}) if tags else httpx2.Response(404)
        if (m := re.fullmatch(r"/v2/(.+)/manifests/(.+)", path)) and request.method in ("GET", "HEAD"):
            body = self.manifests.get((m.group(1), m.group(2)))
            if body is None and m.group(2).startswith("sha256:"):  # a registry serves every manifest by its digest
                body = next((b for (repo, _), b in self.manifests.items() if repo == m.group(1)
                             and f"sha256:{hashlib.sha256(b).hexdigest()}" == m.group(2)), None)
            if body is None:
                return httpx2.Response(404)
            return httpx2.Response(200, content=body if request.method == "GET" else b"", headers={
                "Docker-Content-Digest": f"sha256:{hashlib.sha256(body).hexdigest()}"})
        if (m := re.fullmatch(r"/v2/(.+)/manifests/(sha256:[0-9a-f]+)", path)) and request.method == "DELETE":
            # deleting by digest removes every tag naming it, as a registry does
            gone = [k for k, b in self.manifests.items() if k[0] == m.group(1)
                    and f"sha256:{hashlib.sha256(b).hexdigest()}" == m.group(2)]
            for key in gone:
                del self.manifests[key]
            return httpx2.Response(202 if gone else 404)
        if m := re.fullmatch(r"/v2/(.+)/manifests/(.+)", path):
            layers = json.loads(request.read()).get("layers") or []
            missing = [d["digest"] for d in layers if d["digest"] not in self.blobs.get(m.group(1), {})]
            assert not missing, missing  # a manifest only once its blobs are in
            self.manifests[(m.group(1), m.group(2))] = request.read()
            return httpx2.Response(201)
        return httpx2.Response(404)
