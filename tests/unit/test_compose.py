"""A driver image composed in the registry (`gpualign.ensure.compose`): layers unpacked as a runtime applies them
and checked against their diff_ids, the modules' layer where the image's tree puts /lib/modules (a merged /usr
included), a config as buildah's assembly makes it, and a push that mounts the user space's layers and puts the
manifest last. The whole path, against a real registry and the real user space, is in
tests/integration/test_shared_modules.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path, PurePosixPath

import httpx2
import pytest

from gpualign.ensure import compose, image
from gpualign.ledger.references import RegistryRef
from gpualign.ledger.registry import RegistryClient
from gpualign.model.driver_tag import parse
from tests.support.blob_registry import BlobRegistry


def tar_gz(*members: tuple[tarfile.TarInfo, bytes | None]) -> tuple[bytes, str]:
    """A gzip'd tar of the members, and its diff_id."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue()), f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for k, v in fields.items():
        setattr(info, k, v)
    return info


def test_a_layer_is_unpacked_when_its_bytes_are_its_diff_id_and_refused_when_not_or_when_it_deletes(tmp_path):
    blob = tmp_path / "layer"
    data, diff_id = tar_gz((member("etc", tarfile.DIRTYPE, mode=0o755), None), (member("etc/os-release"), b"x\n"),
                           (member("dev/console", tarfile.CHRTYPE, devmajor=5, devminor=1), None),
                           (member("lib64", tarfile.SYMTYPE, linkname="usr/lib64"), None))
    blob.write_bytes(data)
    root = tmp_path / "root"
    root.mkdir()
    compose.unpack(blob, root, diff_id, "reg/us:t")
    assert (root / "etc/os-release").read_bytes() == b"x\n" and (root / "lib64").is_symlink()
    assert not (root / "dev/console").exists()  # a device node: nothing the check reads
    with pytest.raises(compose.LayerRefused, match="not the diff_id its config names"):
        compose.unpack(blob, tmp_path / "root", "sha256:" + "0" * 64, "reg/us:t")
    deleting, diff_id = tar_gz((member("etc/.wh.os-release"), b""))
    blob.write_bytes(deleting)
    with pytest.raises(compose.LayerRefused, match="deletes 'etc/.wh.os-release'"):
        compose.unpack(blob, root, diff_id, "reg/us:t")
    escaping, diff_id = tar_gz((member("../escaped"), b"x"))
    blob.write_bytes(escaping)
    with pytest.raises(compose.LayerRefused, match="outside the image's tree"):
        compose.unpack(blob, root, diff_id, "reg/us:t")
    escaping, diff_id = tar_gz((member("out", tarfile.SYMTYPE, linkname=str(tmp_path)), None),
                               (member("out/escaped"), b"x"))
    blob.write_bytes(escaping)
    with pytest.raises(compose.LayerRefused, match="through a link"):
        compose.unpack(blob, root, diff_id, "reg/us:t")
    assert not (tmp_path / "escaped").exists()
    blob.write_bytes(b"not gzip")
    with pytest.raises(compose.LayerRefused, match="does not unpack"):
        compose.unpack(blob, root, diff_id, "reg/us:t")


def test_a_path_lands_where_the_images_own_links_take_it_never_outside_the_tree(tmp_path):
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "lib64").symlink_to("/usr/lib64")  # absolute: the image's /usr/lib64, not this machine's
    assert compose.inside(tmp_path, PurePosixPath("lib/modules/6.12.118+deb13-amd64")) == \
        PurePosixPath("usr/lib/modules/6.12.118+deb13-amd64")
    assert compose.inside(tmp_path, PurePosixPath("lib64/ld-linux-x86-64.so.2")) == \
        PurePosixPath("usr/lib64/ld-linux-x86-64.so.2")
    assert compose.inside(tmp_path, PurePosixPath("etc/../../../x")) == PurePosixPath("x")


def cached_modules(tmp_path: Path) -> list[Path]:
    cache = tmp_path / "cache"
    cache.mkdir()
    for name, body in (("nvidia-uvm.ko", b"uvm" * 1000), ("nvidia-x.ko", bytes(range(256)) * 4000)):
        (cache / name).write_bytes(body)
    return sorted(cache.glob("*.ko"))


