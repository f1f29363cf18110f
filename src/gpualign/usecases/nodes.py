"""Where a use case's nodes come from: a cluster through a kubeconfig, or a dump file. Read once for check, plan and
cuda check, with the record every JSON report carries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpualign.base import labels as L
from gpualign.kube import inventory
from gpualign.usecases.refusals import DumpOrCluster

if TYPE_CHECKING:
    from gpualign.kube.inventory import Inventory, OperatorObjects, OperatorView
    from gpualign.model.dra_devices import GpuDevice
    from gpualign.model.driver_pod_status import DriverPod
    from gpualign.model.facts import NodeFacts

Say = Callable[[str], None]


def quiet(_message: str) -> None:
    """Say nothing (the default of every use case: the caller decides what a user sees)."""


@dataclass
class Read:
    inventory: Inventory
    view: OperatorView | None
    source: dict[str, Any] = field(default_factory=dict)  # {"cluster": {context, server, kubeconfig}} or {"file": …}
    devices: dict[str, list[GpuDevice]] | None = None  # node -> NVIDIA's DRA devices (None: not read, a dump)


@dataclass
class Early:
    """What a cluster's read hands on before its last page of nodes (Reading(stream=True)): the driver pods and the
    GPU Operator's objects as soon as each is read (None at once when it is not to be read), then each page of GPU
    nodes as it is read."""

    pods: Callable[[dict[str, DriverPod] | None], None] | None = None
    objects: Callable[[OperatorObjects | None], None] | None = None
    page: Callable[[list[NodeFacts]], None] | None = None


def read_nodes(nodes_file: Path | None, kubeconfig: str | None, context: str | None, selector: str | None, *,
               with_pods: bool = True, with_operator: bool = False, timeout: float | None = None,
               say: Say = quiet, warn: Say = quiet, connected: Callable[[], None] | None = None,
               early: Early | None = None) -> Read:
    """The GPU nodes (and driver pods; and the operator's configuration when asked) from a dump or a cluster.
    timeout bounds each request (kubectl's --request-timeout). say: which file or cluster was read, and how many GPU
    nodes it has; warn: that it has none. connected: called once the cluster's connection is set up (its
    kubeconfig read, its TLS made), as its LISTs are about to go out. early: told what a cluster's read has read
    so far (a dump tells it nothing). A cluster's NVIDIA DRA devices are read beside its nodes: a node without GFD
    labels has its driver there."""
    if nodes_file:
        if kubeconfig or context:
            raise DumpOrCluster("a dump is read, or a cluster, not both")
        inv = inventory.from_file(nodes_file, selector)
        read = Read(inv, None, {"nodes_file": "<stdin>" if str(nodes_file) == "-" else str(nodes_file)})
        say(f"nodes file {read.source['nodes_file']}: {len(inv.nodes)} GPU nodes")
    else:
        from gpualign.kube.client import Kube

        kube = Kube(kubeconfig, context, timeout=timeout)
        if connected is not None:
            connected()
        told = early or Early()
        if not with_pods and told.pods is not None:
            told.pods(None)
        if not with_operator and told.objects is not None:
            told.objects(None)
        try:
            if with_operator:  # the operator's objects need no node to be read: they are read beside the nodes
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(1, thread_name_prefix="gpualign-operator") as pool:
                    objects = pool.submit(inventory.read_operator_objects, kube, daemonsets=True)
                    if told.objects is not None:
                        tell = told.objects
                        objects.add_done_callback(lambda done: done.exception() is None and tell(done.result()))
                    inv = inventory.from_cluster(kube, selector, with_pods=with_pods, each_page=told.page,
                                                 pods_read=told.pods)
                    say(f"context {kube.context or '-'} ({kube.server}): {len(inv.nodes)} GPU nodes")
                    view: inventory.OperatorView | None = inventory.operator_view_of(objects.result(), inv.nodes)
            else:
                inv, view = inventory.from_cluster(kube, selector, with_pods=with_pods, each_page=told.page,
                                                   pods_read=told.pods), None
                say(f"context {kube.context or '-'} ({kube.server}): {len(inv.nodes)} GPU nodes")
        finally:
            kube.close()
        dra = inv.dra
        if dra is not None and dra.note and any(n.driver is None for n in inv.nodes):
            warn(dra.note)
        read = Read(inv, view, {"cluster": kube.describe()}, dra.by_node if dra is not None else None)
    if not inv.nodes:
        warn(no_gpu_nodes(selector))
    return read


class Reading:
    """read_nodes begun in the background, so a cluster's LISTs are on the wire while the caller loads its rules and
    ledgers. A daemon thread: a usage error found meanwhile ends the command at once, never after a timeout. What
    the read would say is kept, and said by result(), in the caller's thread and order.

    The caller should wait_connected() before its own loading: until then both threads would be importing and
    parsing, and with one interpreter lock between them the LISTs would go out later, for no gain.

    stream: the caller may also take the driver pods and the operator's objects as soon as they are read
    (`so_far`), then each page of GPU nodes as it arrives (`pages`), and decide them while the next page is on
    the wire. result() is the whole read all the same."""

    def __init__(self, *args: Any, say: Say = quiet, warn: Say = quiet, stream: bool = False,
                 **kwargs: Any) -> None:
        import queue
        import threading

        self._say, self._warn = say, warn
        self._said: list[tuple[bool, str]] = []
        self._read: Read | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._connected = threading.Event()
        self._pages: queue.SimpleQueue[list[NodeFacts] | None] = queue.SimpleQueue()
        self._pods: list[dict[str, DriverPod] | None] = []  # told once: the driver pods, or None (not read)
        self._objects: list[OperatorObjects | None] = []  # told once: the operator's objects, or None (not read)
        self._early = threading.Condition()

        def got(into: list[Any]) -> Callable[[Any], None]:
            def keep(value: Any) -> None:
                with self._early:
                    into.append(value)
                    self._early.notify_all()
            return keep

        told = Early(got(self._pods), got(self._objects), self._pages.put) if stream else None

        def run() -> None:
            try:
                self._read = read_nodes(*args, say=lambda m: self._said.append((False, m)),
                                        warn=lambda m: self._said.append((True, m)), connected=self._connected.set,
                                        early=told, **kwargs)
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread, which raises it
                self._error = err
            finally:
                self._connected.set()
                with self._early:
                    self._done.set()
                    self._early.notify_all()
                self._pages.put(None)  # after done: whoever reads the last page knows how the read ended

        threading.Thread(target=run, name="gpualign-read", daemon=True).start()

    def so_far(self) -> tuple[dict[str, DriverPod] | None, OperatorObjects | None] | None:
        """(driver pods, the operator's objects), each None when not asked for, once both are told; None when the
        read ended without telling them (it failed, it read a dump, or the Reading does not stream): then only
        result() says what was read."""
        with self._early:
            self._early.wait_for(lambda: self._done.is_set() or bool(self._pods and self._objects))
            if not (self._pods and self._objects):
                return None
            return self._pods[0], self._objects[0]

    def pages(self) -> Iterator[list[NodeFacts]]:
        """Each page of GPU nodes as it is read, until the read ends (however it ends: failed() says); none unless
        the Reading streams."""
        while (page := self._pages.get()) is not None:
            yield page

    def failed(self) -> bool:
        """Whether the read has ended in an error (result() raises it)."""
        return self._done.is_set() and self._error is not None

    def wait_connected(self, timeout: float = 5.0) -> None:
        """Until the cluster's connection is set up (or the read has ended, or `timeout`: it never holds the caller
        longer)."""
        self._connected.wait(timeout)

    def result(self) -> Read:
        self._done.wait()
        for warning, message in self._said:
            (self._warn if warning else self._say)(message)
        if self._error is not None:
            raise self._error
        assert self._read is not None
        return self._read


def no_gpu_nodes(selector: str | None) -> str:
    where = f" match -l {selector!r}" if selector else ""
    return (f"no GPU nodes{where} (nodes labelled nvidia.com/gpu.present=true or with NFD's NVIDIA PCI label "
            "feature.node.kubernetes.io/pci-10de.present=true, or running a GPU Operator driver pod)")


def gpu_node_names(kubeconfig: str | None = None, context: str | None = None, timeout: float = 2.0) -> list[str]:
    """The GPU nodes' names, sorted: one metadata-only LIST (what the shell's completion offers)."""
    from gpualign.kube.client import Kube  # the cluster client, not loaded for a dump's check

    with Kube(kubeconfig, context, timeout=timeout) as kube:
        return sorted(n["metadata"]["name"] for n in kube.nodes(f"{L.GPU_PRESENT}=true", metadata_only=True))
