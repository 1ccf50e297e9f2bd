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
# <a href="https://colab.research.google.com/github/tinyllama-ft/tinyllama-ft/blob/main/notebooks/finetune_tinyllama.ipynb" target="_parent"><img src="https://colab.research.google.com/assets/colab-badge.svg" alt="Open In Colab"/></a>
#
# # Fine-tune TinyLlama-1.1B with LoRA / QLoRA on Alpaca-cleaned
#
# The recipe of "Fine-tuning a Tiny-Llama model with Unsloth" (4-bit TinyLlama, LoRA r=32 on the seven
# projections, Alpaca prompts with EOS, TRL `SFTTrainer` with packing, W&B logging, save and reload the
# adapter, stream an answer), one helper call per cell. Press *Runtime > Run all* on a T4; or run it
# headlessly with `papermill -p NAME VALUE`. Each cell can be copied into another notebook as it is.

# %% [markdown]
# Install this package (skipped when it is already importable, e.g. a local checkout).

# %%
import importlib.util, subprocess, sys

if importlib.util.find_spec("tinyllama_ft") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "tinyllama-ft @ git+https://github.com/tinyllama-ft/tinyllama-ft"], check=True)

# %% [markdown]
# Every knob of the run. Defaults are the article's values (`max_steps=60` as Unsloth's notebooks;
# `-1` trains the article's full epoch). Model and dataset take a Hub id or a local path.

# %% tags=["parameters"]
model_name = "unsloth/tinyllama-bnb-4bit"  # @param {type:"string"}
dataset = "yahma/alpaca-cleaned"  # @param {type:"string"}
dataset_split = "train"  # @param {type:"string"}
instruction_column = "instruction"  # @param {type:"string"}
input_column = "input"  # @param {type:"string"}
output_column = "output"  # @param {type:"string"}
template = "alpaca"  # @param ["alpaca", "alpaca_no_input"]
max_seq_length = 4096  # @param {type:"integer"}
recipe = "fast"  # @param ["fast", "article"]
backend = "auto"  # @param ["auto", "unsloth", "transformers"]
dtype = None  # @param [None, "bfloat16", "float16", "float32"] {type:"raw"}
load_in_4bit = True  # @param {type:"boolean"}
trust_remote_code = False  # @param {type:"boolean"}
lora_r = 32  # @param {type:"integer"}
lora_alpha = 32  # @param {type:"integer"}
lora_dropout = 0.0  # @param {type:"number"}
target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # @param {type:"raw"}
gradient_checkpointing = True  # @param {type:"boolean"}
learning_rate = 2e-5  # @param {type:"number"}
per_device_train_batch_size = 2  # @param {type:"integer"}
gradient_accumulation_steps = 4  # @param {type:"integer"}
max_steps = 60  # @param {type:"integer"}
num_train_epochs = 1  # @param {type:"number"}
packing = True  # @param {type:"boolean"}
long_rows = "drop"  # @param ["drop", "truncate", "split"]
test_size = 0.004  # @param {type:"number"}
eval_steps = 20  # @param {type:"integer"}
save_steps = 20  # @param {type:"integer"}
output_dir = "outputs"  # @param {type:"string"}
resume = False  # @param {type:"boolean"}
overwrite_output_dir = False  # @param {type:"boolean"}
mount_drive = False  # @param {type:"boolean"}
strict = False  # @param {type:"boolean"}
report_to = "wandb"  # @param ["wandb", "none"]
wandb_project = "tiny-llama"  # @param {type:"string"}
wandb_run_name = "tiny-llama-unsloth-sft"  # @param {type:"string"}
seed = 3407  # @param {type:"integer"}
gpu_memory_cap_gib = 0  # @param {type:"number"}
prompts = ["What is the capital of France?"]  # @param {type:"raw"}
max_new_tokens = 64  # @param {type:"integer"}
reload_merged = True  # @param {type:"boolean"}

# %% [markdown]
# ## 1. GPU-aware install
# On Colab this installs the pinned Unsloth stack (and wandb); elsewhere it only prints the commands.

