# The gpualign image (the controller, and the CLI). Conventional where Docker runs:
#     python3 -m build --wheel && docker build -t gpualign:0.1.0 .
# Here it is built by buildah from a Debian base made with mmdebstrap, since no public container registry is
# reachable: `make image` (scripts/build_image.py) passes --build-arg BASE=localhost/gpualign-base:bookworm.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
# Where PyPI is reached through a TLS-inspecting proxy, pass its CA bundle (mounted for RUN) and point pip at it.
ARG PIP_CERT
COPY dist/gpualign-*.whl /tmp/wheel/
RUN python3 -m venv /opt/gpualign \
    && /opt/gpualign/bin/pip install --no-cache-dir --disable-pip-version-check /tmp/wheel/gpualign-*.whl \
    && /opt/gpualign/bin/pip uninstall -y pip \
    && find /opt/gpualign -name __pycache__ -prune -exec rm -rf {} +

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