@pytest.mark.parametrize("merged_usr", [False, True])
def test_the_modules_layer_is_what_the_modules_and_depmod_add_where_the_tree_keeps_modules(tmp_path, merged_usr):
    root = tmp_path / "root"
    (root / "usr/lib").mkdir(parents=True)
    if merged_usr:  # trixie: /lib is a link, which the layer must not replace with a directory
        (root / "lib").symlink_to("usr/lib")
    modules = cached_modules(tmp_path)
    before = {p.name: p.read_bytes() for p in modules}
    compose.modules_layer(root, "6.1.0-50-amd64", modules)
    again = compose.modules_layer(root, "6.1.0-50-amd64", modules)  # a second try over the same tree
    assert {p.name: p.read_bytes() for p in modules} == before  # the module cache never written through
    raw = gzip.decompress(again.data)  # every member of the gzip stream
    assert again.diff_id == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    assert again.digest == f"sha256:{hashlib.sha256(again.data).hexdigest()}"
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = [m.name for m in tar]
        owners = {(m.uid, m.gid) for m in tar}
    top = "usr/lib" if merged_usr else "lib"
    video = f"{top}/modules/6.1.0-50-amd64/kernel/drivers/video"
    assert names[:len(top.split("/")) + 2] == [*(["usr"] if merged_usr else []), top, f"{top}/modules",
                                               f"{top}/modules/6.1.0-50-amd64"]
    assert {f"{top}/modules/6.1.0-50-amd64/kernel", f"{top}/modules/6.1.0-50-amd64/kernel/drivers", video} < set(names)
    assert all(str(PurePosixPath(n).parent) in names[:i] for i, n in enumerate(names) if "/" in n)  # parents first
    assert f"{video}/nvidia-uvm.ko" in names and f"{video}/nvidia-x.ko" in names
    assert f"{top}/modules/6.1.0-50-amd64/modules.dep" in names  # depmod's, for the kernel
    if merged_usr:
        assert "lib" not in names and (root / "lib").is_symlink()
    assert owners == {(0, 0)}


def spec_and_userspace(tmp_path: Path, arch: str = "amd64") -> tuple[object, compose.RemoteUserSpace]:
    kernel = "6.1.0-50-amd64" if arch == "amd64" else "6.1.0-50-arm64"
    spec = parse(f"535-{kernel}-debian12")
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    config = {"architecture": arch, "os": "linux", "config": {"Labels": {"io.buildah.version": "1.28.2"}},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]},
              "history": [{"created_by": "/bin/sh"}, {"created_by": "/bin/sh"}]}
    layers = [{"mediaType": compose.GZIP_LAYER, "digest": f"sha256:{hashlib.sha256(c.encode()).hexdigest()}",
               "size": len(c)} for c in ("base", "user space")]
    us = compose.RemoteUserSpace("nvidia/driver-userspace", "reg.io/nvidia/driver-userspace:bookworm-x", "sha256:"
                                 + "e" * 64, layers, config, arch, root=root, checked={"nvidia_smi": "535.309.01"})
    return spec, us


def test_the_config_is_the_user_spaces_with_what_assembly_sets_and_the_modules_layer_last(tmp_path):
    spec, us = spec_and_userspace(tmp_path)
    made = compose.compose(spec, us, {"nvidia-smi": "535.309.01-1"}, cached_modules(tmp_path), "535.309.01",
                           {"symbols": 773, "modules": 2}, "k" * 64)
    config = json.loads(made.config)
    run = config["config"]
    assert run["Entrypoint"] == ["nvidia-driver", "init"] and run["WorkingDir"] == "/drivers" and "Cmd" not in run
    assert run["Env"] == [image.PATH_ENV, "DRIVER_VERSION=535.309.01", "DRIVER_BRANCH=535",
                          "GPUALIGN_KERNEL=6.1.0-50-amd64", "KERNEL_VERSION=6.1.0-50-amd64"]
    labels = run["Labels"]
    assert labels["version"] == "535-6.1.0-50-amd64" and labels["io.gpualign.modules-sha256"] == "k" * 64
    assert labels["io.gpualign.layout"] == image.LAYOUT and labels["io.buildah.version"] == "1.28.2"
    verified = json.loads(labels["io.gpualign.verified"])
    assert verified["userspace"] == {"nvidia_smi": "535.309.01"}
    assert verified["userspace_packages"] == {"nvidia-smi": "535.309.01-1"} and verified["symbols"] == 773
    assert config["rootfs"]["diff_ids"] == ["sha256:" + "a" * 64, "sha256:" + "b" * 64, made.layer.diff_id]
    assert len(config["history"]) == 3 and config["architecture"] == "amd64"
    assert made.manifest["config"]["digest"] == f"sha256:{hashlib.sha256(made.config).hexdigest()}"
    assert [d["digest"] for d in made.manifest["layers"]] == [*(d["digest"] for d in us.layers), made.layer.digest]
    assert made.manifest["annotations"]["org.opencontainers.image.base.digest"] == us.digest
    assert "Labels" in us.config["config"] and "Env" not in us.config["config"]  # the user space's own: untouched


