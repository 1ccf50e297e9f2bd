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
# Every knob of the run, by section; the defaults are the article's values (`max_steps=60` as Unsloth's notebooks;
# `-1` trains the article's full epoch). docs/parameters.md explains each one. The last line records the
# names defined so far: the next cell reads the parameters among them and what papermill's `-p` adds, nothing else.

# %% tags=["parameters"]
# model
model_name = 'unsloth/tinyllama-bnb-4bit'  # @param {type:"string"}
max_seq_length = 4096  # @param {type:"integer"}
dtype = None  # @param [None, 'bfloat16', 'float16', 'float32'] {type:"raw"}
load_in_4bit = True  # @param {type:"boolean"}
trust_remote_code = False  # @param {type:"boolean"}
recipe = 'fast'  # @param ['fast', 'article']
backend = 'auto'  # @param ['auto', 'unsloth', 'transformers']
attn_implementation = None  # @param {type:"raw"}
use_liger_kernel = False  # @param {type:"boolean"}
gpu_memory_cap_gib = 0.0  # @param {type:"number"}
# LoRA
lora_r = 32  # @param {type:"integer"}
lora_alpha = 32  # @param {type:"integer"}
lora_dropout = 0.0  # @param {type:"number"}
lora_bias = 'none'  # @param ['none', 'all', 'lora_only']
target_modules = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']  # @param {type:"raw"}
use_rslora = False  # @param {type:"boolean"}
gradient_checkpointing = True  # @param {type:"boolean"}
# data
dataset = 'yahma/alpaca-cleaned'  # @param {type:"string"}
dataset_split = 'train'  # @param {type:"string"}
dataset_config = None  # @param {type:"raw"}
instruction_column = 'instruction'  # @param {type:"string"}
input_column = 'input'  # @param {type:"string"}
output_column = 'output'  # @param {type:"string"}
template = 'alpaca'  # @param ['alpaca', 'alpaca_no_input']
test_size = 0.004  # @param {type:"number"}
long_rows = 'drop'  # @param ['drop', 'truncate', 'split']
strict = False  # @param {type:"boolean"}
dataset_num_proc = 2  # @param {type:"raw"}
# training
learning_rate = 2e-05  # @param {type:"number"}
lr_scheduler_type = 'linear'  # @param {type:"string"}
warmup_ratio = 0.1  # @param {type:"number"}
weight_decay = 0.1  # @param {type:"number"}
optim = None  # @param {type:"raw"}
per_device_train_batch_size = 2  # @param {type:"integer"}
gradient_accumulation_steps = 4  # @param {type:"integer"}
per_device_eval_batch_size = 2  # @param {type:"integer"}
max_steps = 60  # @param {type:"integer"}
num_train_epochs = 1.0  # @param {type:"number"}
packing = True  # @param {type:"boolean"}
packing_strategy = 'bfd'  # @param ['bfd', 'bfd_split', 'wrapped']
completion_only_loss = True  # @param {type:"boolean"}
eval_steps = 20  # @param {type:"integer"}
save_steps = 20  # @param {type:"integer"}
save_total_limit = 2  # @param {type:"integer"}
seed = 3407  # @param {type:"integer"}
# logging and output
report_to = 'wandb'  # @param ['wandb', 'none']
wandb_project = 'tiny-llama'  # @param {type:"string"}
wandb_run_name = 'tiny-llama-unsloth-sft'  # @param {type:"string"}
logging_steps = 1  # @param {type:"integer"}
output_dir = 'outputs'  # @param {type:"string"}
adapter_dir = ''  # @param {type:"string"}
resume = False  # @param {type:"boolean"}
overwrite_output_dir = False  # @param {type:"boolean"}
mount_drive = False  # @param {type:"boolean"}
# export
export_formats = []  # @param {type:"raw"}
# generation
prompts = ['What is the capital of France?']  # @param {type:"raw"}
max_new_tokens = 64  # @param {type:"integer"}
reload_merged = True  # @param {type:"boolean"}
_names_at_parameters = set(globals())  # the configuration cell reads these and papermill's additions

# %% [markdown]
# ## Configuration
# One object holds the run's values. A misspelt parameter (`-p lora_rank 8`) or a wrong type (`-p max_steps ten`)
# stops here with an error naming it (and the parameter meant); a secret-looking name is refused.

# %%
from tinyllama_ft.config.sources import config_from_notebook

cfg = config_from_notebook(globals(), names_before=_names_at_parameters)

# %% [markdown]
# ## 1. GPU-aware install
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
# On Colab this installs the pinned Unsloth stack (and wandb); elsewhere it only prints the commands.

