"""Start, watch and stop the lab's plain processes, by pid, with their logs in the lab's state directory."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from gpualign.base.errors import LabError

LOG_TAIL = 8
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # processes started by this very process, by pid


class ExitedAtStart(LabError):
    """A process the lab started exited before it was ready (`name`: which one)."""

    def __init__(self, name: str, message: str, *, detail: str | None = None) -> None:
        super().__init__(message, detail=detail)
        self.name = name

    @property
    def port_taken(self) -> bool:
        """Its log's last lines say its port was bound by another process first (a port chosen free earlier): the
        kernel's EADDRINUSE, as Go ("bind: address already in use") or C ("Address already in use") words it."""
        return "address already in use" in (self.detail or "").lower()


@dataclass
class Proc:
    """One running component, as recorded in the lab's state file."""

    name: str
    pid: int
    exe: str
    log: str
    started: float
    address: str = ""
    argv: list[str] | None = None
    boot_ticks: int | None = None  # /proc/<pid>/stat starttime: with the pid, names this process uniquely
    env: dict[str, str] | None = None  # variables set on top of the caller's environment (kept for restarts)

    def alive(self) -> bool:
        """True if the pid is still the very process we started: pids are reused, so the kernel's start time and
        the executable must both match. Nothing else is ever signalled.

        A process this Python process started is asked directly (waitpid), which cannot be fooled; /proc is read
        only for processes an earlier command started (`lab up` exits, `lab down` comes later).
        """
        child = _CHILDREN.get(self.pid)
        if child is not None:
            return child.poll() is None
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] == "Z":
            return False
        if self.boot_ticks is not None and int(fields[19]) != self.boot_ticks:
            return False
        return os.path.basename(cmdline[0].decode(errors="replace")) == os.path.basename(self.exe)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def log_tail(path: str | Path, lines: int = LOG_TAIL) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def free_port() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range: a port from that range, free when chosen, can be
    taken as the source port of any outgoing connection before the component binds it ("bind: address already in
    use")."""
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(200):
            port = random.randrange(10000, low)
            if not port_in_use(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def listens_on(pid: int, port: int) -> bool:
    """Whether the process itself holds a listening TCP socket on the port: one of its open files is a socket the
    kernel lists as LISTEN on that port. Read from /proc (the lab runs only on Linux), which no library in
    gpualign's dependencies reads for another process's sockets."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd) in inodes:
                return True
    return False


_LISTEN = "0A"  # TCP_LISTEN, as /proc/net/tcp writes a socket's state


def _listening_inodes(port: int) -> set[str]:
    """The sockets listening on the port, as the links a process's /proc/PID/fd entries name them."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(f"socket:[{fields[9]}]")
    return found


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def start(name: str, argv: list[str], log: Path, *, env: dict[str, str] | None = None,
          address: str = "", exe: str | None = None) -> Proc:
    """Start argv detached (own session, so `lab up` may exit), output appended to log. env: variables added to
    this process's environment. exe: the program the
    process ends up as, when argv[0] is a launcher that execs it (the operator under unshare)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, **env} if env else None,
                                     close_fds=True)
        except OSError as err:
            raise LabError(f"{name}: cannot start {argv[0]}: {err.strerror}") from None
    _CHILDREN[popen.pid] = popen
    return Proc(name=name, pid=popen.pid, exe=exe or argv[0], log=str(log), started=time.time(), address=address,
                argv=list(argv), boot_ticks=_start_ticks(popen.pid), env=dict(env) if env else None)


def _start_ticks(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def wait_until(proc: Proc, ready: Callable[[], bool], *, timeout: float, what: str, port: int | None = None) -> None:
    """Poll ready() until true; fail at once, with the log tail, if the process dies first.

    port: ready() asks a server on 127.0.0.1:port, and counts only once this very process listens there. Until it
    has bound the port, a probe may be answered by whatever else holds it (another lab's component, started
    beside this one, on the same port), and that answer proves nothing about this process."""
    deadline = time.monotonic() + timeout
    while True:
        if not proc.alive():
            _reap(proc.pid)
            raise ExitedAtStart(proc.name, f"{proc.name} exited at start; log: {proc.log}", detail=log_tail(proc.log))
        try:
            if (port is None or listens_on(proc.pid, port)) and ready():
                return
        except Exception:  # noqa: BLE001 - any failure of a probe only means "not ready yet"
            pass
        if time.monotonic() > deadline:
            raise LabError(f"{proc.name} not {what} after {timeout:.0f}s; log: {proc.log}",
                           detail=log_tail(proc.log))
        time.sleep(0.2)


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        child.poll()
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(proc: Proc, *, grace: float = 5.0) -> bool:
    """SIGTERM the process group, then SIGKILL after grace seconds. Returns True if something was stopped."""
    if not proc.alive():
        return False
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(proc.pid)
            if not proc.alive():
                return True
            time.sleep(0.05)
    return True
