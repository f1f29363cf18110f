"""kubeconfig files read and merged as kubectl reads them (client-go's loading rules), as plain dicts.

- `--kubeconfig FILE` names the only file read.
- Otherwise `$KUBECONFIG` is a list of paths (':'-separated); files that do not exist are skipped. The files are
  merged: for clusters, contexts and users, the first file that defines a name wins; so does the first file that sets
  current-context. So `--context` can name a context from any file of the list.
- Otherwise ~/.kube/config, if it exists; else none (the caller falls back to the in-cluster service account).

Relative file references (certificate-authority, client-certificate, client-key, tokenFile) are resolved against the
directory of the file that holds them before merging, as client-go resolves them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpualign.base import yamlio
from gpualign.base.errors import BadInput

SECTIONS = {"clusters": "cluster", "contexts": "context", "users": "user"}
_FILE_KEYS = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


class NoKubeconfig(BadInput):
    """No kubeconfig to read: none named, no $KUBECONFIG, no ~/.kube/config, and not a pod with a service account.
    `context`: the context asked for, when one was."""

    def __init__(self, context: str | None) -> None:
        super().__init__(f"context {context}: no kubeconfig to read it from" if context else
                         "no kubeconfig ($KUBECONFIG is not set, there is no ~/.kube/config, and this is not a pod "
                         "with a service account)")
        self.context = context


class NoCurrentContext(BadInput):
    """The kubeconfig names no current-context, and none was asked for: `known` lists its contexts."""

    def __init__(self, where: str, known: str) -> None:
        super().__init__(f"kubeconfig {where}: no current-context is set (known: {known})")
        self.where, self.known = where, known


@dataclass
class Merged:
    """The merged kubeconfig, and which file each named entry came from (for messages that name the file)."""

    config: dict[str, Any]
    files: list[Path]
    origin: dict[tuple[str, str], Path] = field(default_factory=dict)

    def context_file(self, context: str | None) -> Path:
        name = context or self.config.get("current-context") or ""
        return self.origin.get(("contexts", name), self.files[0])

    def describe(self) -> str:
        return self.files[0].as_posix() if len(self.files) == 1 else ":".join(f.as_posix() for f in self.files)


def files_to_read(explicit: str | None, env: str | None = None, home: Path | None = None) -> list[Path]:
    """The kubeconfig files to merge, in precedence order; [] means in-cluster."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise BadInput(f"kubeconfig {path} does not exist")
        return [path]
    env = os.environ.get("KUBECONFIG") if env is None else env
    if env:
        listed = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
        found = list(dict.fromkeys(p for p in listed if p.exists()))
        if listed and not found:
            raise BadInput(f"kubeconfig: no file of $KUBECONFIG exists ({env})")
        return found
    default = (home or Path.home()) / ".kube" / "config"
    return [default] if default.exists() else []


def read_file(path: Path) -> dict[str, Any]:
    """One file as a kubeconfig mapping, or a one-line BadInput naming it: unreadable, not UTF-8, not YAML, empty,
    not a mapping, or with clusters/contexts/users that are not lists of named entries."""
    try:
        data = yamlio.read(path, as_kubectl=True)
    except BadInput as err:  # "PATH[:LINE]: what is wrong", from the one YAML reader
        raise BadInput(f"kubeconfig {err.message}") from None
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise BadInput(f"kubeconfig {path}: not a kubeconfig ({what}; expected a mapping with clusters, contexts and "
                       "users)")
    for key, inner in SECTIONS.items():
        entries = data.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
            raise BadInput(f"kubeconfig {path}: {key} must be a list of entries with a name")
        if not all(isinstance(e.get(inner, {}), dict) for e in entries):
            raise BadInput(f"kubeconfig {path}: each of {key} must hold a '{inner}' mapping")
    for entry in data.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        for key in BOOLEANS:
            if key in cluster:
                cluster[key] = _boolean(cluster[key], path, key)
    return data


BOOLEANS = ("insecure-skip-tls-verify", "disable-compression")  # a cluster's boolean fields gpualign reads
YAML_11_TRUE, YAML_11_FALSE = ("true", "yes", "on", "y"), ("false", "no", "off", "n")