# %%
from tinyllama_ft.machine.install import install

install(with_wandb=cfg.report_to == "wandb", hardware=hardware)

# %% [markdown]
# ## How it will run
# The execution plan, decided once: backend, dtype, attention kernel, fused kernels, micro-batch split of the effective
# batch, checkpointing, optimizer. `recipe="fast"` keeps the article's math and picks these for this machine;
# `recipe="article"` runs the article's cell values as they are. The configuration is not changed.

# %%
from tinyllama_ft.export.adapter_export import check_export_tools
from tinyllama_ft.train.plan import plan_run

plan = plan_run(cfg, hardware)
print(plan.summary())
check_export_tools(cfg.export_formats)  # e.g. gguf_q4_k_m without llama.cpp's quantizer stops here, not after training

# %% [markdown]
# ## Output folder
# On Colab put `output_dir` on Drive (e.g. `/content/drive/MyDrive/tinyllama`): a disconnect wipes the disk, and Drive
# is mounted automatically.

# %%
from tinyllama_ft.train.output_dir import ensure_drive

drive_mounted = ensure_drive(cfg.output_dir, mount_drive=cfg.mount_drive, colab=hardware.colab)

# %% [markdown]
# The training rows, read now (the dataset may be on Drive) so that the output folder records their fingerprint.
# Bad rows (wrong types, empty, duplicates, unparseable lines) are dropped and counted, or `strict=True` stops at the first.

# %%
from tinyllama_ft.data.instructions import load_instruction_data

rows, data_report = load_instruction_data(cfg.dataset, split=cfg.dataset_split, config=cfg.dataset_config,
                                          instruction_column=cfg.instruction_column, input_column=cfg.input_column,
                                          output_column=cfg.output_column, strict=cfg.strict)

# %% [markdown]
# One run per folder: this takes `output_dir`'s run lock (released by the last cell). An earlier run there is never
# overwritten silently: continue it with `resume=True` (its recorded identity and the rows' fingerprint must match),
# or delete it with `overwrite_output_dir=True`.

# %%
from tinyllama_ft.data.fingerprint import data_fingerprint
from tinyllama_ft.train.output_dir import prepare_output_dir

print(f"output_dir {cfg.output_dir!r}: "
      f"{prepare_output_dir(cfg, data_fingerprint=data_fingerprint(rows))}")

# %% [markdown]
# `gpu_memory_cap_gib` caps this process's GPU memory (15 imitates a T4 on a bigger GPU); 0 does nothing.

# %%
from tinyllama_ft.machine.hardware import cap_gpu_memory

cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)

# %% [markdown]
# ## 2. Load the model
# With the plan's backend, dtype, 4-bit choice and attention kernel; linear RoPE scaling past the trained positions.

# %%
from tinyllama_ft.models.loading import load_model

model, tokenizer = load_model(cfg.model_name, max_seq_length=cfg.max_seq_length, dtype=plan.dtype,
                              load_in_4bit=plan.load_in_4bit, backend=plan.backend,
                              attn_implementation=plan.attn_implementation, trust_remote_code=cfg.trust_remote_code,
                              hardware=hardware)

# %% [markdown]
# ## 3. LoRA adapters
# The article's r=32 on the seven projections; checkpointing as planned.

# %%
from tinyllama_ft.models.lora import add_lora

model = add_lora(model, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                 lora_bias=cfg.lora_bias, target_modules=cfg.target_modules, use_rslora=cfg.use_rslora,
                 gradient_checkpointing=plan.gradient_checkpointing, seed=cfg.seed, backend=plan.backend)

# %% [markdown]
# Only the adapter trains (TinyLlama-1.1B: 25,231,360 parameters).

# %%
from tinyllama_ft.models.lora import trainable_parameters

trainable = trainable_parameters(model)
print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")

# %% [markdown]
# ## 4. Data
# Alpaca prompts tokenized here, not by TRL: text from the data stays text (a literal `</s>` in a response is not an
# EOS), the template's EOS is appended once as an id, and `completion_mask` marks the response + EOS (the tokens
# `completion_only_loss` trains on). The rows above already carry the columns `instruction`, `input`, `output`,
# whatever your file calls them.

# %%
from tinyllama_ft.data.tokenization import tokenize_dataset

rows = tokenize_dataset(rows, tokenizer, template=cfg.template)

# %% [markdown]
# Rows longer than `max_seq_length` tokens (prompt + response + EOS) are counted before training.

# %%
from tinyllama_ft.data.lengths import length_report