# %%
from tinyllama_ft.config import FinetuneConfig
from tinyllama_ft.hardware import detect_hardware, cap_gpu_memory, release_cuda_memory
from tinyllama_ft.install import install

cfg = FinetuneConfig.from_mapping(globals())
from tinyllama_ft.credentials import export_secrets
print("secrets:", export_secrets())
hardware = detect_hardware()
print(hardware)
install(with_wandb=cfg.report_to == "wandb", hardware=hardware)

# %% [markdown]
# ## How it will train
# `recipe="fast"` keeps the article's math (effective batch, schedule, optimizer, LoRA, 4-bit base) and picks the
# attention kernel, fused kernels, micro-batch and checkpointing for this machine; `recipe="article"` runs the
# article's cell values as they are.

# %%
from tinyllama_ft.precision import resolve_dtype
from tinyllama_ft.speed import plan_speed

speed = plan_speed(cfg, hardware, resolve_dtype(cfg.dtype, hardware))
print(speed.summary())
cfg = speed.apply(cfg)

# %% [markdown]
# ## Output folder
# On Colab put `output_dir` on Drive (e.g. `/content/drive/MyDrive/tinyllama`): a disconnect wipes the disk, and Drive
# is mounted automatically. An earlier run there is never overwritten silently: continue it with `resume=True`, or
# delete it with `overwrite_output_dir=True`.

# %%
from tinyllama_ft.runs import ensure_drive, prepare_output_dir

ensure_drive(cfg.output_dir, cfg.mount_drive, hardware.colab)
print(f"output_dir {cfg.output_dir!r}: {prepare_output_dir(cfg)}")

# %% [markdown]
# ## 2. Load the model
# Unsloth on a GPU, transformers elsewhere; `dtype=None` picks bf16 on Ampere+, fp16 on a T4, fp32 on a CPU.

# %%
from tinyllama_ft.modeling import load_model

cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)
model, tokenizer = load_model(cfg.model_name, cfg.max_seq_length, cfg.dtype, cfg.load_in_4bit, cfg.backend, hardware,
                              cfg.trust_remote_code, cfg.attn_implementation)
print(model.tinyllama_ft)

# %% [markdown]
# ## 3. LoRA adapters

# %%
from tinyllama_ft.lora import add_lora, trainable_parameters

model = add_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_bias, cfg.target_modules,
                 cfg.use_rslora, cfg.gradient_checkpointing, cfg.seed)
trainable = trainable_parameters(model)
print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")

# %% [markdown]
# ## 4. Data: Alpaca prompts with EOS, a small held-out set
# Rows longer than `max_seq_length` tokens (prompt + response + EOS) are counted before training and, with
# `long_rows="drop"`, removed; `"truncate"` keeps them for the trainer to cut, `"split"` spreads them over windows.

# %%
from tinyllama_ft.data import load_instruction_data, split_train_eval
from tinyllama_ft.lengths import apply_long_rows, length_report
from tinyllama_ft.prompts import make_formatting_func

rows, data_report = load_instruction_data(cfg.dataset, cfg.dataset_split, cfg.dataset_config, cfg.instruction_column,
                                          cfg.input_column, cfg.output_column, strict=cfg.strict)
rows = rows.map(make_formatting_func(tokenizer.eos_token, cfg.template), batched=True)
lengths = length_report(rows, tokenizer, cfg.max_seq_length, cfg.packing, cfg.packing_strategy, data_report)
rows, lengths = apply_long_rows(rows, lengths, cfg.long_rows)
print(lengths.summary())
train_dataset, eval_dataset = split_train_eval(rows, cfg.test_size, cfg.seed)
print(f"train rows: {len(train_dataset)}, eval rows: {len(eval_dataset) if eval_dataset else 0}")
print(train_dataset[0]["text"])

# %% [markdown]
# ## 5. Weights & Biases
# The key comes from `WANDB_API_KEY` or Colab's secrets; with neither and nobody to ask, the run logs offline.

