# The gpualign images. Conventional where Docker runs:
#     python3 -m build --wheel && docker build -t gpualign:0.1.0 .                       # the controller, the CLI
#     docker build --target builder -t gpualign-builder:0.1.0 .                          # the build Jobs' image
# Here they are built by buildah from Debian bases made with mmdebstrap, since no public container registry is
# reachable: `make image` (scripts/build_image.py) passes --build-arg BASE=localhost/gpualign-base:bookworm and
# BUILDER_BASE=localhost/gpualign-builder-base:bookworm (a base with the build tools already in it).
ARG BASE=python:3.11-slim
ARG BUILDER_BASE=${BASE}

FROM ${BASE} AS build
# Where PyPI is reached through a TLS-inspecting proxy, pass its CA bundle (mounted for RUN) and point pip at it.
ARG PIP_CERT
COPY dist/gpualign-*.whl /tmp/wheel/
RUN python3 -m venv /opt/gpualign \
    && /opt/gpualign/bin/pip install --no-cache-dir --disable-pip-version-check /tmp/wheel/gpualign-*.whl \
    && /opt/gpualign/bin/pip uninstall -y pip \
    && find /opt/gpualign -name __pycache__ -prune -exec rm -rf {} +

# The build Jobs' image (`gpualign controller --build`): `gpualign ensure` with what a build runs besides Python:
# buildah (assembles and pushes the driver image), mmdebstrap and apt (the build root, the user space), kmod (depmod,
# modinfo), skopeo (mirrors), qemu-user-static (an arm64 image's own ldconfig and nvidia-smi, run while it is
# made), qemu-system-x86, qemu-system-arm and busybox-static (each image's own kernel, amd64 or arm64, booted with its
# modules before the push), ovmf and qemu-efi-aarch64 (that boot under UEFI Secure Boot when the modules are
# signed). It
# runs as root in a privileged container: docs/controller.md says why.
FROM ${BUILDER_BASE} AS builder
RUN if ! command -v buildah >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends buildah mmdebstrap kmod skopeo apt \
            debian-archive-keyring gpgv ca-certificates xz-utils qemu-system-x86 qemu-system-arm busybox-static ovmf qemu-efi-aarch64 \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=build /opt/gpualign /opt/gpualign
ENV PATH=/opt/gpualign/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title="gpualign-builder" \
      org.opencontainers.image.description="Builds, verifies and pushes GPU driver images (gpualign ensure)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/example/gpualign"
ENTRYPOINT ["gpualign"]
CMD ["ensure", "--help"]

# The controller and the CLI (the default target): no build tools, non-root. It verifies Debian's archive with gpgv
# and Debian's keyring (building ahead of the next kernel): python:3.11-slim has both, as apt's dependencies; `make
# image`'s base installs them.
FROM ${BASE}
COPY --from=build /opt/gpualign /opt/gpualign
ENV PATH=/opt/gpualign/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title="gpualign" \
      org.opencontainers.image.description="Keeps a Kubernetes GPU fleet's drivers aligned with its kernels" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/example/gpualign"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["gpualign"]
CMD ["controller", "--help"]