lengths = length_report(rows, tokenizer, max_seq_length=cfg.max_seq_length, packing=cfg.packing,
                        packing_strategy=cfg.packing_strategy, data_report=data_report)

# %% [markdown]
# ... and handled per `long_rows`: `"drop"` removes them, `"truncate"` keeps them for the trainer to cut, `"split"`
# spreads them over windows.

# %%
from tinyllama_ft.data.lengths import apply_long_rows

rows, lengths = apply_long_rows(rows, lengths, policy=cfg.long_rows)
print(lengths.summary())

# %% [markdown]
# A small held-out set for the eval loss (the article's `test_size=0.004`).

# %%
from tinyllama_ft.data.instructions import split_train_eval

train_dataset, eval_dataset = split_train_eval(rows, test_size=cfg.test_size, seed=cfg.seed)
print(f"train rows: {len(train_dataset)}, eval rows: {len(eval_dataset) if eval_dataset else 0}")
print(tokenizer.decode(train_dataset[0]["input_ids"]))

# %% [markdown]
# ## 5. Weights & Biases
# The key comes from `WANDB_API_KEY` or Colab's secrets; with neither and nobody to ask, the run logs offline.

# %%
from tinyllama_ft.train.tracking import start_tracking

tracking = start_tracking(report_to=cfg.report_to, wandb_project=cfg.wandb_project, wandb_run_name=cfg.wandb_run_name,
                          output_dir=cfg.output_dir, config=cfg.to_dict())
print(tracking)

# %% [markdown]
# ## 6. Trainer
# TRL's `SFTTrainer` with the article's values from `cfg` and this machine's execution from `plan` (it takes both: it
# needs some 25 of their values; `trainer.sft_config_kwargs(cfg, plan, has_eval=True)` shows them). It prints one line
# per logging step while training.

# %%
from tinyllama_ft.train.sft_trainer import build_trainer

trainer = build_trainer(model=model, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
                        cfg=cfg, plan=plan)

# %% [markdown]
# What it will do: optimizer steps and tokens, counted on the packed dataset before training.

# %%
from tinyllama_ft.train.sft_trainer import training_plan

work = training_plan(trainer)
print(f"planned: {work['planned_steps']} optimizer steps of {plan.effective_batch_size} sequences x "
      f"{cfg.max_seq_length} tokens; about {work['planned_tokens']:,} tokens ({work['sequences']:,} packed sequences, "
      f"{work['steps_per_epoch']} steps per epoch)")

# %% [markdown]
# The first collated batch: every sample must end in exactly one supervised EOS, or the model never learns to stop.

# %%
from tinyllama_ft.data.eos_check import describe_eos, eos_first_batch

eos = eos_first_batch(trainer)
print(describe_eos(eos))

# %% [markdown]
# Held-out checks before training (the LoRA adapter starts at zero, so this is the base model): the response loss
# (what an answer costs), the full-text loss, perplexity, the probability of EOS right after each reference response
# (does the model know when to stop?), and how many of 20 short-answer instructions it answers with an EOS within
# 128 new tokens.

# %%
from tinyllama_ft.evaluate.held_out import held_out_check, held_out_rows

held_out = held_out_rows(eval_dataset)
before = held_out_check(model, tokenizer, held_out, template=cfg.template, max_seq_length=cfg.max_seq_length)
print(f"before: {before}")

# %% [markdown]
# ## 7. Train
# Eval loss before and after; tokens (non-padding, fed to the model), tokens/s, peak memory.

# %%
from tinyllama_ft.train.loop import train_and_evaluate

results = train_and_evaluate(trainer, resume=cfg.resume)
print({k: results[k] for k in ("eval_loss_before", "eval_loss_after", "train_runtime_s", "train_tokens", "tokens_per_s",
                               "peak_memory_gib")})

# %% [markdown]
# The same held-out checks after training.

# %%
after = held_out_check(model, tokenizer, held_out, template=cfg.template, max_seq_length=cfg.max_seq_length)
print(f"before: {before}\nafter:  {after}")

# %% [markdown]
# The base model's answers (the same weights with the adapter switched off, before any merge: no second model load)
# beside the fine-tuned model's, for a few held-out instructions. "[no EOS]": the answer did not stop within 128 tokens.

# %%
from tinyllama_ft.evaluate.side_by_side import compare_answers, show_answers

side_by_side = compare_answers(model, tokenizer, held_out[:4], template=cfg.template)
show_answers(side_by_side)

# %% [markdown]
# Close the W&B run (the article's `wandb.finish()`).