# %%
from tinyllama_ft.tracking import start_tracking

tracking = start_tracking(cfg.report_to, cfg.wandb_project, cfg.wandb_run_name, cfg.output_dir, cfg.to_dict())
print(tracking)

# %% [markdown]
# ## 6. Trainer, and what it will do

# %%
from tinyllama_ft.training import build_trainer, eos_supervision, training_plan

trainer = build_trainer(model, tokenizer, train_dataset, eval_dataset, cfg, hardware, model.tinyllama_ft.dtype)
plan = training_plan(trainer)
eos = plan["eos_first_batch"] = None if cfg.packing and cfg.packing_strategy == "wrapped" else eos_supervision(trainer)
print(f"planned: {plan['planned_steps']} optimizer steps of {cfg.effective_batch_size} sequences x "
      f"{cfg.max_seq_length} tokens; about {plan['planned_tokens']:,} tokens "
      f"({plan['sequences']:,} packed sequences, {plan['steps_per_epoch']} steps per epoch)")
if eos is not None:
    print(f"first batch: {eos['samples']} samples, {eos['samples_ok']} ending in exactly one supervised EOS (without EOS: "
          f"{eos['samples_without_eos']}, several EOS: {eos['samples_with_several_eos']}, EOS masked: {eos['eos_masked']})")

# %% [markdown]
# ## 7. Train

# %%
from tinyllama_ft.tracking import finish_tracking
from tinyllama_ft.training import train_and_evaluate

results = train_and_evaluate(trainer, resume=cfg.resume)
finish_tracking(tracking)
print({k: results[k] for k in ("eval_loss_before", "eval_loss_after", "train_runtime_s", "train_tokens", "tokens_per_s", "peak_memory_gib")})

# %% [markdown]
# ## 8. Save the adapter (PEFT format, safetensors, tokenizer beside it)

# %%
from tinyllama_ft.adapters import save_adapter

adapter_dir = save_adapter(model, tokenizer, cfg.resolved_adapter_dir)
print(f"adapter saved to {adapter_dir}")

# %% [markdown]
# ## 9. Reload the adapter and answer
# `reload_merged=True` loads the base as it was trained, dequantized to 16 bits, with the adapter merged into its
# weights: the same model in one matrix per layer, which the stream below decodes with a compiled step.
# `False` reloads the article's way (4-bit base, adapter on top); so does a run trained with Unsloth (a T4), in the same
# runtime, since Unsloth has patched transformers' Llama code for the whole process (it says so).

# %%
from tinyllama_ft.adapters import load_adapter
from tinyllama_ft.generation import generate

load_info = model.tinyllama_ft  # what trained (the reload below may be another backend or precision)
del trainer, model
release_cuda_memory()
model, tokenizer = load_adapter(adapter_dir, cfg.max_seq_length, cfg.dtype, cfg.load_in_4bit, cfg.backend, hardware,
                                trust_remote_code=cfg.trust_remote_code, merged=cfg.reload_merged)
answers = generate(model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens, template=cfg.template)
for prompt, answer in zip(cfg.prompts, answers):
    print(f"### Instruction: {prompt}\n{answer}\n")

# %% [markdown]
# ## 10. Stream
# On a GPU, with the merged reload, requests of 1,000+ new tokens (or `decode="inductor"`) decode with a compiled
# static-cache step: ~27 s to compile once, then hundreds of tokens per second; shorter ones use `generate`.

# %%
from tinyllama_ft.generation import stream

streamed = stream(model, tokenizer, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens, template=cfg.template)

# %% [markdown]
# ## Run summary and loss curve

# %%
import os
from tinyllama_ft.plotting import loss_curve
from tinyllama_ft.summary import build_run_summary, write_run_summary

summary = build_run_summary(cfg, hardware, load_info, results, plan, data_report, trainable, adapter_dir,
                            [{"instruction": p, "response": a} for p, a in zip(cfg.prompts, streamed)],
                            length_report=lengths)
print(write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))
figure = loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))
