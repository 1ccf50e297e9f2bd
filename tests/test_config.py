"""FinetuneConfig: the article's defaults, validation messages, and notebook/papermill coercions."""

import pytest

from tinyllama_ft.config import FinetuneConfig

ARTICLE_DEFAULTS = {
    "model_name": "unsloth/tinyllama-bnb-4bit",
    "max_seq_length": 4096,
    "lora_r": 32,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "dataset": "yahma/alpaca-cleaned",
    "test_size": 0.004,
    "learning_rate": 2e-5,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 4,
    "warmup_ratio": 0.1,
    "weight_decay": 0.1,
    "lr_scheduler_type": "linear",
    "seed": 3407,
    "max_steps": 60,
    "wandb_project": "tiny-llama",
    "wandb_run_name": "tiny-llama-unsloth-sft",
}


@pytest.mark.parametrize("name, expected", ARTICLE_DEFAULTS.items())
def test_default_is_the_article_value(name, expected):
    assert getattr(FinetuneConfig(), name) == expected


def test_derived_values():
    cfg = FinetuneConfig()
    assert cfg.effective_batch_size == 8
    assert cfg.resolved_adapter_dir.replace("\\", "/") == "outputs/lora_model"
    assert FinetuneConfig(adapter_dir="here").resolved_adapter_dir == "here"


BAD_VALUES = {
    "backend": "vllm",
    "dtype": "int8",
    "template": "chatml",
    "report_to": "tensorboard",
    "packing_strategy": "greedy",
    "max_seq_length": 0,
    "lora_r": 0,
    "lora_alpha": -1,
    "lora_dropout": 1.0,
    "target_modules": "",
    "test_size": 1.0,
    "learning_rate": 0.0,
    "per_device_train_batch_size": 0,
    "per_device_eval_batch_size": 0,
    "gradient_accumulation_steps": 0,
    "max_steps": 0,
    "num_train_epochs": 0,
    "warmup_ratio": -0.1,
    "eval_steps": 0,
    "save_steps": 0,
    "logging_steps": 0,
    "gpu_memory_cap_gib": -1.0,
    "max_new_tokens": 0,
    "output_dir": "",
}


@pytest.mark.parametrize("name, bad", BAD_VALUES.items())
def test_validation_error_names_the_field(name, bad):
    with pytest.raises(ValueError, match=rf"FinetuneConfig\.{name}="):
        FinetuneConfig(**{name: bad})


def test_max_steps_minus_one_means_epochs():
    assert FinetuneConfig(max_steps=-1).max_steps == -1


def test_from_mapping_ignores_non_field_keys():
    namespace = {"lora_r": 8, "seed": 1, "In": [], "get_ipython": print, "_": None, "np": object()}
    cfg = FinetuneConfig.from_mapping(namespace)
    assert (cfg.lora_r, cfg.seed) == (8, 1)
    assert cfg.lora_alpha == 32


def test_string_coercions_from_papermill():
    cfg = FinetuneConfig(target_modules=" q_proj, v_proj ,", prompts="Hi there", dtype="None",
                         dataset_config="None")
    assert cfg.target_modules == ("q_proj", "v_proj")
    assert cfg.prompts == ("Hi there",)
    assert cfg.dtype is None
    assert cfg.dataset_config is None
    assert FinetuneConfig(dtype="auto").dtype is None


def test_to_dict_is_json_ready():
    import json

    d = FinetuneConfig().to_dict()
    assert d["target_modules"] == list(ARTICLE_DEFAULTS["target_modules"])
    assert json.loads(json.dumps(d)) == d
