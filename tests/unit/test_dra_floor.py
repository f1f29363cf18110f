"""The CUDA floor under DRA (gpualign.model.dra_floor) and NVIDIA's devices as its DRA driver publishes them
(gpualign.model.dra_devices). Pure. The scheduler's own judgement of the floor is in
tests/integration/test_dra_scenario.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpualign.model import dra_floor
from gpualign.model.cuda import minimum_driver, table
from gpualign.model.dra_devices import devices_by_node, highest_driver
from gpualign.model.version import DriverVersion
from tests.support.dra import SLICE

versions = st.builds(DriverVersion, st.integers(0, 999), st.integers(0, 999), st.one_of(st.none(), st.integers(0, 99)))


@given(versions)
def test_a_floor_reads_back_as_the_version_it_was_written_for(v):
    expression = dra_floor.floor_expression(v)
    assert dra_floor.floor_of(expression) == DriverVersion(v.major, v.minor, v.rev or 0)
    text = expression.split("semver('")[1].split("'")[0]
    assert all(p == str(int(p)) for p in text.split("."))  # no leading zero: a valid semantic version


def test_every_cuda_version_of_the_table_has_a_floor_as_semver():
    for cuda in table().known:
        for minor_compat in (False, True):
            minimum = minimum_driver(cuda, minor_compat=minor_compat)
            text = dra_floor.semver(minimum)
            assert all(p == str(int(p)) for p in text.split(".")) and len(text.split(".")) == 3


def _claim(*requests):  # noqa: ANN002, ANN202
    return {"devices": {"requests": list(requests)}}


@given(st.lists(st.sampled_from(["12.4", "12.8", "13.0"]), min_size=1, max_size=4))
def test_setting_floors_keeps_other_selectors_and_leaves_only_the_last_floor(cudas):
    own = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100'"}}
    request = {"deviceClassName": "gpu.nvidia.com", "selectors": [own]}
    for cuda in cudas:
        dra_floor.set_floor(request, minimum_driver(cuda))
    assert request["selectors"][0] == own and len(request["selectors"]) == 2
    assert dra_floor.floors(request) == [DriverVersion.parse(dra_floor.semver(minimum_driver(cudas[-1])))]


def test_the_requests_of_nvidia_classes_are_found_in_both_shapes_of_a_v1_claim():
    spec = _claim({"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                  {"name": "b", "firstAvailable": [{"name": "big", "deviceClassName": "mig.nvidia.com"},
                                                   {"name": "nic", "deviceClassName": "nic.example.com"}]},
                  {"name": "c", "exactly": {"deviceClassName": "team-h100"}})
    assert [r.get("name") for r in dra_floor.nvidia_requests(spec, dra_floor.NVIDIA_CLASSES)] == [None, "big"]
    classes = dra_floor.nvidia_classes([{"kind": "DeviceClass", "metadata": {"name": "team-h100"}, "spec": {
        "selectors": [{"cel": {"expression": "device.driver == \"gpu.nvidia.com\" && "
                                             "device.attributes['gpu.nvidia.com'].productName == 'H100'"}}]}},
                                        {"kind": "DeviceClass", "metadata": {"name": "nics"}, "spec": {
                                            "selectors": [{"cel": {"expression": "device.driver == 'nic.io'"}}]}}])
    assert classes == dra_floor.NVIDIA_CLASSES | {"team-h100"}
    assert len(dra_floor.nvidia_requests(spec, classes)) == 3


def test_a_nodes_devices_and_their_drivers_are_read_from_its_slices():
    other = {"spec": {"driver": "nic.example.com", "nodeName": "dra-1", "devices": [{"name": "eth0"}]}}
    unbound = {"spec": {"driver": "gpu.nvidia.com", "devices": [{"name": "gpu-9"}]}}  # no nodeName: not a node's
    found = devices_by_node([SLICE, other, unbound])
    assert list(found) == ["dra-1"] and [d.name for d in found["dra-1"]] == ["gpu-0", "gpu-1"]
    assert found["dra-1"][0].driver == DriverVersion(550, 163, 1) and found["dra-1"][0].cuda == "12.4.0"
    assert highest_driver(found["dra-1"]) == DriverVersion(580, 65, 6)


def test_a_node_without_gfd_labels_takes_its_driver_from_its_slices_and_a_gfd_node_keeps_its_own():
    from gpualign.model.facts import node_facts, with_dra_driver
    from tests.support import builders

    dra_node = node_facts(builders.node("dra-1", kernel="6.12.117_deb13-amd64", os_id="debian", os_version="13"))
    assert dra_node.driver is None
    drivers = {"dra-1": DriverVersion(580, 65, 6), "gfd-1": DriverVersion(590, 44, 1)}
    found = with_dra_driver(dra_node, drivers)
    assert found.driver == DriverVersion(580, 65, 6) and found.driver_from_dra and found.name == "dra-1"
    gfd = node_facts(builders.node("gfd-1", **{"nvidia.com/cuda.driver-version.full": "580.95.05"}))
    assert gfd.driver is not None and with_dra_driver(gfd, drivers) is gfd  # GFD's labels are the node's own word
