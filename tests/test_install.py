"""The GPU-aware install plan, with injected machine facts and installed versions."""

import re

import pytest

import tinyllama_ft.machine.install as inst
from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.machine.install import COLAB_PINS, install, installed_versions, plan_install

from conftest import REPO

PY = "/usr/bin/python3"


def pinned(pins=COLAB_PINS) -> dict[str, str]:
    """Installed-versions dict with every pin at its pinned version (normalized names)."""
    return {name.lower().replace("_", "-"): version for name, _, version in (p.partition("==") for p in pins)}


def unsloth_commands(plan):
    return [c for c in plan.commands if "--no-deps" in c]


def test_cpu_plans_no_unsloth(cpu):
    plan = plan_install(cpu, installed={}, python=PY)
    assert unsloth_commands(plan) == []
    assert plan.commands == [[PY, "-m", "pip", "install", "-q", "wandb"]]
    assert "no CUDA" in plan.notes[0]


def test_t4_and_a100_plan_the_same_single_no_deps_command(t4, a100):
    plans = [plan_install(hw, installed={}, with_wandb=False, python=PY) for hw in (t4, a100)]
    assert plans[0].commands == plans[1].commands
    assert plans[0].commands == [[PY, "-m", "pip", "install", "-q", "--no-deps", *COLAB_PINS]]


def test_gpu_below_volta_plans_no_unsloth():
    p100 = Hardware(cuda=True, capability=(6, 0), gpu_name="Tesla P100")
    assert plan_install(p100, installed={}, with_wandb=False).commands == []


def test_pins_already_at_their_version_are_left_out(t4):
    installed = pinned()
    installed["transformers"] = "5.24.0"  # another version: reinstalled
    del installed["trl"]  # missing: installed
    (cmd,) = plan_install(t4, installed, with_wandb=False).commands
    assert cmd[cmd.index("--no-deps") + 1 :] == ["transformers==5.17.0", "trl==1.15.0"]


def test_everything_installed_is_a_no_op(t4):
    plan = plan_install(t4, {**pinned(), "wandb": "0.31.0"})
    assert plan.commands == []
    assert plan.notes == ["the pinned Unsloth stack is already installed"]


def test_find_links_goes_offline(a100):
    (cmd,) = plan_install(a100, installed={}, with_wandb=False, find_links="/wheels", python=PY).commands
    assert cmd[:8] == [PY, "-m", "pip", "install", "-q", "--no-index", "--find-links", "/wheels"]


@pytest.mark.parametrize(
    "installed, asked, expect_wandb",
    [
        ({}, True, True),
        ({"wandb": "0.31.0"}, True, False),
        ({}, False, False),
    ],
)
def test_wandb_only_when_missing_and_asked(t4, installed, asked, expect_wandb):
    plan = plan_install(t4, {**pinned(), **installed}, with_wandb=asked)
    assert any(c[-1] == "wandb" for c in plan.commands) is expect_wandb


def test_installed_versions_reads_real_metadata():
    import torch

    found = installed_versions(["torch", "no-such-distribution-xyz"])
    assert found == {"torch": torch.__version__}


@pytest.fixture
def fresh_install(monkeypatch):
    """``install`` with a clean once-per-process memo and nothing of the stack installed."""
    monkeypatch.setattr(inst, "_DONE", {})
    monkeypatch.setattr(inst, "installed_versions", lambda names: {})


def test_install_runs_on_colab(fresh_install, t4):
    ran = []
    plan = install(run=None, hardware=t4, runner=ran.append)
    assert plan.commands and ran == plan.commands
    assert ran[0][-len(COLAB_PINS) :] == list(COLAB_PINS)


def test_install_does_not_run_off_colab(fresh_install, a100):
    ran = []
    plan = install(run=None, hardware=a100, runner=ran.append)
    assert plan.commands and ran == []


def test_second_identical_call_does_not_run_again(fresh_install, t4):
    ran = []
    install(run=None, hardware=t4, runner=ran.append)
    n = len(ran)
    install(run=None, hardware=t4, runner=ran.append)
    assert n > 0 and len(ran) == n


def _requirement_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_requirements_colab_lists_exactly_the_pins():
    lines = _requirement_lines((REPO / "requirements-colab.txt").read_text(encoding="utf-8"))
    assert lines == list(COLAB_PINS)


def _ci_gpu_set_specs() -> dict[str, str]:
    """The pins of CI's second library set (.ci/run's step "GPU machine's library set"): name -> version."""
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    body = "\n".join(line.split("#", 1)[0] for line in text.split("GPU machine's library set", 1)[1].splitlines())
    return {name.lower().replace("_", "-"): version for name, version in re.findall(r'"([\w.-]+)==([^"\s]+)"', body)}


def test_pins_agree_with_ci_gpu_library_set():
    """CI tests the GPU machine's library set (what Unsloth accepts): it must be the set COLAB_PINS installs."""
    specs = _ci_gpu_set_specs()
    assert {"transformers", "trl", "datasets"} <= set(specs), specs
    pins = pinned()
    for name, version in specs.items():
        if name in pins:
            assert pins[name] == version, f"{name}: COLAB_PINS {pins[name]}, .ci/run {version}"
