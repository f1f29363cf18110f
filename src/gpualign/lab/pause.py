"""The real node's pause image, made locally: every pod sandbox needs one, and registry.k8s.io is not reachable.

The program is the pause container's whole job (hold the sandbox's namespaces, reap children, exit on a signal),
compiled statically with the host's C compiler. The image is an OCI archive written here, because no tool on the
host makes a one-file scratch image without a storage setup of its own (buildah needs one, and root-only at that);
its format is small and fixed: one layer, one config, one manifest, one index. The archive is cached by the hash of
the program's source, so it is compiled once per machine.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from gpualign.base.cache import cache_root
from gpualign.base.errors import LabError
from gpualign.model import oci
from gpualign.model.image_ref import digest_hex, tag_of

IMAGE = "gpualign.local/lab/pause:1"

SOURCE = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, 0); sigaction(SIGTERM, &q, 0); sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
"""


def archive(cache: Path | None = None) -> Path:
    """The cached OCI archive of the pause image, built when missing."""
    key = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    path = (cache or cache_root() / "lab") / f"pause-{key}.oci.tar"
    if path.exists():
        return path
    if shutil.which("gcc") is None:
        raise LabError("gcc not found: the real node's pause image is compiled locally (apt-get install gcc libc6-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        src, binary = Path(tmp) / "pause.c", Path(tmp) / "pause"
        src.write_text(SOURCE)
        proc = subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(src)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise LabError("compiling the pause program failed (a static libc is needed: apt-get install libc6-dev)",
                           detail=proc.stderr.strip()[-400:])
        data = _oci_archive(binary.read_bytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(f".{os.getpid()}.tmp")
    tmp_path.write_bytes(data)
    os.replace(tmp_path, path)
    return path


def _tar(members: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (content, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def _blob(content: bytes) -> tuple[str, dict[str, object]]:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    return digest, {"digest": digest, "size": len(content)}


def _oci_archive(program: bytes) -> bytes:
    layer_tar = _tar({"pause": (program, 0o755)})
    layer = gzip.compress(layer_tar, mtime=0)
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()
    layer_digest, layer_desc = _blob(layer)
    config_digest, config_desc = _blob(config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
        "config": {"mediaType": oci.OCI_CONFIG, **config_desc},
        "layers": [{"mediaType": oci.OCI_GZIP_LAYER, **layer_desc}],
    }, sort_keys=True).encode()
    manifest_digest, manifest_desc = _blob(manifest)
    index = json.dumps({
        "schemaVersion": 2, "mediaType": oci.OCI_INDEX,
        "manifests": [{"mediaType": oci.OCI_MANIFEST, **manifest_desc,
                       "annotations": {"io.containerd.image.name": IMAGE,
                                       "org.opencontainers.image.ref.name": tag_of(IMAGE)}}],
    }, sort_keys=True).encode()
    files = {"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644), "index.json": (index, 0o644)}
    for digest, content in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest)):
        files[f"blobs/sha256/{digest_hex(digest)}"] = (content, 0o644)
    return _tar(files)
