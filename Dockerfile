# The gpualign image (controller, and the CLI). It cannot be built on the project's machine (no Docker engine),
# so it is kept simple and conventional; `docker build -t gpualign:0.1.0 .` where Docker runs.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /app/src
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8080
ENTRYPOINT ["gpualign"]
CMD ["controller", "--help"]
