"""CUDA table, affinity generation (checked against a reference nodeAffinity evaluator), and manifest injection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualign.base import labels as L
from gpualign.base.errors import BadInput
from gpualign.model.cuda import minimum_driver, node_affinity, selector_terms, table
from gpualign.model.manifests import inject
from gpualign.model.nodeaffinity import required_matches
from gpualign.model.version import DriverVersion


def test_table_lookups():
    assert minimum_driver("12.4") == DriverVersion(550, 54, 14)
    assert minimum_driver("12.4.1") == DriverVersion(550, 54, 15)
    assert minimum_driver("12.6.3") == DriverVersion(560, 35, 5)
    assert minimum_driver("12.8") == DriverVersion(570, 26, None)
    assert minimum_driver("13.0.2") == DriverVersion(580, 95, 5)
    assert minimum_driver("12.4", minor_compat=True) == DriverVersion(525, 60, 13)
    assert minimum_driver("13.1", minor_compat=True) == DriverVersion(580, 0, None)


@pytest.mark.parametrize("bad", ["12.7", "99.1", "12", "twelve", ""])
def test_unknown_versions_name_the_known_ones(bad):
    with pytest.raises(BadInput) as err:
        minimum_driver(bad)
    assert "known: 11.8, 12.0" in err.value.message and "12.7," not in err.value.message


def node_labels(v: DriverVersion, which: str, pad: bool, empty_rev: bool) -> dict[str, str]:
    names = L.DRIVER_CURRENT if which == "current" else L.DRIVER_LEGACY
    minor = f"{v.minor:02d}" if pad else str(v.minor)
    rev = "" if v.rev is None else (f"{v.rev:02d}" if pad else str(v.rev))
    out = {names["major"]: str(v.major), names["minor"]: minor}
    if v.rev is not None or empty_rev:
        out[names["rev"]] = rev
    return out


versions = st.builds(DriverVersion, st.integers(400, 700), st.integers(0, 120), st.none() | st.integers(0, 99))


@given(node=versions, minimum=versions, which=st.sampled_from(["legacy", "current"]),
       labelset=st.sampled_from(["legacy", "current", "both"]), pad=st.booleans(), empty_rev=st.booleans())
def test_generated_terms_agree_with_direct_comparison(node, minimum, which, labelset, pad, empty_rev):
    labels = node_labels(node, which, pad, empty_rev)
    admitted = required_matches(node_affinity(minimum, labelset), labels)
    readable = labelset in (which, "both")
    assert admitted == (readable and node >= minimum)


@given(cuda=st.sampled_from(table().known), node=versions)
def test_every_table_entry_admits_exactly_the_new_enough_drivers(cuda, node):
    minimum = minimum_driver(cuda)
    assert required_matches(node_affinity(minimum), node_labels(node, "current", True, False)) == (node >= minimum)


def test_node_without_driver_labels_never_matches():
    assert not required_matches(node_affinity(DriverVersion(525, 60, 13)), {})


MANIFEST = """\
# training job, owned by team ml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer  # keep this name
spec:
  replicas: 2
  template:
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: pool
                operator: In
                values: [train]
            - matchExpressions:
              - key: pool
                operator: In
                values: [burst]
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            preference:
              matchExpressions:
              - key: zone
                operator: In
                values: [a]
      containers:
      - name: train
        image: pytorch:25.01
        resources:
          limits:
            nvidia.com/gpu: 1
---
apiVersion: v1
kind: Service
metadata:
  name: trainer
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 1 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          runtimeClassName: nvidia
          containers:
          - name: c
            image: x
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web  # a CPU workload: never pinned to GPU nodes
spec:
  template:
    spec:
      containers:
      - name: nginx
        image: nginx
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
---
apiVersion: v1
kind: Pod
metadata:
  name: dra-pod
spec:
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-gpu
  containers:
  - name: c
    image: cuda
    resources:
      claims:
      - name: gpu
