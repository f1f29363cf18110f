"""An API server's error answer as one typed, one-line error: its status as the error's class
(gpualign.base.errors.ApiError), and for a 403 the RBAC rule that would allow the request.

The rule is read from the request the way the API server's authorizer reads it: the path gives the API group, the
resource (and subresource), the name and the namespace; the method and a watch parameter give the verb (a GET of a
collection is `list`, of one object `get`; POST `create`; DELETE of a collection `deletecollection`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gpualign.base.errors import ApiError, Forbidden, api_error

ROLES = "deploy/cli/"  # the ClusterRoles shipped for each command


class Response(Protocol):
    """What callers read of an answer, from either transport (the standard library's reads, httpx2's writes)."""

    @property
    def status_code(self) -> int: ...
    @property
    def content(self) -> bytes: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


def rbac_rule(method: str, path: str, params: Mapping[str, Any] | None = None) -> str:
    """The RBAC rule (and its scope) that allows `method path`, as a Role or ClusterRole would write it."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return f'nonResourceURLs: ["{path}"], verbs: ["{method.lower()}"]'
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watching = str((params or {}).get("watch", "")).lower() in ("true", "1")
    verb = "watch" if watching else {
        "GET": "get" if name else "list", "HEAD": "get" if name else "list", "POST": "create", "PUT": "update",
        "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}.get(method.upper(), method.lower())
    scope = f"in namespace {namespace} (a Role there, or a ClusterRole bound there)" if namespace else \
        "cluster-wide (a ClusterRole and its ClusterRoleBinding)"
    named = f', resourceNames: ["{name}"]' if name and verb not in ("create", "list", "watch") else ""
    return f'apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]{named}, {scope}'


def refused(verb: str, path: str, server: str, resp: Response, params: Mapping[str, Any] | None = None) -> ApiError:
    """`verb path on server` answered with an error: Forbidden (403) naming the rule that allows it, else the
    ApiError of its status."""
    if resp.status_code == 403:
        return Forbidden(f"{verb} {path} on {server}: forbidden (HTTP 403): {status_message(resp)} (RBAC allows it "
                         f"with a rule {rbac_rule(verb, path, params)}; gpualign's roles for each command: {ROLES})")
    return api_error(resp.status_code, f"{verb} {path} on {server}: HTTP {resp.status_code}: {status_message(resp)}")


def status_message(resp: Response) -> str:
    """The message of a Kubernetes Status body, else the body's start."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(data, dict) and data.get("kind") == "Status":
        return str(data.get("message") or data.get("reason") or "")
    return ""