# %%
from tinyllama_ft.train.tracking import finish_tracking

finish_tracking(tracking)

# %% [markdown]
# ## 8. Save the adapter (PEFT format, safetensors, tokenizer beside it, written atomically)

# %%
from tinyllama_ft.models.adapters import save_adapter
from tinyllama_ft.models.run_record import adapter_record

adapter_dir = save_adapter(model, tokenizer, cfg.resolved_adapter_dir, record=adapter_record(cfg, plan))
print(f"adapter saved to {adapter_dir}")

# %% [markdown]
# ## Export (when `export_formats` asks)
# Each format to `<output_dir>/export/<format>/`: `merged_16bit` (plain transformers / vLLM folder with the Alpaca chat
# template), `gguf_f16` / `gguf_bf16` / `gguf_q8_0` (llama.cpp's own converter, an Ollama `Modelfile` beside each),
# `gguf_q4_k_m` (needs llama.cpp's quantizer), `gguf_lora`. Empty (the default): nothing happens. Disk space is
# checked first; each folder appears only when complete.

# %%
from tinyllama_ft.export.adapter_export import describe_exports, export_adapter

exports = export_adapter(adapter_dir=adapter_dir, formats=cfg.export_formats, output_dir=cfg.output_dir,
                         hardware=hardware, trust_remote_code=cfg.trust_remote_code)
print(describe_exports(exports))

# %% [markdown]
# ## 9. Reload the adapter and answer
# Free the training model and trainer first (accelerate's `release_memory`: garbage collection and the CUDA cache).

# %%
from accelerate.utils import release_memory

trainer, model = release_memory(trainer, model)

# %% [markdown]
# `reload_merged=True` loads the base as it was trained, dequantized to 16 bits, with the adapter merged into its
# weights: the same model in one matrix per layer, which the stream below decodes with a compiled step. `False` reloads
# the article's way (4-bit base, adapter on top); so does a run trained with Unsloth in the same runtime, since Unsloth
# has patched transformers' Llama code for the whole process (it says so).

# %%
from tinyllama_ft.models.adapters import load_adapter

model, tokenizer = load_adapter(adapter_dir, backend=plan.backend, hardware=hardware,
                                trust_remote_code=cfg.trust_remote_code, merged=cfg.reload_merged)

# %% [markdown]
# Greedy answers up to EOS, in one batch.

# %%
from tinyllama_ft.infer.generation import format_answers, generate

answers = generate(model, tokenizer, cfg.prompts, max_new_tokens=cfg.max_new_tokens, template=cfg.template)
print(format_answers(cfg.prompts, answers))

# %% [markdown]
# ## 10. Stream
# On a GPU, with the merged reload, requests of 1,000+ new tokens (or `decode="inductor"`) decode with a compiled
# static-cache step: ~27 s to compile once, then hundreds of tokens per second; shorter ones use `generate`.

# %%
from tinyllama_ft.infer.generation import stream

streamed = stream(model, tokenizer, cfg.prompts, max_new_tokens=cfg.max_new_tokens, template=cfg.template)

# %% [markdown]
# Try it: type an instruction and watch the answer stream (sliders for `max_new_tokens` and temperature; 0 is greedy).
# A headless run (papermill, a script) skips the box.

# %%
from tinyllama_ft.infer.tryout import tryout_box

box = tryout_box(model, tokenizer, template=cfg.template)

# %% [markdown]
# ## Run summary and loss curve
# `run_summary.json` records the configuration, the plan, the data and length reports, the results and the answers.

# %%
from tinyllama_ft.evaluate.held_out import heldout_summary
from tinyllama_ft.infer.generation import as_samples
from tinyllama_ft.train.summary import build_run_summary

summary = build_run_summary(cfg=cfg, plan=plan, hardware=hardware, results=results, work=work, data_report=data_report,
                            trainable=trainable, adapter_dir=adapter_dir, samples=as_samples(cfg.prompts, streamed),
                            length_report=lengths, eos=eos, heldout=heldout_summary(before, after, side_by_side))

# %% [markdown]
# Written atomically, with the library versions and the git commit.

# %%
import os
from tinyllama_ft.train.summary import write_run_summary

print(write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))

# %% [markdown]
# The training and eval loss per step.

# %%
from tinyllama_ft.train.plotting import loss_curve

figure = loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))

# %% [markdown]
# The run is over: another run may now use `output_dir` (a kernel that stops releases it too).

# %%
from tinyllama_ft.machine.lock import release_run_lock

release_run_lock(cfg.output_dir)