"""


def _docs(text):
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load_all(text))


def _inject(text, terms, source, cuda="12.4", **kw):  # noqa: ANN001, ANN003, ANN202
    return inject(text, terms, source, minimum_driver(cuda), **kw)


def test_inject_ands_into_every_required_term_keeps_preferred_and_comments():
    terms = selector_terms(minimum_driver("12.4"), "current")
    out, count, claims, left = _inject(MANIFEST, terms, "m.yaml")
    assert (count, claims) == (2, 1)
    assert "# training job, owned by team ml" in out and "# keep this name" in out
    deploy, service, cron, web, claim_template, dra_pod = _docs(out)
    before = _docs(MANIFEST)
    assert (web, dra_pod) == (before[3], before[5])  # a CPU workload, a DRA pod: as they are
    (request,) = claim_template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["selectors"] == [{"cel": {"expression": "device.attributes['gpu.nvidia.com']"
                                                                     ".driverVersion.compareTo(semver('550.54.14'))"
                                                                     " >= 0"}}]
    told = {line.split(": ", 2)[1]: line for line in left}
    assert set(told) == {"Deployment web"}  # the DRA pod's claim template is here, and floored: nothing to tell
    assert "asks for no NVIDIA GPU" in told["Deployment web"]
    alone = _inject(MANIFEST.split("---\napiVersion: resource.k8s.io/v1")[0] + "---\n" + MANIFEST.split("---\n")[-1],
                    terms, "m.yaml")[3]
    assert [line for line in alone if "dra-pod" in line] == [
        "m.yaml:67: Pod dra-pod: its GPUs come from resource claims (DRA), whose nodes carry no GFD labels: no "
        "nodeAffinity is added; the floor belongs in one-gpu, not in this input: inject them too"]
    aff = deploy["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    required = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(required) == 2 * 3
    assert aff["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1
    assert service == {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "trainer"}}
    cron_aff = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert len(cron_aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]) == 3
    for pool, driver, ok in [("train", "550.54.14", True), ("burst", "560.28.03", True),
                             ("train", "550.54.13", False), ("other", "580.65.06", False)]:
        labels = {"pool": pool, **node_labels(DriverVersion.parse(driver), "current", True, False)}
        assert required_matches(aff, labels) is ok, (pool, driver)


def test_inject_is_idempotent_and_replaces_an_older_floor():
    terms = selector_terms(minimum_driver("12.4"))
    once, _, _, _ = _inject(MANIFEST, terms, "m.yaml")
    twice, _, _, _ = _inject(once, terms, "m.yaml")
    assert once == twice
    newer, _, _, _ = _inject(once, selector_terms(minimum_driver("12.8")), "m.yaml", "12.8")
    fresh, _, _, _ = _inject(MANIFEST, selector_terms(minimum_driver("12.8")), "m.yaml", "12.8")
    assert newer == fresh and "semver('570.26.0')" in newer and "550.54.14" not in newer


def test_round_trip_keeps_untouched_documents_byte_for_byte():
    text = "apiVersion: v1\nkind: ConfigMap  # cfg\nmetadata:\n  name: a\ndata:\n  k: 'v'\n"
    out, count, claims, left = _inject(text, selector_terms(minimum_driver("12.4")), "c.yaml")
    assert (out, count, claims, left) == (text, 0, 0, [])


@pytest.mark.parametrize("text,message", [
    ("kind: Deployment\nspec: [\n", r"m.yaml:\d+: invalid YAML"),
    ("kind: Deployment\nspec:\n  replicas: 1\n", r"m.yaml:2: Deployment has no spec.template.spec"),
    ("- just\n- a list\n", r"m.yaml:1: a document is not a Kubernetes object"),
])
def test_bad_manifests_name_file_and_line(text, message):
    with pytest.raises(BadInput, match=message):
        _inject(text, selector_terms(minimum_driver("12.4")), "m.yaml")


def test_a_kind_gpualign_does_not_edit_passes_through_named():
    text = "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: x/v1\nkind: Deploymnet\nspec: {}\n"
    out, count, _claims, left = _inject(text, selector_terms(minimum_driver("12.4")), "m.yaml")
    assert (out, count) == (text, 0)
    assert left == ["m.yaml:4: Deploymnet (unnamed): not a kind with a pod template gpualign edits: passed through "
                    "as it is"]


def test_inject_keeps_flow_style_yaml_as_it_was_written():
    """Review 6's Low: `resources: {claims: [{name: gpu}]}` stays so, not `{claims: [name: gpu]}`: a GitOps diff
    shows only the floor."""
    flow = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: train}\nspec:\n  template:\n    spec:\n"
            "      containers:\n      - name: c\n        image: x\n"
            "        resources: {claims: [{name: gpu}], limits: {nvidia.com/gpu: 1}}\n")
    out, count, _, _ = _inject(flow, selector_terms(minimum_driver("12.4"), "current"), "f.yaml")
    assert count == 1 and "resources: {claims: [{name: gpu}], limits: {nvidia.com/gpu: 1}}" in out
