"""FinetuneConfig: the article's defaults, validation messages, and notebook/papermill coercions."""

import re

import pytest

from tinyllama_ft.config.finetune import FinetuneConfig


def test_every_field_has_a_docstring_naming_its_source_and_one_section():
    import dataclasses

    from tinyllama_ft.config.finetune import DEFAULTS, FIELD_NAMES, SECTIONS, FinetuneConfig, field_docs

    docs = field_docs()
    assert set(docs) == set(FIELD_NAMES)
    sources = ("the article", "Unsloth's notebooks", "TRL's default", "this package", "Alpaca's", "article's")
    unsourced = [n for n, d in docs.items() if not any(s in d for s in sources)]
    assert not unsourced, unsourced
    # each field is declared in exactly one section, and the flat config lists them section by section
    by_section = [f.name for section in SECTIONS.values() for f in dataclasses.fields(section)]
    assert by_section == list(FIELD_NAMES)
    assert list(SECTIONS) == [
        "model",
        "lora",
        "data",
        "chat",
        "training",
        "preference",
        "grpo",
        "logging",
        "export",
        "generation",
    ]
    assert all(issubclass(FinetuneConfig, section) for section in SECTIONS.values())
    cfg = FinetuneConfig(lora_r=8, chat_template="zephyr")  # flat names, whatever the section
    assert (cfg.lora_r, cfg.to_dict()["chat_template"], DEFAULTS.lora_r) == (8, "zephyr", 32)
    chat = {f.name for f in dataclasses.fields(SECTIONS["chat"])}
    assert {"dataset_format", "extra_datasets", "chat_template", "assistant_only_loss"} <= chat


