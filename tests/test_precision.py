"""One dtype decision from the compute capability, and the trainer flags that follow it."""

from tinyllama_ft.train.plan import plan_run
import pytest

from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.models.precision import resolve_dtype, torch_dtype, trainer_precision_flags

H100 = Hardware(cuda=True, capability=(9, 0), gpu_name="NVIDIA H100 80GB HBM3", total_memory_gib=79.1)


def test_t4_gets_float16_even_if_torch_would_say_bf16_is_supported(t4):
    # torch.cuda.is_bf16_supported() can answer True on a T4 (emulated); the capability decides here.
    assert resolve_dtype(None, t4) == "float16"
    assert resolve_dtype("auto", t4) == "float16"


def test_ampere_and_newer_get_bfloat16(a100):
    assert resolve_dtype(None, a100) == "bfloat16"
    assert resolve_dtype(None, H100) == "bfloat16"


def test_cpu_gets_float32(cpu):
    assert resolve_dtype(None, cpu) == "float32"


def test_explicit_bf16_on_t4_raises_naming_the_dtype(t4):
    with pytest.raises(ValueError, match="bfloat16.*Tesla T4"):
        resolve_dtype("bf16", t4)


def test_explicit_fp16_on_cpu_raises(cpu):
    with pytest.raises(ValueError, match="float16"):
        resolve_dtype("fp16", cpu)


def test_unknown_dtype_raises(a100):
    with pytest.raises(ValueError, match="int8"):
        resolve_dtype("int8", a100)


def test_aliases_resolve_to_canonical_names(a100, t4, cpu):
    assert resolve_dtype("torch.bfloat16", a100) == "bfloat16"
    assert resolve_dtype("half", t4) == "float16"
    assert resolve_dtype("fp32", cpu) == "float32"


@pytest.mark.parametrize(
    "hw_name, flags",
    [
        ("t4", {"fp16": True, "bf16": False}),
        ("a100", {"fp16": False, "bf16": True}),
        ("cpu", {"fp16": False, "bf16": False}),
    ],
)
def test_trainer_flags_follow_the_dtype(hw_name, flags, request):
    hw = request.getfixturevalue(hw_name)
    assert trainer_precision_flags(resolve_dtype(None, hw)) == flags


def test_torch_dtype():
    import torch

    assert torch_dtype("bfloat16") is torch.bfloat16
    assert torch_dtype("float16") is torch.float16


def test_cpu_autocasts_to_bf16_only_where_it_computes_bf16_and_dtype_is_auto(cpu):
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.sft_trainer import sft_config_kwargs

    from trl import SFTConfig

    native = Hardware(cpu_bf16=True)
    kwargs = sft_config_kwargs(
        FinetuneConfig(report_to="none"), plan_run(FinetuneConfig(report_to="none"), native), has_eval=False
    )
    assert kwargs["bf16"] is True and kwargs["use_cpu"] is True
    assert SFTConfig(**kwargs).bf16  # the trainer's own checks accept bf16 autocast on a CPU
    assert (
        sft_config_kwargs(
            FinetuneConfig(dtype="float32"), plan_run(FinetuneConfig(dtype="float32"), native), has_eval=False
        )["bf16"]
        is False
    )
    assert sft_config_kwargs(FinetuneConfig(), plan_run(FinetuneConfig(), cpu), has_eval=False)["bf16"] is False
    assert trainer_precision_flags("float32") == {"fp16": False, "bf16": False}
