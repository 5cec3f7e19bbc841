"""The sandbox's argv on a machine with NVIDIA GPUs, built against a fake /dev and /sys (no GPU needed): every
device node the driver made (nvidia-caps and nvidia-uvm included) is bound in, /sys read-only, a driver folder
named by LD_LIBRARY_PATH read-only, and the driver's environment kept."""

import os

import pytest

from grader.isolation import sandbox as sandboxes
from grader.isolation.sandbox import Sandbox

NODES = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]


@pytest.fixture
def gpu_machine(tmp_path, monkeypatch):
    dev, sys_ = tmp_path / "dev", tmp_path / "sys"
    for name in NODES + ["null", "zero"]:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    (dev / "nvidia-caps" / "nvidia-cap1").touch()
    (sys_ / "bus" / "pci" / "devices").mkdir(parents=True)
    driver = tmp_path / "opt" / "nvidia" / "lib64"  # a driver outside /usr, found through LD_LIBRARY_PATH
    driver.mkdir(parents=True)
    monkeypatch.setattr(sandboxes, "DEV", str(dev))
    monkeypatch.setattr(sandboxes, "SYS", str(sys_))
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{driver}:relative/ignored:/usr/lib/x86_64-linux-gnu")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("NBGRADER_DB_URL", "postgresql://secret")
    return {"dev": str(dev), "sys": str(sys_), "driver": str(driver)}


def _pairs(argv: list[str], option: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == option]


@pytest.mark.parametrize("nursery", [False, True])
def test_every_nvidia_node_sys_and_the_driver_folder_are_bound(gpu_machine, nursery):
    box = Sandbox(["python", "-m", "grader.isolation.grading_worker"], None, True, 2, nursery=nursery)
    bound = _pairs(box.argv, "--dev-bind")
    assert sorted(bound) == sorted((os.path.join(gpu_machine["dev"], n), f"/dev/{n}") for n in NODES + ["nvidia-caps"])
    assert (gpu_machine["sys"], "/sys") in _pairs(box.argv, "--ro-bind")
    assert (gpu_machine["driver"], gpu_machine["driver"]) in _pairs(box.argv, "--ro-bind")
    assert not any("relative" in a for a in box.argv)  # only absolute folders, and none under /usr (bound already)
    assert box.argv.index("--dev") < box.argv.index("--dev-bind")  # after the minimal /dev, which would hide them


def test_the_drivers_environment_is_kept_and_nothing_else(gpu_machine):
    env = Sandbox(["python"], None, False, 1).env
    assert env["LD_LIBRARY_PATH"].startswith(gpu_machine["driver"])
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    assert "NBGRADER_DB_URL" not in env


def test_a_machine_without_gpus_binds_none(tmp_path, monkeypatch):
    (tmp_path / "null").touch()
    monkeypatch.setattr(sandboxes, "DEV", str(tmp_path))
    assert "--dev-bind" not in Sandbox(["python"], None, False, 1).argv
