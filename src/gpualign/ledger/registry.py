"""The one door to OCI registries (distribution API v2): tag listing, manifests, image configs, and pushes.

Handles `Link` pagination with a page cap and loop detection, Bearer-token challenges (anonymous or with
credentials from a docker config.json), Basic challenges, and NGC's proxy_auth realm (a Bearer realm with no
`service`). Credentials are never logged or put in an error message.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from gpualign.base.errors import BadInput, Refused, Unreachable
from gpualign.base.transport import FailureKind, TransportFailure
from gpualign.ledger.exchange import Exchanges, Headers, Reply
from gpualign.ledger.references import RegistryRef, parse_ref
from gpualign.model import oci
from gpualign.model.image_ref import sha256_hex

if TYPE_CHECKING:
    import httpx2

MANIFEST_TYPES = ", ".join(oci.ACCEPTED)  # a manifest GET's Accept
INDEX_TYPES = oci.INDEX_TYPES
DEFAULT_MAX_PAGES = 100
MAX_BODY = 16 << 20  # bytes: a tag page of 1,000 tags is ~50 KB, a manifest or config a few KB
PAGE_SIZE = 1000


class BlobMismatch(Refused):
    """A blob whose bytes are not what its descriptor names (its digest or size): never used."""


def docker_credentials(host: str, config_path: Path | None = None) -> tuple[str, str] | None:
    """(user, secret) for host from a docker config.json ($DOCKER_CONFIG or ~/.docker), or None."""
    if config_path is None:
        base = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
        config_path = Path(base) / "config.json"
    try:
        data = json.loads(config_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise BadInput(f"docker config {config_path} is unreadable: {err.__class__.__name__}") from None
    auths = data.get("auths") or {}
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"):
        entry = auths.get(key)
        if isinstance(entry, dict) and entry.get("auth"):
            try:
                user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise BadInput(f"docker config {config_path}: the auth entry for {host} is not base64 user:secret") \
                    from None
            return user, secret
    return None


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


def _next_link(header: str | None) -> str | None:
    if not header:
        return None
    for part in header.split(","):
        m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", part)
        if m:
            return m.group(1)
    return None


@dataclass
class RegistryClient:
    """A small distribution-API client. One instance per registry host; tokens are cached per scope."""

    ref: RegistryRef
    credentials: tuple[str, str] | None = None
    timeout: float = 10.0
    max_pages: int = DEFAULT_MAX_PAGES
    transport: httpx2.BaseTransport | None = None  # given: every exchange goes through httpx and it (tests' fakes)
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)
    _http: httpx2.Client | None = field(default=None, repr=False)
    _exchanges: Exchanges = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._exchanges = Exchanges(self.timeout)  # no connection or TLS until the first exchange asks for one

    @property
    def http(self) -> httpx2.Client:
        """An httpx client (imported on first use): the blobs streamed into files go through it, and every exchange
        when a transport was given."""
        if self._http is None:
            import httpx2

            from gpualign.ledger.transport import LazyTLSTransport

            self._http = httpx2.Client(timeout=self.timeout, transport=self.transport or LazyTLSTransport(),
                                       follow_redirects=True)
        return self._http

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        self._exchanges.close()

    # -- auth ---------------------------------------------------------------------------------------------------
    def _token(self, challenge: dict[str, str], scope: str) -> str:
        realm = challenge.get("realm")
        if not realm:
            raise Unreachable(f"{self.ref.host}: Bearer challenge without a realm")
        params = {"scope": challenge.get("scope") or scope}
        if challenge.get("service"):  # NGC's proxy_auth sends none, and wants none
            params["service"] = challenge["service"]
        auth = {"Authorization": _basic(self.credentials)} if self.credentials else {}
        try:
            url = _with_params(realm, params)
        except (UnicodeError, ValueError):
            raise Unreachable(f"{self.ref.host}: Bearer challenge names an unusable realm") from None
        resp = self._bounded("GET", url, auth, None)
        if resp.status_code in (401, 403):
            raise Unreachable(f"{self.ref.host}: token service refused "
                              f"{'the configured credentials' if self.credentials else 'anonymous access'} "
                              f"(HTTP {resp.status_code})")
        if resp.status_code >= 400:
            raise Unreachable(f"{self.ref.host}: token service answered HTTP {resp.status_code}")
        try:
            data = resp.json()
            token = data.get("token") or data.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise Unreachable(f"{self.ref.host}: token service answered without a token")
        return token

    def _send(self, method: str, url: str, *, scope: str, headers: dict[str, str] | None = None,
              content: bytes | None = None) -> Reply:
        """One request, answering at most one auth challenge (a second 401 is an error, never a loop)."""
        hdrs = dict(headers or {})
        if scope in self._tokens:
            hdrs["Authorization"] = self._tokens[scope]
        for attempt in range(2):
            resp = self._bounded(method, url, hdrs, content)
            if resp.status_code != 401 or attempt == 1:
                break
            kind, challenge = _parse_challenge(resp.headers.get("WWW-Authenticate", ""))
            if kind == "bearer":
                value = f"Bearer {self._token(challenge, scope)}"
            elif kind == "basic" and self.credentials:
                value = _basic(self.credentials)
            else:
                break
            self._tokens[scope] = value
            hdrs["Authorization"] = value
        if resp.status_code == 401:
            raise Unreachable(f"registry {self.ref.host} refused access to {self.ref.repo} (HTTP 401)")
        return resp

    def _bounded(self, method: str, url: str, headers: dict[str, str], content: bytes | None) -> Reply:
        """One HTTP exchange within a whole-request deadline (self.timeout) and MAX_BODY bytes.

        A timeout that bounds each read would let a server dripping a byte at a time hold us forever, and a huge
        body would be read into memory whole; both are cut here, with one line saying which.
        """
        deadline = time.monotonic() + self.timeout
        where = urlsplit(url).path
        too_large = f"registry {self.ref.host}: response to {where} is larger than {MAX_BODY >> 20} MiB; refusing it"
        if self.transport is None:
            try:
                return self._exchanges.exchange(method, url, headers, content, deadline=deadline,
                                                max_body=MAX_BODY, too_large=too_large)
            except TransportFailure as err:
                raise self._unreachable(err, where) from None
        return self._bounded_httpx(method, url, headers, content, deadline, where, too_large)

    def _unreachable(self, err: TransportFailure, where: str) -> Unreachable:
        if err.kind == FailureKind.LARGE:
            return Unreachable(err.detail)
        if err.kind == FailureKind.SLOW:
            return Unreachable(f"registry {self.ref.host} timed out after {self.timeout:g}s "
                               f"(response to {where} still arriving)")
        if err.kind == FailureKind.TIMEOUT:
            return Unreachable(f"registry {self.ref.host} timed out after {self.timeout:g}s")
        if err.kind == FailureKind.CUT:
            return Unreachable(f"registry {self.ref.host}: response to {where} was cut short")
        return Unreachable(f"registry {self.ref.host} unreachable: {err.detail}")

    def _bounded_httpx(self, method: str, url: str, headers: dict[str, str], content: bytes | None,
                       deadline: float, where: str, too_large: str) -> Reply:
        import httpx2

        try:
            with self.http.stream(method, url, headers=headers, content=content) as resp:
                body = bytearray()
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise Unreachable(too_large)
                    if time.monotonic() > deadline:
                        raise Unreachable(f"registry {self.ref.host} timed out after {self.timeout:g}s "
                                          f"(response to {where} still arriving)")
        except httpx2.TimeoutException:
            raise Unreachable(f"registry {self.ref.host} timed out after {self.timeout:g}s") from None
        except httpx2.RemoteProtocolError:
            raise Unreachable(f"registry {self.ref.host}: response to {where} was cut short") from None
        except httpx2.HTTPError as err:
            why = " ".join(str(err).split())[:200]  # e.g. [SSL: CERTIFICATE_VERIFY_FAILED] …: the reason, one line
            raise Unreachable(f"registry {self.ref.host} unreachable: {err.__class__.__name__}"
                              + (f": {why}" if why else "")) from None
        headers_read = Headers()
        for name, value in resp.headers.multi_items():
            if name.lower() not in ("content-encoding", "content-length", "transfer-encoding"):
                headers_read.add(name, value)
        return Reply(resp.status_code, bytes(body), headers_read)

    # -- reads --------------------------------------------------------------------------------------------------
    def tags(self, repo: str | None = None, *, missing_ok: bool = True) -> list[str]:
        """Every tag of repo, following Link pagination (capped at max_pages; a repeated link is an error).
        A repository the registry does not know (404, NAME_UNKNOWN) has no tags with missing_ok, and is bad input
        naming it without (a mistyped ledger would otherwise make every image look missing)."""
        repo = repo or self.ref.repo
        scope = f"repository:{repo}:pull"
        url: str | None = f"{self.ref.base}/v2/{repo}/tags/list?n={PAGE_SIZE}"
        seen: set[str] = set()
        tags: list[str] = []
        pages = 0
        while url:
            if url in seen:
                raise Unreachable(f"registry {self.ref.host}: pagination loops back to a page already read")
            seen.add(url)
            pages += 1
            if pages > self.max_pages:
                raise Unreachable(f"registry {self.ref.host}: more than {self.max_pages} pages of tags for {repo}")
            resp = self._send("GET", url, scope=scope)
            if resp.status_code == 404:
                if missing_ok or pages > 1:
                    return tags  # NAME_UNKNOWN: a repository nobody pushed to has no tags
                raise BadInput(f"registry {self.ref.host} has no repository {repo} (NAME_UNKNOWN): is the name right? "
                               "(a repository exists once something is pushed to it)")
            if resp.status_code >= 400:
                raise Unreachable(f"registry {self.ref.host}: listing tags of {repo}: HTTP {resp.status_code}")
            try:
                body = resp.json()
                page = body.get("tags") or []
                if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                    raise ValueError
            except (ValueError, AttributeError):
                raise Unreachable(f"registry {self.ref.host}: tag list for {repo} is not valid JSON") from None
            tags.extend(page)
            nxt = _next_link(resp.headers.get("Link"))
            url = urljoin(self.ref.base + "/", nxt) if nxt else None
            if url and urlsplit(url).netloc != urlsplit(self.ref.base).netloc:
                raise Unreachable(f"registry {self.ref.host}: pagination link points to another host")
        return tags

    def manifest(self, reference: str, repo: str | None = None) -> dict[str, Any] | None:
        """The manifest for a tag or digest, or None if the registry does not have it."""
        repo = repo or self.ref.repo
        resp = self._manifest_request("GET", reference, repo)
        return None if resp is None else self._object(resp, f"{repo}:{reference}")

    def _object(self, resp: Reply, where: str) -> dict[str, Any]:
        """A manifest's body as a JSON object, or Unreachable naming `where`."""
        try:
            data = resp.json()
        except ValueError:
            raise Unreachable(f"registry {self.ref.host}: manifest {where} is not JSON") from None
        if not isinstance(data, dict):
            raise Unreachable(f"registry {self.ref.host}: manifest {where} is not an object")
        return data

    def manifest_at(self, digest: str, repo: str | None = None) -> dict[str, Any] | None:
        """The manifest stored under `digest`, refused (BlobMismatch) unless its bytes hash to it: what was judged
        by its digest (a signature over it) is what is read, whatever the tag points at by now."""
        repo = repo or self.ref.repo
        want = sha256_hex(digest)
        if want is None:
            raise Unreachable(f"registry {self.ref.host}: manifest digest {digest[:30]!r} is not sha256")
        resp = self._manifest_request("GET", digest, repo)
        if resp is None:
            return None
        if hashlib.sha256(resp.content).hexdigest() != want:
            raise BlobMismatch(f"registry {self.ref.host}: manifest {repo}@{digest[:19]}… is not the manifest its "
                               "digest names")
        return self._object(resp, f"{repo}@{digest[:19]}…")

    def digest(self, reference: str, repo: str | None = None) -> str | None:
        """The manifest digest a tag resolves to (an index's own digest for a multi-platform image), or None."""
        repo = repo or self.ref.repo
        resp = self._manifest_request("HEAD", reference, repo)
        if resp is None:
            return None
        found = resp.headers.get("Docker-Content-Digest")
        if found:
            return str(found)
        body = self._manifest_request("GET", reference, repo)
        return "sha256:" + hashlib.sha256(body.content if body is not None else b"").hexdigest()

    def _manifest_request(self, method: str, reference: str, repo: str) -> Reply | None:
        """GET or HEAD a manifest: the answer, None when the registry does not have it, Unreachable otherwise."""
        resp = self._send(method, f"{self.ref.base}/v2/{repo}/manifests/{reference}",
                          scope=f"repository:{repo}:pull", headers={"Accept": MANIFEST_TYPES})
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise Unreachable(f"registry {self.ref.host}: manifest {repo}:{reference}: HTTP {resp.status_code}")
        return resp

    def blob(self, digest: str, repo: str | None = None) -> bytes:
        repo = repo or self.ref.repo
        resp = self._send("GET", f"{self.ref.base}/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if resp.status_code >= 400:
            raise Unreachable(f"registry {self.ref.host}: blob {digest[:19]}…: HTTP {resp.status_code}")
        return resp.content

    def blob_to_file(self, digest: str, size: int, into: Path, repo: str | None = None,
                     timeout: float = 600.0) -> None:
        """Stream a large blob (beyond MAX_BODY) into a file, refusing it unless it is exactly `size` bytes whose
        SHA-256 is `digest` (a registry serves what its storage holds: a blob changed there is caught here). The
        file is written beside `into` and renamed only once checked."""
        repo = repo or self.ref.repo
        want = sha256_hex(digest)
        if want is None:
            raise Unreachable(f"registry {self.ref.host}: blob digest {digest[:30]!r} is not sha256")
        url = f"{self.ref.base}/v2/{repo}/blobs/{digest}"
        scope = f"repository:{repo}:pull"
        self._send("HEAD", url, scope=scope)  # answers an auth challenge once, before the body streams
        headers = {"Authorization": self._tokens[scope]} if scope in self._tokens else {}
        partial = into.with_name(f".{into.name}.partial")
        deadline = time.monotonic() + timeout
        hasher = hashlib.sha256()
        got = 0
        try:
            with self.http.stream("GET", url, headers=headers) as resp, partial.open("wb") as out:
                if resp.status_code >= 400:
                    raise Unreachable(f"registry {self.ref.host}: blob {digest[:19]}…: HTTP {resp.status_code}")
                for chunk in resp.iter_raw(1 << 20):
                    got += len(chunk)
                    if got > size:
                        raise BlobMismatch(f"registry {self.ref.host}: blob {digest[:19]}… is larger than the "
                                          f"{size} bytes its manifest says; refused")
                    if time.monotonic() > deadline:
                        raise Unreachable(f"registry {self.ref.host}: blob {digest[:19]}… still arriving after "
                                          f"{timeout:g}s")
                    hasher.update(chunk)
                    out.write(chunk)
        except httpx_errors() as err:
            partial.unlink(missing_ok=True)
            raise Unreachable(f"registry {self.ref.host}: reading blob {digest[:19]}…: "
                              f"{err.__class__.__name__}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if got != size or hasher.hexdigest() != want:
            partial.unlink(missing_ok=True)
            raise BlobMismatch(f"registry {self.ref.host}: blob {digest[:19]}… is not what its manifest names "
                              f"({got} bytes, sha256 {hasher.hexdigest()[:12]}…): refused")
        os.replace(partial, into)

    def image_config(self, reference: str, repo: str | None = None, arch: str = "amd64") -> dict[str, Any] | None:
        """The image config (with config.Env) for a tag; an index resolves to its linux/`arch` entry (else its
        first)."""
        return self.image_config_and_platforms(reference, repo, arch)[0]

    def image_config_and_platforms(self, reference: str, repo: str | None = None, arch: str = "amd64") \
            -> tuple[dict[str, Any] | None, tuple[str, ...]]:
        """The image config for a tag (an index's linux/`arch` entry, else its first), and the CPU architectures
        of linux the tag holds: an index's entries, or a single image's own config.architecture."""
        manifest = self.manifest(reference, repo)
        if manifest is None:
            return None, ()
        platforms: tuple[str, ...] | None = None
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            entries = [m for m in manifest.get("manifests") or [] if isinstance(m, dict)]
            linux = [m for m in entries if (m.get("platform") or {}).get("os", "linux") == "linux"]
            platforms = tuple(dict.fromkeys(str((m.get("platform") or {}).get("architecture", "")) for m in linux
                                            if (m.get("platform") or {}).get("architecture")))
            chosen = next((m for m in linux if (m.get("platform") or {}).get("architecture") == arch),
                          entries[0] if entries else None)
            if not chosen:
                return None, platforms
            manifest = self.manifest(chosen["digest"], repo)
            if manifest is None:
                return None, platforms
        digest = (manifest.get("config") or {}).get("digest")
        if not digest:
            return None, platforms or ()
        try:
            data = json.loads(self.blob(digest, repo))
        except ValueError:
            raise Unreachable(f"registry {self.ref.host}: image config of {reference} is not JSON") from None
        config = data if isinstance(data, dict) else None
        if platforms is None:
            platforms = (str(config.get("architecture") or "amd64"),) if config is not None else ()
        return config, platforms

    # -- writes (the lab seeds its registry with these; no Docker needed) ---------------------------------------
    def push_blob(self, data: bytes, repo: str | None = None, *, timeout: float | None = None) -> str:
        """Upload a blob (monolithic: one POST, one PUT) unless the registry has it; returns its digest. timeout:
        the whole upload's deadline, for blobs larger than a manifest [default: the client's]."""
        if timeout is not None and timeout > self.timeout:
            longer = RegistryClient(self.ref, self.credentials, timeout, self.max_pages, self.transport)
            longer._tokens = self._tokens
            try:
                return longer.push_blob(data, repo)
            finally:
                longer.close()
        repo = repo or self.ref.repo
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        scope = f"repository:{repo}:pull,push"
        head = self._send("HEAD", f"{self.ref.base}/v2/{repo}/blobs/{digest}", scope=scope)
        if head.status_code == 200:
            return digest
        start = self._send("POST", f"{self.ref.base}/v2/{repo}/blobs/uploads/", scope=scope)
        if start.status_code != 202 or "Location" not in start.headers:
            raise Unreachable(f"registry {self.ref.host}: blob upload refused: HTTP {start.status_code}")
        location = urljoin(self.ref.base + "/", start.headers["Location"])
        sep = "&" if "?" in location else "?"
        put = self._send("PUT", f"{location}{sep}digest={digest}", scope=scope, content=data,
                         headers={"Content-Type": "application/octet-stream"})
        if put.status_code != 201:
            raise Unreachable(f"registry {self.ref.host}: blob upload failed: HTTP {put.status_code}")
        return digest

    def mount_blob(self, digest: str, from_repo: str, repo: str | None = None) -> bool:
        """Make a blob of another repository of this registry one of `repo`'s too, without its bytes (a
        cross-repository mount); True when `repo` has it now. False when the registry would rather take an upload
        (it may not mount, or the credentials may not read `from_repo`): the caller uploads it."""
        repo = repo or self.ref.repo
        scope = f"repository:{repo}:pull,push"
        head = self._send("HEAD", f"{self.ref.base}/v2/{repo}/blobs/{digest}", scope=scope)
        if head.status_code == 200:
            return True
        resp = self._send("POST", f"{self.ref.base}/v2/{repo}/blobs/uploads/?mount={digest}&from={from_repo}",
                          scope=scope)
        if resp.status_code == 201:
            return True
        if resp.status_code == 202:  # an upload was started instead: given up, so that none is left open
            if "Location" in resp.headers:
                location = urljoin(self.ref.base + "/", resp.headers["Location"])
                with contextlib.suppress(Unreachable):
                    self._send("DELETE", location, scope=scope)
            return False
        raise Unreachable(f"registry {self.ref.host}: mounting blob {digest[:19]}… from {from_repo}: HTTP "
                          f"{resp.status_code}")

    def push_manifest(self, tag: str, manifest: dict[str, Any], repo: str | None = None) -> None:
        repo = repo or self.ref.repo
        body = json.dumps(manifest, separators=(",", ":")).encode()
        resp = self._send("PUT", f"{self.ref.base}/v2/{repo}/manifests/{tag}", scope=f"repository:{repo}:pull,push",
                          content=body, headers={"Content-Type": manifest["mediaType"]})
        if resp.status_code != 201:
            raise Unreachable(f"registry {self.ref.host}: manifest {repo}:{tag} refused: HTTP {resp.status_code}")

    def delete_manifest(self, digest: str, repo: str | None = None) -> None:
        """Delete a manifest by digest (every tag on it goes with it). A registry that does not allow deletes says
        so in one line (distribution: storage.delete.enabled)."""
        repo = repo or self.ref.repo
        resp = self._send("DELETE", f"{self.ref.base}/v2/{repo}/manifests/{digest}",
                          scope=f"repository:{repo}:delete")
        if resp.status_code in (200, 202, 404):
            return
        if resp.status_code in (405, 403):

            raise Refused(f"registry {self.ref.host} does not allow deleting {repo}@{digest} (HTTP "
                          f"{resp.status_code}): enable deletes (distribution: storage.delete.enabled), or delete "
                          "by the registry's own tools")
        raise Unreachable(f"registry {self.ref.host}: deleting {repo}@{digest}: HTTP {resp.status_code}")

    def push_image(self, tag: str, env: dict[str, str], repo: str | None = None,
                   labels: dict[str, str] | None = None, archs: Sequence[str] = ("amd64",)) -> None:
        """Push a tiny single-layer OCI image whose config carries env (e.g. DRIVER_VERSION, CUDA_VERSION) and
        labels: one linux image for one architecture, else an index with one image per architecture."""
        layer = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # empty gzip
        layer_digest = self.push_blob(layer, repo)
        manifests: list[dict[str, Any]] = []
        for arch in archs:
            config = json.dumps({
                "architecture": arch, "os": "linux",
                "config": {"Env": [f"{k}={v}" for k, v in env.items()], **({"Labels": labels} if labels else {})},
                "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(b"").hexdigest()]},
            }, separators=(",", ":")).encode()
            config_digest = self.push_blob(config, repo)
            manifests.append({
                "schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
                "config": {"mediaType": oci.OCI_CONFIG, "digest": config_digest,
                           "size": len(config)},
                "layers": [{"mediaType": oci.OCI_GZIP_LAYER, "digest": layer_digest,
                            "size": len(layer)}],
            })
        if len(manifests) == 1:
            self.push_manifest(tag, manifests[0], repo)
            return
        entries = []
        for arch, manifest in zip(archs, manifests, strict=True):
            body = json.dumps(manifest, separators=(",", ":")).encode()
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.push_manifest(digest, manifest, repo)
            entries.append({"mediaType": manifest["mediaType"], "digest": digest, "size": len(body),
                            "platform": {"architecture": arch, "os": "linux"}})
        self.push_manifest(tag, {"schemaVersion": 2, "mediaType": oci.OCI_INDEX,
                                 "manifests": entries}, repo)


def httpx_errors() -> type[Exception]:
    import httpx2

    return httpx2.HTTPError


def _basic(credentials: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(":".join(credentials).encode()).decode()


def _with_params(url: str, params: dict[str, str]) -> str:
    """url with params set in its query (a realm may carry a query of its own). ValueError when url is not an
    http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(url)
    parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    query = dict(parse_qsl(parts.query, keep_blank_values=True)) | params
    return urlunsplit(parts._replace(query=urlencode(query)))


def config_env(config: dict[str, Any]) -> dict[str, str]:
    env = (config.get("config") or {}).get("Env") or []
    return dict(e.split("=", 1) for e in env if isinstance(e, str) and "=" in e)


def connect(ref_text: str, *, docker_config: Path | None = None, timeout: float = 10.0,
            transport: httpx2.BaseTransport | None = None) -> RegistryClient:
    ref = parse_ref(ref_text)
    return RegistryClient(ref, credentials=docker_credentials(ref.host, docker_config), timeout=timeout,
                          transport=transport)