def test_every_choice_field_takes_its_values_from_its_literal_annotation():
    """One declaration per choice field: the Literal in its annotation is what validation allows and what the
    message lists (before, a second table in finetune.py and a third in scripts/config_tables.py repeated them)."""
    import typing

    from tinyllama_ft.config import finetune
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.config.methods import METHODS

    chosen = {name: finetune.choices(name) for name in finetune.FIELD_NAMES if finetune.choices(name)}
    assert set(chosen) == {
        "dtype",
        "recipe",
        "backend",
        "lora_bias",
        "template",
        "long_rows",
        "dataset_format",
        "chat_template",
        "packing_strategy",
        "report_to",
        "export_formats",
        "method",
        "loss_type",
        "scale_rewards",
        "importance_sampling_level",
        "rollout_decoder",
        "eval_split",
    }
    assert not hasattr(finetune, "_ALLOWED")
    assert chosen["dtype"] == (None, "bfloat16", "float16", "float32")
    assert chosen["export_formats"] == finetune.EXPORT_FORMATS == typing.get_args(finetune.ExportFormat)
    for name, values in chosen.items():
        assert typing.get_args(finetune._literal(finetune.FIELD_TYPES[name])) == tuple(v for v in values if v)
        if name in ("export_formats", "chat_template", "loss_type"):  # a list; loss_type's items by method
            continue
        method = {"method": "grpo"} if name in METHODS["grpo"].reads else {}  # a GRPO field: refused for SFT
        for value in values:  # each listed value is allowed ...
            assert getattr(FinetuneConfig(**{name: value}, **method), name) == value
        with pytest.raises(
            ConfigError, match=rf"FinetuneConfig\.{name}='nope' is not allowed: one of {re.escape(str(values))}"
        ):
            FinetuneConfig(**{name: "nope"}, **method)  # ... and the message names the field and the values
    FinetuneConfig(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")  # a Jinja string too
    with pytest.raises(ConfigError, match=r"chat_template='llama-2' is not allowed: one of \('auto', 'chatml'"):
        FinetuneConfig(chat_template="llama-2")


def test_helper_defaults_are_the_config_defaults():
    """Every keyword default a helper shares with a config field is that field's default (read, not copied)."""
    import inspect

    from tinyllama_ft.models import adapters

    from tinyllama_ft.data import instructions as data

    from tinyllama_ft.infer import generation

    from tinyllama_ft.data import lengths

    from tinyllama_ft.models import lora

    from tinyllama_ft.models import loading as modeling

    from tinyllama_ft.data import alpaca_prompts as prompts

    from tinyllama_ft.train import tracking
    from tinyllama_ft.infer import chat_generation, core
    from tinyllama_ft.data import chat_masks
    from tinyllama_ft.models import chat_templates
    from tinyllama_ft.data import conversations
    from tinyllama_ft.models import families
    from tinyllama_ft.config.finetune import DEFAULTS, FIELD_NAMES

    aliases = {
        "seed": "seed",
        "source": "dataset",
        "split": "dataset_split",
        "config": "dataset_config",
        "policy": "long_rows",
    }
    checked = 0
    for fn in (
        modeling.load_model,
        lora.add_lora,
        lora.lora_config,
        adapters.load_adapter,
        data.load_instruction_data,
        data.split_train_eval,
        lengths.length_report,
        lengths.apply_long_rows,
        prompts.make_formatting_func,
        generation.generate,
        generation.stream,
        tracking.start_tracking,
        conversations.load_conversations,
        conversations.load_conversation_sources,
        chat_masks.tokenize_conversations,
        chat_templates.set_chat_template,
        families.prepare_family,
        families.rope_limits,
        chat_generation.chat_generate,
        chat_generation.chat_stream,
        core.GenerationOptions,  # every generation helper's **options
    ):
        for name, p in inspect.signature(fn).parameters.items():
            field_name = aliases.get(name, name)
            if (fn.__name__, name) == ("add_lora", "backend"):  # None: detect from the process, not the plan's "auto"
                continue
            if fn.__name__ == "load_adapter" and name in ("max_seq_length", "dtype", "load_in_4bit"):
                assert p.default is None  # None: what the run recorded beside the adapter (run_record)
                continue
            if name == "template" and fn.__module__.endswith(("generation", "tryout")):  # None: the model's
                assert p.default is None  # recorded format (generation.model_format); the field's is a fresh run's
                continue
            if name == "dataset_format" and fn.__module__.endswith("conversations"):  # conversation loaders read
                assert p.default == "auto"  # each source's layout; the field's "alpaca" picks the Alpaca prompt path
                continue
            if field_name in FIELD_NAMES and p.default is not inspect.Parameter.empty:
                assert p.default == getattr(DEFAULTS, field_name), (fn.__name__, name)
                checked += 1
            if p.kind is p.POSITIONAL_OR_KEYWORD and name in FIELD_NAMES and p.default is not inspect.Parameter.empty:
                assert name in ("model_name", "adapter_dir"), f"{fn.__name__}({name}) should be keyword-only"
    assert checked >= 40


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


def test_unknown_keys_name_the_field_meant():
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=r"'lora_rank' \(did you mean lora_r\?\)"):
        FinetuneConfig.from_mapping({"lora_rank": 8})
    with pytest.raises(ConfigError, match=r"'colour'(?! \(did)"):
        FinetuneConfig.from_mapping({"colour": "blue"})


@pytest.mark.parametrize(
    "name, bad",
    [
        ("max_steps", "ten"),
        ("learning_rate", "fast"),
        ("packing", "maybe"),
        ("lora_r", 8.5),
        ("target_modules", 3),
        ("model_name", None),
        ("resume", 1.0),
    ],
)
def test_wrong_types_name_the_field(name, bad):
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=rf"FinetuneConfig\.{name}=.*expected"):
        FinetuneConfig.from_mapping({name: bad})


def test_none_for_a_field_that_is_not_optional_names_its_type_once():
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=r"FinetuneConfig\.model_name=None is not allowed: expected a string$"):
        FinetuneConfig(model_name=None)


def test_secret_names_are_refused_without_their_value():
    with pytest.raises(ValueError, match="hf_token") as caught:
        FinetuneConfig.from_mapping({"hf_token": "hf_abcdef123456"})
    assert "hf_abcdef123456" not in str(caught.value)


