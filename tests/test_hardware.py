"""Colab detection and the GPU memory cap, with injected machine facts."""

import sys
import types

import pytest

from tinyllama_ft.machine.hardware import Hardware, cap_gpu_memory, in_colab


@pytest.fixture
def no_colab_env(monkeypatch):
    import os

    for key in [k for k in os.environ if k.startswith("COLAB_")]:
        monkeypatch.delenv(key)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


def test_colab_detected_with_module_and_env(no_colab_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20261128-060000_RC00")
    assert in_colab() is True


def test_not_colab_without_module_or_env(no_colab_env):
    assert in_colab() is False


def test_not_colab_with_module_but_no_env(no_colab_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert in_colab() is False


def test_not_colab_with_env_but_no_module(no_colab_env, monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20261128-060000_RC00")
    assert in_colab() is False


def test_bf16_capable_from_capability(cpu, t4, a100):
    h100 = Hardware(cuda=True, capability=(9, 0), gpu_name="NVIDIA H100")
    assert (cpu.bf16_capable, t4.bf16_capable, a100.bf16_capable, h100.bf16_capable) == (False, False, True, True)


def test_the_machine_prints_as_one_line_a_person_reads(cpu, t4, a100):
    """Issue 40, item 7: the notebook and ``tinyllama-ft train`` print the machine, not ``Hardware(cuda=False, ...)``."""
    assert str(t4) == "machine: Tesla T4 (CUDA capability 7.5, 14.74 GiB, no bf16), Colab"
    assert str(a100) == "machine: NVIDIA A100-SXM4-40GB (CUDA capability 8.0, 39.39 GiB, bf16)"
    assert str(cpu) == "machine: CPU, no CUDA GPU (no native bf16)"
    assert str(Hardware(cpu_bf16=True)) == "machine: CPU, no CUDA GPU (bf16 computed natively)"
    assert repr(cpu).startswith("Hardware(cuda=False")  # the repr stays the dataclass's, for code


def test_cap_gpu_memory_is_none_on_cpu_or_zero(cpu, t4):
    assert cap_gpu_memory(15, hardware=cpu) is None
    assert cap_gpu_memory(0, hardware=t4) is None


def test_cap_gpu_memory_rejects_negative(cpu):
    with pytest.raises(ValueError, match="gpu_memory_cap_gib=-1"):
        cap_gpu_memory(-1, hardware=cpu)


def test_cap_gpu_memory_rejects_more_than_the_gpu(t4):
    with pytest.raises(ValueError, match="exceeds the GPU's 14.74 GiB"):
        cap_gpu_memory(40, hardware=t4)
