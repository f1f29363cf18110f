"""The lab's real node is refused only for a kubelet that is really there: a device-plugin socket left by a kubelet
that was killed before it could remove it holds nothing back."""

from __future__ import annotations

import socket

from gpualign.lab.realnode import kubelet_listening


def test_a_socket_nothing_listens_on_is_a_dead_kubelets_and_is_removed(tmp_path):
    sock = tmp_path / "kubelet.sock"
    assert not kubelet_listening(sock)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()  # the file stays; nothing listens
    assert sock.exists() and not kubelet_listening(sock) and not sock.exists()
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(sock))
    live.listen()
    try:
        assert kubelet_listening(sock) and sock.exists()
    finally:
        live.close()