def _boolean(value: Any, path: Path, key: str) -> bool:
    """A boolean field as Kubernetes' YAML reader (go-yaml v2, YAML 1.1) takes it: `yes`/`on` true, `no`/`off`
    false; anything else is named in one line, as kubectl refuses it."""
    if isinstance(value, bool):
        return value
    word = str(value).lower() if isinstance(value, str) else None
    if word in YAML_11_TRUE:
        return True
    if word in YAML_11_FALSE:
        return False
    raise BadInput(f"kubeconfig {path}: {key}: {value!r} is not a boolean (true or false)")


def _absolutize(data: dict[str, Any], base: Path) -> None:
    for key, inner in (("clusters", "cluster"), ("users", "user")):
        for entry in data.get(key) or []:
            body = entry.get(inner) or {}
            for file_key in _FILE_KEYS[inner]:
                value = body.get(file_key)
                if isinstance(value, str) and value and not os.path.isabs(os.path.expanduser(value)):
                    body[file_key] = str(base / value)


def merge(files: list[Path]) -> Merged:
    """Read and merge the files by kubectl's rules (first definition of a name wins; first current-context wins)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}
    result = Merged(merged, list(files))
    for path in files:
        data = read_file(path)
        _absolutize(data, path.resolve().parent)
        if not merged.get("current-context") and data.get("current-context"):
            merged["current-context"] = data["current-context"]
        for key in SECTIONS:
            for entry in data.get(key) or []:
                name = str(entry["name"])
                if (key, name) not in result.origin:
                    result.origin[(key, name)] = path
                    merged[key].append(entry)
    return result


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class Picked:
    """One context resolved: its name, the cluster and user entries it refers to (file paths absolute), and the file
    a message about it names."""

    context: str
    cluster: dict[str, Any]
    user: dict[str, Any]
    where: str

    @property
    def server(self) -> str:
        return str(self.cluster["server"])

    @property
    def needs_plugin(self) -> bool:
        """A user whose credentials come from a program (exec) or an auth provider."""
        return bool(self.user.get("exec") or self.user.get("auth-provider"))


def _entry(merged: Merged, section: str, name: object) -> dict[str, Any] | None:
    for entry in merged.config.get(section) or []:
        if entry.get("name") == name:
            return dict(entry.get(SECTIONS[section]) or {})
    return None


def pick(merged: Merged, context: str | None) -> Picked:
    """The context to use (the named one, else the current one) with its cluster and user, or a one-line BadInput
    naming the file: no context chosen, a context that is not there, one naming an undefined cluster or user, a
    cluster with no server."""
    where = str(merged.context_file(context))
    name = context or merged.config.get("current-context")
    known = ", ".join(sorted(n for k, n in merged.origin if k == "contexts")) or "none"
    if not name:
        raise NoCurrentContext(merged.describe(), known)
    ctx = _entry(merged, "contexts", name)
    if ctx is None:
        raise BadInput(f"kubeconfig {merged.describe()}: no context {name!r} (known: {known})")
    named = context or "the current context"
    cluster = _entry(merged, "clusters", ctx.get("cluster"))
    user = _entry(merged, "users", ctx.get("user")) if ctx.get("user") else {}
    if cluster is None or user is None:
        missing = ctx.get("cluster") if cluster is None else ctx.get("user")
        raise BadInput(f"kubeconfig {where}: {named} refers to {missing!r}, which no cluster or user entry defines")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise BadInput(f"kubeconfig {where}: cluster {ctx.get('cluster')!r} has no server")
    return Picked(str(name), cluster, user, where)


def in_cluster(account: Path | None = None, env: dict[str, str] | None = None) -> Picked | None:
    """The pod's own service account, as client-go's in-cluster config reads it (the token file is read again when
    it changes, so kubelet's rotation is followed); None outside a pod."""
    account = account or SERVICE_ACCOUNT
    env = dict(os.environ) if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token = account / "token"
    if not host or not port or not token.is_file():
        return None
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return Picked("in-cluster", {"server": f"https://{host}:{port}", "certificate-authority": str(account / "ca.crt")},
                  {"tokenFile": str(token)}, "in-cluster service account")
