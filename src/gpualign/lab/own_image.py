"""gpualign's own container image in the lab: pushed from the local build (`make image`) to the lab registry, and the
Helm chart's values that run it on the lab's real node.

The image lives in buildah's storage under the cache (scripts/build_image.py builds it there); buildah pushes it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gpualign import __version__
from gpualign.base.errors import LabError
from gpualign.ensure.buildroot import BuildError
from gpualign.ensure.image import buildah
from gpualign.lab import realnode

LOCAL = f"localhost/gpualign:{__version__}"
LOCAL_BUILDER = f"localhost/gpualign-builder:{__version__}"
REPOSITORY = "gpualign"
BUILDER_REPOSITORY = "gpualign-builder"  # the chart's default: image.repository with -builder appended


def push(registry: str, *, builder: bool = False) -> str:
    """Push the built image (or the builder image, for build Jobs) to the lab registry; return its reference."""
    local, repo = (LOCAL_BUILDER, BUILDER_REPOSITORY) if builder else (LOCAL, REPOSITORY)
    try:
        if local not in buildah("images", "--format", "{{.Name}}:{{.Tag}}").split():
            raise LabError(f"gpualign's image {local} is not built: run `make image` (scripts/build_image.py)")
        ref = f"{registry}/{repo}:{__version__}"
        buildah("push", "--quiet", "--tls-verify=false", local, f"docker://{ref}")
    except BuildError as err:
        raise LabError(f"pushing {local} to the lab registry: {err.message}") from None
    return ref


def chart_values(apiserver: str, registry: str, port: int) -> dict[str, Any]:
    """What the chart needs to run its controller on the lab's real node, and only what differs from a cluster:

    - hostNetwork with the API server's own address: the lab's API server and registry listen on 127.0.0.1, and no
      kube-proxy serves the `kubernetes` Service; listenHost 127.0.0.1 and a free port keep the controller's
      /metrics off the host's network and clear of other labs;
    - the real node's nodeSelector and toleration (its taint keeps the scenarios' workloads off it);
    - one replica: two on one node would share the host port;
    - the lab registry as image repository and ledger;
    - build Jobs (when `builds.enabled` is set) placed on the real node too, with no resource requests (the node
      is the lab machine itself);
    - no build ahead from Debian's archive: the lab's Debian nodes would each have their line's next kernel
      compiled; a test that shows it serves an archive of its own and turns it on."""
    address = urlsplit(apiserver if "://" in apiserver else f"https://{apiserver}")
    host, api_port = address.hostname or "", str(address.port or 443)
    return {
        "image": {"repository": f"{registry}/{REPOSITORY}", "tag": __version__},
        "hostNetwork": True, "apiServer": {"host": host, "port": api_port},
        "listenHost": "127.0.0.1", "servicePort": port, "replicaCount": 1,
        "nodeSelector": {realnode.LABEL: "true"},
        "tolerations": [{"key": realnode.LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        "ledgers": [f"registry://{registry}/nvidia/driver"],
        # the real node is the lab's one machine: its builder and, in the drop-in runs, a GPU node too, so the
        # default affinity off GPU nodes is replaced by one onto it
        "builds": {"nodeSelector": {realnode.LABEL: "true"},
                   "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                       "nodeSelectorTerms": [{"matchExpressions": [
                           {"key": realnode.LABEL, "operator": "In", "values": ["true"]}]}]}}},
                   "tolerations": [{"key": realnode.LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                   "resources": None,  # null: Helm drops the default requests
                   "archive": {"enabled": False}},
    }
