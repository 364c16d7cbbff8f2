"""hardware.device as a mapping of datasheet figures: the same device, to the cost model, as the catalogue entry
with those figures; the catalogue's assumptions as its defaults; bad figures refused on one line naming them."""

from __future__ import annotations

import pytest
from asyncrl.scenarios.costs.catalog import DEVICES, GB
from asyncrl.scenarios.spec.device_sheet import DeviceSheet
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario
from asyncrl.simulator.simulation import simulate

#: The H100 SXM as its datasheet gives it (scenarios/costs/catalog.py): 989 dense bf16 TFLOP/s, 80 GB at 3.35 TB/s,
#: NVLink 900 GB/s bidirectional (450 each way), one 400 Gb/s adapter (50 GB/s), PCIe Gen5 (64 GB/s each way).
H100_SHEET = (
    "{name: my-h100, peak_tflops: 989, hbm_gb: 80, hbm_gbps: 3350, nvlink_gbps: 450, network_gbps: 50, host_gbps: 64}"
)


def test_a_device_by_its_datasheet_is_the_catalogue_entry_with_those_figures() -> None:
    sheet = DeviceSheet(name="my-h100", peak_tflops=989, hbm_gb=80, hbm_gbps=3350, nvlink_gbps=450)
    assert sheet.spec() == DEVICES["h100"]  # network, host link and node: the catalogue's assumptions by default
    b200 = DeviceSheet(name="my-b200", peak_tflops=2250, hbm_gb=180, hbm_gbps=8000, nvlink_gbps=900)
    assert b200.spec() == DEVICES["b200"]
    gb200 = DeviceSheet(
        name="my-gb200", peak_tflops=2500, hbm_gb=186, hbm_gbps=8000, nvlink_gbps=900, host_gbps=225, node_devices=72
    )
    assert gb200.spec() == DEVICES["gb200"]


def test_without_nvlink_the_node_talks_over_pcie_as_the_l40s_does() -> None:
    sheet = DeviceSheet(name="my-l40s", peak_tflops=362, hbm_gb=48, hbm_gbps=864, network_gbps=25, host_gbps=32)
    assert sheet.spec() == DEVICES["l40s"]
    assert sheet.spec().nvlink_bytes_per_s == 32 * GB and sheet.spec().intra_node_link == "pcie"


def test_a_scenario_on_the_datasheet_device_predicts_what_the_named_one_does() -> None:
    named = load_scenario("quickstart", ["run.steps=6"])
    sheet = load_scenario("quickstart", ["run.steps=6", f"hardware.device={H100_SHEET}"])
    assert sheet.hardware.device_name == "my-h100" and sheet.hardware.spec == named.hardware.spec
    assert simulate(sheet).summary.model_dump() == simulate(named).summary.model_dump()


def test_a_gb200_rack_is_one_node_of_72_unless_the_cluster_says_otherwise() -> None:
    assert load_scenario("quickstart", ["hardware.device=gb200"]).cluster.devices_per_node == 72
    assert load_scenario("quickstart", ["hardware.device=h100"]).cluster.devices_per_node == 8
    mapping = "{name: rack, peak_tflops: 2500, hbm_gb: 186, hbm_gbps: 8000, nvlink_gbps: 900, node_devices: 36}"
    assert load_scenario("quickstart", [f"hardware.device={mapping}"]).cluster.devices_per_node == 36
    explicit = load_scenario("quickstart", ["hardware.device=gb200", "cluster.devices_per_node=8"])
    assert explicit.cluster.devices_per_node == 8


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("{peak_tflops: 989, hbm_gbps: 3350}", "hardware.device.hbm_gb: Field required"),
        (
            "{peak_tflops: -1, hbm_gb: 80, hbm_gbps: 3350}",
            "hardware.device.peak_tflops: Input should be greater than 0",
        ),
        ("{peak_tflops: 9, hbm_gb: 80, hbm_gbps: 3, tflops: 1}", "hardware.device.tflops: not a setting here"),
        ("{name: h100, peak_tflops: 1, hbm_gb: 1, hbm_gbps: 1}", "hardware.device.name: h100 is a catalogue device"),
        ("h300", "hardware.device: Input should be 'a100-40g'"),
    ],
)
def test_bad_figures_are_refused_naming_the_field(device: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("quickstart", [f"hardware.device={device}"])
    assert str(caught.value).startswith(message)
