"""The one door to the Kubernetes API server. Nothing else imports lightkube.

Objects cross this door as plain dicts, the same shape `kubectl get -o json` prints, so the core reads a live
cluster and a `--nodes-file` dump the same way. Reads go over `reads` (the standard library's HTTP client);
writes, server-side apply and watches through lightkube, which is imported only when one is first made.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import orjson

from gpualign import __version__
from gpualign.base.collector import held_off
from gpualign.base.errors import BadInput, Conflict, Unreachable, api_error
from gpualign.base.json_types import JSON
from gpualign.base.transport import FailureKind, TransportFailure
from gpualign.kube import kubeconfig as kc
from gpualign.kube import reads
from gpualign.kube.refusals import Response, refused
from gpualign.kube.refusals import status_message as _status_message

if TYPE_CHECKING:
    import httpx2
    from lightkube import Client

    from gpualign.kube.kubeconfig import Picked

PAGE = 500  # the first page of a LIST, as kubectl's chunks
# Later pages are sized from the first one's bytes per object to about this much: a 5,000-node metadata LIST is
# three requests, not ten (each costs the API server a round of its own), and no page of large objects grows past
# it. Between PAGE_MIN and PAGE_MAX objects.
PAGE_BYTES = 8 << 20
# Pages a caller decides as each arrives (check's GPU nodes) are smaller: deciding one page (~25 us a node) then
# overlaps the API server making the next, and the last page, decided after the LIST ends, is short.
DECIDED_PAGE_BYTES = 2 << 20
PAGE_MIN, PAGE_MAX = 50, 5000
# A request whose connection nothing answered (refused, no such name, no route) is tried again this many times (0.1,
# 0.2, 0.4 s apart): an API server that is not there is said so within a second. Any request, write or read, whose
# connection broke while it was being made (reset in its TLS handshake) was never sent, and a GET cut once it was
# (a reset, a body cut short) is a read: both are tried again up to ten times, as client-go retries a GET on a reset
# connection, 0.1 s doubling up to 1 s apart (about 7.5 s in all): on a link that resets a fifth of new connections
# and cuts a third of the large answers, three quick tries were not always enough. A write cut once sent is not
# replayed here: whether it took effect is for its caller to find out.
RETRIES_ON_CONNECT = 3
RETRIES_ON_RESET = 10
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


def _check_tls_files(picked: Picked) -> None:
    """Certificate files the chosen context names must exist, be non-empty and be PEM."""
    for what, file in (("certificate-authority", picked.cluster.get("certificate-authority")),
                       ("client-certificate", picked.user.get("client-certificate")),
                       ("client-key", picked.user.get("client-key"))):
        if not file:
            continue
        try:
            head = Path(str(file)).read_bytes()[:4096]
        except FileNotFoundError:
            raise BadInput(f"kubeconfig {picked.where}: {what} {file} does not exist") from None
        except OSError as err:
            raise BadInput(f"kubeconfig {picked.where}: {what} {file}: cannot read: {err.strerror}") from None
        if not head.strip():
            raise BadInput(f"kubeconfig {picked.where}: {what} {file} is empty")
        if b"-----BEGIN " not in head:
            raise BadInput(f"kubeconfig {picked.where}: {what} {file} is not PEM")


def _httpx_failure(err: Exception) -> TransportFailure:
    """An httpx2 error as the same Failure the reads raise."""
    import httpx2

    detail = str(err) or err.__class__.__name__
    if isinstance(err, httpx2.TimeoutException):
        step = "connecting" if isinstance(err, httpx2.ConnectTimeout) else \
            "sending the request" if isinstance(err, httpx2.WriteTimeout) else "waiting for its answer"
        return TransportFailure(FailureKind.TIMEOUT, detail, step)
    if isinstance(err, httpx2.ConnectError):
        return TransportFailure(FailureKind.CONNECT, detail, refused=reads.nobody_there(err))
    if isinstance(err, (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError)):
        return TransportFailure(FailureKind.CUT, detail)
    return TransportFailure(FailureKind.OTHER, detail)


def retries(err: TransportFailure, is_read: bool) -> int:
    """How many times a request that failed so is tried again in all: a connection nothing answered a few times,
    one that broke before the request was sent (for any request) or a read cut on its way (never a write)."""
    if err.kind == FailureKind.CONNECT:
        return RETRIES_ON_CONNECT if err.refused else RETRIES_ON_RESET
    if err.kind == FailureKind.CUT and is_read:
        return RETRIES_ON_RESET
    return 0


@dataclass
class EvictionResult:
    """What the Eviction API answered for one pod."""

    pod: str
    status: int
    message: str

    @property
    def evicted(self) -> bool:
        return self.status in (200, 201, 404)  # 404: already gone, as kubectl drain counts it

    @property
    def refused(self) -> bool:
        return self.status == 429


DEFAULT_TIMEOUT = 30.0  # seconds per request, unless --request-timeout says otherwise


class Kube:
    """A connection to one cluster: raw JSON reads, server-side apply, patches, evictions and watches."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *, timeout: float | None = None,
                 field_manager: str = "gpualign") -> None:
        """timeout: seconds per request (--request-timeout); None: DEFAULT_TIMEOUT."""
        timeout = timeout or DEFAULT_TIMEOUT
        files = kc.files_to_read(kubeconfig)
        self.kubeconfig = ":".join(str(f) for f in files) or None
        if files:
            merged = kc.merge(files)
            try:
                picked = kc.pick(merged, context)
            except (AttributeError, TypeError) as err:  # entries of the wrong shape
                raise BadInput(f"kubeconfig {merged.context_file(context)}: not a usable kubeconfig: {err}") from None
        else:
            if context:
                raise kc.NoKubeconfig(context)
            found = kc.in_cluster()
            if found is None:
                raise kc.NoKubeconfig(None)
            picked = found
        self._picked = picked
        self.context: str = picked.context
        self.server = picked.server
        self.field_manager = field_manager
        self.timeout = timeout
        _check_tls_files(picked)
        try:
            tls = reads.tls_context(picked.cluster, picked.user) if self.server.startswith("https:") else None
        except (ssl.SSLError, OSError, ValueError) as err:
            raise BadInput(f"kubeconfig {picked.where}: its TLS material is unusable: {err}") from None
        # Our requests are recognisable in the API server's audit log (the tests check every pod removal there).
        self._headers = {"User-Agent": f"{field_manager}/{__version__}"}
        # kubeconfig's `disable-compression: true` (the cluster entry's, as kubectl reads it): on a fast link the API
        # server's gzip costs more than it saves, and a large LIST's bytes are read as they are sent.
        self._headers["Accept-Encoding"] = "identity" if picked.cluster.get("disable-compression") is True \
            else "gzip"
        self._client: Client | None = None
        self._client_lock = threading.Lock()
        self._reads: reads.Reader | None = None
        if picked.needs_plugin:  # credentials from a program: every request goes through lightkube, made now
            self._lightkube()
        else:
            try:
                self._reads = reads.Reader(self.server, tls, picked.user, timeout=timeout, headers=self._headers)
            except ValueError as err:
                raise BadInput(f"kubeconfig {picked.where}: {err}") from None

    def _lightkube(self) -> Client:
        """lightkube's client for the same context, made at the first write or watch."""
        with self._client_lock:
            if self._client is not None:
                return self._client
            import httpx2
            from lightkube import Client
            from lightkube.config.kubeconfig import KubeConfig
            from lightkube.core.exceptions import ConfigError

            picked = self._picked
            where = picked.where
            conf = {"clusters": [{"name": "c", "cluster": picked.cluster}],
                    "users": [{"name": "u", "user": picked.user}],
                    "contexts": [{"name": picked.context, "context": {"cluster": "c", "user": "u"}}],
                    "current-context": picked.context}
            try:
                config = KubeConfig.from_dict(conf).get()
                client = Client(config=config, timeout=httpx2.Timeout(self.timeout), field_manager=self.field_manager,
                                trust_env=False)
            except ConfigError as err:
                raise BadInput(f"kubeconfig {where}: {err}") from None
            except (ssl.SSLError, OSError, ValueError) as err:
                raise BadInput(f"kubeconfig {where}: its TLS material is unusable: {err}") from None
            except (AttributeError, TypeError) as err:
                raise BadInput(f"kubeconfig {where}: not a usable kubeconfig: {err}") from None
            client._client._client.headers.update(self._headers)
            self._client = client
            return client

    def failed(self, err: TransportFailure) -> str:
        """A transport failure in words: a timeout is a server that did not answer in time (it may well be up),
        anything else one that could not be reached."""
        if err.kind == FailureKind.TIMEOUT:
            return f"API server {self.server} did not answer within {self.timeout:g}s ({err.step})"
        return f"API server {self.server} unreachable: {err.detail}"

    def describe(self) -> dict[str, str | None]:
        """Which cluster this is, for reports: the context, its server, and the kubeconfig file(s) read."""
        return {"context": self.context, "server": self.server, "kubeconfig": self.kubeconfig}

    # -- raw JSON -----------------------------------------------------------------------------------------------
    @property
    def _http(self) -> httpx2.Client:
        # lightkube's own configured HTTP client (TLS, auth, base URL), for writes and watches.
        return self._lightkube()._client._client

    def _send(self, method: str, path: str, params: dict[str, Any] | None, body: Any, content_type: str,
              accept: str) -> Response:
        import httpx2

        headers = {"Accept": accept}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        try:
            return self._http.request(method, path, params=params, content=content, headers=headers)
        except httpx2.HTTPError as err:
            raise _httpx_failure(err) from None

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", accept: str = "application/json") -> Response:
        # A request never sent (its connection not made) is tried again, and so is a read cut by a reset connection
        # (a load balancer dropping it, a flaky link), as client-go retries GETs on a connection reset; a write cut
        # once sent is not replayed here: its caller decides.
        is_read = method in ("GET", "HEAD")
        attempt = 0
        while True:
            try:
                if is_read and self._reads is not None:
                    return self._reads.get(path, params=params, accept=accept, method=method)
                return self._send(method, path, params, body, content_type, accept)
            except TransportFailure as err:
                if attempt < retries(err, is_read):
                    time.sleep(min(1.0, 0.1 * 2 ** attempt))
                    attempt += 1
                    continue
                raise Unreachable(self.failed(err)) from None

    def get_json(self, path: str, *, params: dict[str, Any] | None = None, accept: str = "application/json") -> JSON:
        resp = self.request("GET", path, params=params, accept=accept)
        if resp.status_code >= 400:
            raise refused("GET", path, self.server, resp)
        # orjson: LIST pages of thousands of objects (managedFields included) parse several times faster than json
        return orjson.loads(resp.content)  # type: ignore[no-any-return]

    def _page(self, path: str, params: dict[str, Any], accept: str) -> bytes:
        resp = self.request("GET", path, params=params, accept=accept)
        if resp.status_code >= 400:
            raise refused("GET", path, self.server, resp)
        return resp.content

    def list_pages(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                   metadata_only: bool = False, limit: int = PAGE, page_bytes: int | None = PAGE_BYTES,
                   decode: Callable[[bytes], list[Any]] | None = None) -> Iterator[list[Any]]:
        """LIST, one page of items at a time as plain dicts (or as `decode` reads a page's body into its items).
        The next page is asked for as soon as this one has arrived (its continue token is read from the head of
        the body) and is on the wire while this one is parsed and read: a large LIST costs its transfer, not its
        transfer plus its parsing. The first page holds `limit` objects; each next one as many as make about
        `page_bytes` at the size of the objects so far (None: `limit` each)."""
        params: dict[str, Any] = {"limit": limit}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        accept = METADATA_ONLY if metadata_only else "application/json"
        from concurrent.futures import Future, ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="gpualign-list") as pool:
            pending: Future[bytes] | None = pool.submit(self._page, path, dict(params), accept)
            while pending is not None:
                body = pending.result()
                pending = None
                token = continue_token(body)
                if token is None:  # not found in the head (an unusual serializer): the parsed page says
                    token = (orjson.loads(body).get("metadata") or {}).get("continue")
                if token:
                    if page_bytes:  # a page with more to come holds `limit` objects
                        params["limit"] = max(PAGE_MIN, min(PAGE_MAX, page_bytes * params["limit"] // len(body)))
                    pending = pool.submit(self._page, path, {**params, "continue": token}, accept)
                with held_off():
                    items = decode(body) if decode else orjson.loads(body).get("items") or []
                del body
                yield items

    def list_raw(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                 metadata_only: bool = False) -> list[JSON]:
        """LIST with pagination, as plain dicts (items keep their `kind`/`apiVersion` like kubectl's output)."""
        items: list[JSON] = []
        for page in self.list_pages(path, label_selector=label_selector, field_selector=field_selector,
                                    metadata_only=metadata_only):
            items.extend(page)
        return items

    def nodes(self, label_selector: str | None = None, *, metadata_only: bool = False) -> list[JSON]:
        return self.list_raw("/api/v1/nodes", label_selector=label_selector, metadata_only=metadata_only)

    def pods(self, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None) -> list[JSON]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return self.list_raw(path, label_selector=label_selector, field_selector=field_selector)

    def get(self, path: str) -> JSON | None:
        resp = self.request("GET", path)
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise refused("GET", path, self.server, resp)
        return resp.json()  # type: ignore[no-any-return]

    # -- writes -------------------------------------------------------------------------------------------------
    def apply(self, obj: JSON, *, force: bool = True) -> JSON:
        """Server-side apply of one manifest dict (any built-in kind lightkube knows)."""
        import httpx2
        from lightkube import codecs
        from lightkube.core.exceptions import ApiError

        client = self._lightkube()
        resource = codecs.from_dict(obj)
        try:
            result = client.apply(resource, field_manager=self.field_manager, force=force)
        except ApiError as err:
            name = (obj.get("metadata") or {}).get("name")
            raise BadInput(f"apply {obj.get('kind')}/{name}: {err.status.message}") from None
        except httpx2.HTTPError as err:
            raise Unreachable(self.failed(_httpx_failure(err))) from None
        return result.to_dict()  # type: ignore[no-untyped-call,no-any-return]

    def apply_at(self, path: str, obj: JSON) -> JSON:
        """Server-side apply of any object, custom resources included, at its named path
        (e.g. /apis/nvidia.com/v1/clusterpolicies/cluster-policy)."""
        resp = self.request("PATCH", path, body=obj, content_type="application/apply-patch+yaml",
                            params={"fieldManager": self.field_manager, "force": "true"})
        if resp.status_code >= 400:
            raise BadInput(f"apply {obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}: "
                           f"HTTP {resp.status_code}: {_status_message(resp)}")
        return resp.json()  # type: ignore[no-any-return]

    def patch(self, path: str, patch: JSON, *, kind: str = "merge") -> JSON:
        """PATCH; a resourceVersion in a merge patch's metadata is a precondition (409 → Conflict)."""
        ctype = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        resp = self.request("PATCH", path, body=patch, content_type=ctype)
        if resp.status_code == 409:
            raise Conflict(f"PATCH {path}: conflict: {_status_message(resp)}")
        if resp.status_code >= 400:
            raise refused("PATCH", path, self.server, resp)
        return resp.json()  # type: ignore[no-any-return]

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> JSON:
        return self.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})

    def delete(self, path: str, *, grace_seconds: int | None = None) -> int:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds} \
            if grace_seconds is not None else None
        return self.request("DELETE", path, body=body).status_code

    def evict(self, namespace: str, pod: str) -> EvictionResult:
        """POST a policy/v1 Eviction. 429 means a PDB (or rate limiting) refused; 404 means already gone."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace}}
        resp = self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)
        return EvictionResult(pod=f"{namespace}/{pod}", status=resp.status_code, message=_status_message(resp))

    def event(self, node: JSON, reason: str, message: str, *, warning: bool = True,
              component: str = "gpualign", name: str | None = None) -> None:
        """A core/v1 Event on a Node (in `default`, where node events live), as kubectl describe node shows. With a
        name, the Event is made at most once: a second POST of it (a retry whose first answer was lost) finds it
        there (409) and counts as done."""
        now = _now()
        meta = node["metadata"]
        naming = {"name": name} if name else {"generateName": f"{meta['name']}."}
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {**naming, "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                   "uid": meta.get("uid", "")},
                "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
                "source": {"component": component}, "reportingComponent": component,
                "reportingInstance": component, "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        resp = self.request("POST", "/api/v1/namespaces/default/events", body=body)
        if resp.status_code == 409 and name:
            return  # made by the earlier attempt
        if resp.status_code >= 400:
            raise api_error(resp.status_code, f"creating event on node {meta['name']}: HTTP {resp.status_code}: "
                            f"{_status_message(resp)}")

    # -- watches ------------------------------------------------------------------------------------------------
    def watch_raw(self, path: str, *, label_selector: str | None = None, resource_version: str | None = None,
                  timeout_seconds: int = 60, metadata_only: bool = False,
                  field_selector: str | None = None) -> Iterator[tuple[str, JSON]]:
        """One watch request: yields (type, object) until the server closes it. An ERROR event (410 Gone after
        compaction, for one) is yielded as is: the caller lists again."""
        params: dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds,
                                  "allowWatchBookmarks": "true"}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version:
            params["resourceVersion"] = resource_version
        import httpx2

        headers = {"Accept": METADATA_ONLY.replace("PartialObjectMetadataList", "PartialObjectMetadata")
                   if metadata_only else "application/json"}
        req = self._http.build_request("GET", path, params=params, headers=headers,
                                       timeout=httpx2.Timeout(10.0, read=timeout_seconds + 10))
        try:
            resp = self._http.send(req, stream=True)
        except httpx2.HTTPError as err:
            raise Unreachable(self.failed(_httpx_failure(err))) from None
        try:
            if resp.status_code >= 400:
                resp.read()
                raise api_error(resp.status_code, f"WATCH {path}: HTTP {resp.status_code}: {_status_message(resp)}")
            for line in resp.iter_lines():
                if line:
                    try:
                        event = json.loads(line)
                    except ValueError:  # a stream cut inside an event: the caller resumes from the last one
                        raise Unreachable(f"watch {path} broken inside an event") from None
                    yield event["type"], event["object"]
        except httpx2.HTTPError as err:
            raise Unreachable(f"watch {path} broken: {err}") from None
        finally:
            resp.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()
        if self._client is not None:
            self._client.close()


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_CONTINUE = re.compile(rb'"continue":"([^"\\]*)"')


def continue_token(body: bytes) -> str | None:
    """The continue token of a LIST page, read from the list's metadata, which the API server writes before its
    items. "" when the page is the last; None when the head does not say (then the parsed page does)."""
    head_end = body.find(b'"items":')
    head = body[:head_end] if head_end >= 0 else b""
    if b'"metadata":' not in head:
        return None
    found = _CONTINUE.search(head)
    return found.group(1).decode() if found else ""
