"""The OCI and Docker media types gpualign reads and writes, named once (the OCI image spec's, and Docker's
schema 2 equivalents a registry may answer with). Pure: names only."""

from __future__ import annotations

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"

INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)  # a manifest naming one manifest per platform
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPTED = (OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST)  # what a manifest GET accepts
GZIP_LAYERS = (OCI_GZIP_LAYER, DOCKER_GZIP_LAYER)
CONFIGS = (OCI_CONFIG, DOCKER_CONFIG)