def test_string_coercions_from_papermill_colab_yaml_and_the_command_line():
    cfg = FinetuneConfig(
        target_modules=" q_proj, v_proj ,",
        prompts="Hi there",
        dtype="None",
        dataset_config="None",
        learning_rate="2e-4",
        max_steps="7",
        packing="false",
        seed=3.0,
        wandb_run_name=12,
        num_train_epochs=2,
    )
    assert cfg.target_modules == ("q_proj", "v_proj")
    assert cfg.prompts == ("Hi there",)
    assert cfg.dtype is None and cfg.dataset_config is None
    assert (cfg.learning_rate, cfg.max_steps, cfg.packing, cfg.seed) == (2e-4, 7, False, 3)
    assert cfg.wandb_run_name == "12" and cfg.num_train_epochs == 2.0 and isinstance(cfg.num_train_epochs, float)
    assert FinetuneConfig(dtype="auto").dtype is None


def test_to_dict_is_json_ready():
    import json

    d = FinetuneConfig().to_dict()
    assert d["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert json.loads(json.dumps(d)) == d


def test_export_formats_take_a_list_or_commas_and_a_wrong_one_is_named():
    from tinyllama_ft.config.finetune import EXPORT_FORMATS

    assert FinetuneConfig().export_formats == ()
    assert FinetuneConfig(export_formats="merged_16bit,gguf_q8_0").export_formats == ("merged_16bit", "gguf_q8_0")
    assert FinetuneConfig(export_formats=list(EXPORT_FORMATS)).export_formats == EXPORT_FORMATS
    with pytest.raises(
        ValueError,
        match=r"FinetuneConfig\.export_formats: 'gguf_q5' is not allowed: one of \('merged_16bit', 'gguf_f16'",
    ):
        FinetuneConfig(export_formats=["merged_16bit", "gguf_q5"])


@pytest.mark.parametrize(
    "values, named",
    [
        ({"extra_datasets": "more.jsonl"}, r"extra_datasets=\['more.jsonl'\] is read for conversations only"),
        ({"dataset_format": "messages", "long_rows": "split"}, r"long_rows='split' does not apply to conversations"),
        ({"dataset_format": "auto", "packing_strategy": "wrapped"}, r"packing_strategy='wrapped' cuts conversations"),
        ({"learning_rate": "inf"}, r"learning_rate=inf is not allowed: a finite number"),
        ({"learning_rate": float("nan")}, r"learning_rate=nan is not allowed: a finite number"),
        ({"warmup_ratio": "nan"}, r"warmup_ratio=nan is not allowed"),
        ({"gpu_memory_cap_gib": "inf"}, r"gpu_memory_cap_gib=inf is not allowed"),
        (
            {"method": "dpo", "loss_type": "sigmoid,ipo", "loss_weights": "1,inf"},
            r"loss_weights: inf is not allowed: a fi",
        ),
        ({"method": "grpo", "reward_weights": [1.0, float("nan")]}, r"reward_weights: nan is not allowed: a finite"),
        ({"resume": True, "overwrite_output_dir": True}, r"resume=True and overwrite_output_dir=True contradict"),
    ],
)
def test_contradictions_stop_where_the_config_is_built(values, named):
    """Each rule between fields (and a non-finite number) is refused by FinetuneConfig itself, before anything
    loads: before, extra_datasets with Alpaca rows was never read, long_rows='split' with conversations failed
    only after the model had loaded, and learning_rate=inf trained."""
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=named):
        FinetuneConfig.from_mapping(values)
    FinetuneConfig.from_mapping({"dataset_format": "auto", "extra_datasets": "more.jsonl"})  # the valid pairing


@pytest.mark.parametrize(
    "adapter_dir, named",
    [
        ("runs/x", "is output_dir='runs/x' or holds it"),
        ("runs", "or holds it"),
        ("runs/x/checkpoint-20/adapter", "inside a checkpoint of output_dir"),
    ],
)
def test_an_adapter_dir_that_would_swallow_the_run_is_refused(adapter_dir, named):
    """Saving the adapter replaces adapter_dir whole: pointed at output_dir (or a folder holding it) it deleted the
    checkpoints and run_config.json; inside a checkpoint the trainer's rotation deletes it."""
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=named):
        FinetuneConfig(output_dir="runs/x", adapter_dir=adapter_dir)
    FinetuneConfig(output_dir="runs/x", adapter_dir="runs/x/lora_model")  # inside output_dir, its own folder: fine
