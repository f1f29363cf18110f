# gpualign: `make demo` runs the seed's story in the lab; `make test` runs every test. Both set up a fresh
# machine first (Debian packages, the Python venv, the lab binaries built from Go modules into ~/.cache).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export GOTOOLCHAIN := local

.PHONY: setup setup-demo deps venv lab-bin lab-bin-demo image publish-image test test-unit demo lint docs bench chart clean

# The lab binaries (Go, CPU-bound) and the images (mmdebstrap and buildah: mostly downloading and unpacking) are
# made side by side.
setup: deps venv
	@$(MAKE) --no-print-directory -j2 lab-bin image

# The demo needs the lab and Helm only: the tests' reference tools (cosign, policy-tester, toxiproxy, promtool) are
# built by `make test`.
setup-demo: deps venv
	@$(MAKE) --no-print-directory -j2 lab-bin-demo image

deps:
	@scripts/install-debs

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

lab-bin: venv
	$(BIN)/gpualign lab build

lab-bin-demo: venv
	$(BIN)/gpualign lab build --only etcd --only kwok --only kubernetes --only kubelet --only gpu-operator --only helm

image: venv  # the container image, with buildah (cached; rebuilt when the source changes), and its SBOM
	$(BIN)/python scripts/build_image.py

# Push gpualign's image to IMAGE_REF (REGISTRY/REPOSITORY:TAG); with COSIGN_KEY, sign it and attach its SBOM.
publish-image: image
	@test -n "$(IMAGE_REF)" || { echo "make publish-image: set IMAGE_REF=REGISTRY/REPOSITORY:TAG"; exit 2; }
	$(BIN)/python scripts/publish_image.py $(IMAGE_REF) $(if $(COSIGN_KEY),--key $(COSIGN_KEY))

# Independent tests run side by side (each lab takes its own ports and state dir; the real node's tests share one
# worker): most of a lab test's time is waiting on the lab, not CPU.
TEST_WORKERS ?= 4

test: setup
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test-unit: venv
	$(BIN)/pytest -n 2 --dist loadfile tests/unit

demo: setup-demo
	$(BIN)/python scripts/demo.py

bench: setup  # every benchmark, each on its own lab; about an hour here. Results go to bench/results/
	$(BIN)/python bench/bench_check.py --nodes 1000 5000 --repeat 5
	$(BIN)/python bench/bench_drain.py --pods 100 --repeat 5
	$(BIN)/python bench/bench_upgrade.py --nodes 50 --pods-per-node 10 --parallel 1 5 10
	$(BIN)/python bench/bench_controller.py --nodes 5000 --single 100 --burst 500
	$(BIN)/python bench/bench_lab.py --nodes 5000 --repeat 3

# The chart as a package, with its provenance file when a key is named: helm package --sign (an OpenPGP key in a
# keyring file, e.g. `gpg --export-secret-keys > secring.gpg`); `helm verify --keyring pubring.gpg` checks it.
HELM ?= helm
CHART_OUT ?= dist
CHART_KEY ?=
CHART_KEYRING ?=
chart:
	$(HELM) package charts/gpualign -d $(CHART_OUT) $(if $(CHART_KEY),--sign --key "$(CHART_KEY)" --keyring $(CHART_KEYRING))

docs: venv  # the docs site, checked as `make test` checks it (a broken link or anchor fails), into build/site
	$(BIN)/mkdocs build --strict

lint: venv
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