@pytest.mark.parametrize(("arch", "mounts"), [("amd64", True), ("arm64", False)])
def test_the_push_mounts_the_user_spaces_layers_uploads_only_when_it_must_and_puts_the_manifest_last(
        tmp_path, arch, mounts):
    spec, us = spec_and_userspace(tmp_path, arch)
    fake = BlobRegistry(mounts)
    for d in us.layers:
        blob = tmp_path / d["digest"].replace(":", "-")
        blob.write_bytes(b"base" if d["size"] == 4 else b"user space")
        us.blobs[d["digest"]] = blob
        fake.blobs.setdefault("nvidia/driver-userspace", {})[d["digest"]] = blob.read_bytes()
    made = compose.compose(spec, us, {}, cached_modules(tmp_path), "535.309.01", {}, None)
    client = RegistryClient(RegistryRef("reg.io", "nvidia/driver", "https"),
                            transport=httpx2.MockTransport(fake.handler))
    made.push(client, spec.tag)  # type: ignore[attr-defined]
    ours = fake.blobs["nvidia/driver"]
    assert set(ours) == {*(d["digest"] for d in us.layers), made.layer.digest, made.manifest["config"]["digest"]}
    mounted = [r for r in fake.requests if "mount=" in r]
    assert len(mounted) == 2 and all("from=nvidia/driver-userspace" in r for r in mounted)
    uploads = [r for r in fake.requests if r.startswith("PUT /v2/nvidia/driver/blobs/uploads/1")]
    assert len(uploads) == (2 if mounts else 4)  # the modules' layer and the config; the user space's too if refused
    assert fake.requests[-1] == f"PUT /v2/nvidia/driver/manifests/{spec.tag}"  # type: ignore[attr-defined]
    tagged = json.loads(fake.manifests[("nvidia/driver", spec.tag)])  # type: ignore[attr-defined]
    if arch == "amd64":
        assert tagged == made.manifest
    else:
        (entry,) = tagged["manifests"]
        assert entry["platform"] == {"architecture": "arm64", "os": "linux"}
        assert json.loads(fake.manifests[("nvidia/driver", entry["digest"])]) == made.manifest


def test_a_shared_user_space_whose_config_or_layer_changed_in_the_registrys_storage_is_refused(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setenv("GPUALIGN_CACHE", str(tmp_path / "cache"))
    layer, diff_id = tar_gz((member("etc/os-release"), b"x\n"))
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers",
                                                                             "diff_ids": [diff_id]}}).encode()
    digest = {name: f"sha256:{hashlib.sha256(data).hexdigest()}" for name, data in (("layer", layer),
                                                                                     ("config", config))}
    fake = BlobRegistry()
    repo = "nvidia/driver-userspace"
    fake.blobs[repo] = {digest["layer"]: layer, digest["config"]: config}
    fake.manifests[(repo, "bookworm-x")] = json.dumps({
        "schemaVersion": 2, "mediaType": compose.OCI_MANIFEST,
        "config": {"mediaType": compose.OCI_CONFIG, "digest": digest["config"], "size": len(config)},
        "layers": [{"mediaType": compose.GZIP_LAYER, "digest": digest["layer"], "size": len(layer)}]}).encode()
    client = RegistryClient(RegistryRef("reg.io", "nvidia/driver", "https"),
                            transport=httpx2.MockTransport(fake.handler))
    assert compose.fetch(client, repo, "absent", "amd64", "535.309.01") is None
    fake.blobs[repo][digest["config"]] = config.replace(b"amd64", b"arm64")
    with pytest.raises(compose.LayerRefused, match="its config is not the blob its manifest names"):
        compose.fetch(client, repo, "bookworm-x", "amd64", "535.309.01")
    fake.blobs[repo][digest["config"]] = config
    fake.blobs[repo][digest["layer"]] = layer[:-1] + bytes([layer[-1] ^ 1])
    with pytest.raises(compose.LayerRefused, match="is not what its manifest names"):
        compose.fetch(client, repo, "bookworm-x", "amd64", "535.309.01")
    assert not any((tmp_path / "cache").rglob("root"))  # no scratch tree left behind


def test_a_shared_artifact_is_read_by_the_digest_judged_never_by_a_tag_that_moved():
    """The signature is checked over the digest the tag named; the manifest is then read by that digest, and refused
    unless its bytes hash to it (a registry that answers a digest with other bytes)."""
    from gpualign.ledger.registry import BlobMismatch

    fake = BlobRegistry()
    repo = "nvidia/driver-userspace"
    good = json.dumps({"schemaVersion": 2, "mediaType": compose.OCI_MANIFEST, "layers": []}).encode()
    digest = f"sha256:{hashlib.sha256(good).hexdigest()}"
    fake.manifests[(repo, "bookworm-x")] = good
    client = RegistryClient(RegistryRef("reg.io", "nvidia/driver", "https"),
                            transport=httpx2.MockTransport(fake.handler))
    assert client.manifest_at(digest, repo) == json.loads(good)
    fake.manifests[(repo, "bookworm-x")] = good.replace(b"[]", b"[ ]")  # the tag moved after it was judged
    assert client.manifest_at(digest, repo) is None  # the judged manifest is gone: nothing is read in its place
    fake.manifests[(repo, digest)] = good.replace(b"[]", b"[ ]")  # a registry answering the digest with other bytes
    with pytest.raises(BlobMismatch, match="is not the manifest its digest names"):
        client.manifest_at(digest, repo)
