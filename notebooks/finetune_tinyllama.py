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
#       jupytext_version: 1.19.7
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
# Every knob of an Alpaca run, by section (the chat section's are in finetune_chat.ipynb); the defaults are the
# article's values (`max_steps=60` as Unsloth's notebooks; `-1` trains the article's full epoch). docs/parameters.md
# explains each one. `dataset_format = "text"` runs the same cells on raw documents instead (continued pretraining,
# `dataset` a folder of `.txt` / `.md` files or a `text` column: docs/text.md). The last line records the
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
forgetting_dataset = None  # @param {type:"raw"}
instruction_column = 'instruction'  # @param {type:"string"}
input_column = 'input'  # @param {type:"string"}
output_column = 'output'  # @param {type:"string"}
template = 'alpaca'  # @param ['alpaca', 'alpaca_no_input']
test_size = 0.004  # @param {type:"number"}
eval_split = None  # @param [None, 'validation', 'test'] {type:"raw"}
long_rows = 'drop'  # @param ['drop', 'truncate', 'split']
strict = False  # @param {type:"boolean"}
dataset_num_proc = 2  # @param {type:"raw"}
# chat (conversations) (dataset_format only: 'text' trains on raw documents, docs/text.md)
dataset_format = 'alpaca'  # @param ['alpaca', 'text']
# training
learning_rate = 2e-05  # @param {type:"number"}
embedding_learning_rate = None  # @param {type:"raw"}
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
benchmark_tasks = []  # @param {type:"raw"}
benchmark_limit = None  # @param {type:"raw"}
# export
export_formats = []  # @param {type:"raw"}
# generation
prompts = ['What is the capital of France?']  # @param {type:"raw"}
max_new_tokens = 64  # @param {type:"integer"}
reload_merged = True  # @param {type:"boolean"}
_names_at_parameters = set(globals())  # the configuration cell reads these and papermill's additions

# %% [markdown]
# ## 1. Configuration and machine
# One object holds the run's values; a misspelt parameter or a wrong type stops here, naming it. `fmt` is the
# run's data format (`dataset_format="alpaca"`: Alpaca rows, the article's prompt with EOS, loss on the response).
#
# Colab secrets `WANDB_API_KEY` / `HF_TOKEN` reach the environment (never printed); what this machine has (CUDA,
# compute capability, bf16, Colab) decides everything after; on Colab the pinned stack is installed (elsewhere the
# commands are printed).

# %%
from tinyllama_ft.config.sources import config_from_notebook
from tinyllama_ft.data.formats import data_format

cfg = config_from_notebook(globals(), names_before=_names_at_parameters)
fmt = data_format(cfg)  # what differs between Alpaca rows, conversations and preference pairs: the cells below are the same
print(fmt)

# %%
from tinyllama_ft.config.secrets import export_secrets
from tinyllama_ft.machine.hardware import detect_hardware
from tinyllama_ft.machine.install import install
from tinyllama_ft.machine.kernel import quiet_library_bars

quiet_library_bars()  # under papermill: no library progress bar (stuck at 0% there); a notebook in use keeps them
print("secrets:", export_secrets())
hardware = detect_hardware()
print(hardware)
install_plan = install(with_wandb=cfg.report_to == "wandb", hardware=hardware)

# %% [markdown]
# ## 2. How it will run
# The execution plan, decided once: backend (Unsloth on a GPU, transformers + PEFT elsewhere), dtype, attention
# kernel, micro-batch x accumulation, gradient checkpointing, optimizer.

# %%
from tinyllama_ft.export.adapter_export import check_export_tools
from tinyllama_ft.train.plan import plan_run

plan = plan_run(cfg, hardware)
print(plan.summary())
check_export_tools(cfg.export_formats)  # e.g. gguf_q4_k_m without llama.cpp's quantizer stops here, not after training

# %% [markdown]
# ## 3. Data and output folder
# On Colab put `output_dir` on Drive (e.g. `/content/drive/MyDrive/tinyllama`): it is mounted automatically. Then
# the rows: a Hub id or a local file (JSON, JSONL, CSV, Parquet). A row with an empty instruction or output is
# dropped and counted, or `strict=True` names it.
#
# One run per folder: the run lock is taken here (released by the last cell), and an earlier run is never
# overwritten silently (`resume=True` continues it, `overwrite_output_dir=True` starts over).

# %%
from tinyllama_ft.data.formats import check_sources
from tinyllama_ft.train.output_dir import ensure_drive

drive_mounted = ensure_drive(cfg.output_dir, mount_drive=cfg.mount_drive, colab=hardware.colab)
check_sources(cfg)  # a missing model or data path, or an unreachable Hub id: one line, before output_dir is touched
rows, data_report = fmt.load(cfg)

# %%
from tinyllama_ft.train.output_dir import prepare_output_dir

print(f"output_dir {cfg.output_dir!r}: {prepare_output_dir(cfg, data_fingerprint=fmt.fingerprint(rows))}")

# %% [markdown]
# ## 4. Model and LoRA
# The model (4-bit on a GPU as the article: `unsloth/tinyllama-bnb-4bit`), with a pad token that is not EOS.
#
# LoRA adapters (r=32 on the seven projections, the article's values).

# %%
from tinyllama_ft.machine.hardware import cap_gpu_memory
from tinyllama_ft.models.loading import load_model

cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)  # 0 (the default): no cap
model, tokenizer = load_model(cfg.model_name, max_seq_length=cfg.max_seq_length, dtype=plan.dtype,
                              load_in_4bit=plan.load_in_4bit, backend=plan.backend,
                              attn_implementation=plan.attn_implementation, trust_remote_code=cfg.trust_remote_code,
                              hardware=hardware)

# %%
from tinyllama_ft.models.lora import add_lora, trainable_parameters

target_modules = fmt.prepare(model, tokenizer, cfg)
check_export_tools(cfg.export_formats, whole_modules=fmt.trains_embeddings)  # gguf_lora: LoRA matrices only
model = add_lora(model, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                 lora_bias=cfg.lora_bias, target_modules=target_modules, use_rslora=cfg.use_rslora,
                 gradient_checkpointing=plan.gradient_checkpointing, seed=cfg.seed, backend=plan.backend,
                 train_embeddings=fmt.trains_embeddings, adapter_name_or_path=cfg.adapter_name_or_path)
trainable = trainable_parameters(model)
print(f"trainable parameters: {trainable[0]:,} of {trainable[1]:,}")

# %% [markdown]
# ## 5. Tokenize and hold out
# Each row becomes the Alpaca prompt + response + EOS (as ids: special-token text typed in a row stays text), the
# loss on the response only; rows longer than `max_seq_length` are dropped, truncated or split (`long_rows`), counted.
# A held-out split for the eval loss; the first training row, as the model reads it.

# %%
from tinyllama_ft.data.instructions import split_train_eval

rows = fmt.tokenize(rows, tokenizer, cfg, data_report)
train_dataset, eval_dataset = split_train_eval(rows, test_size=cfg.test_size, seed=cfg.seed,
                                               min_test_rows=fmt.min_test_rows, first=fmt.held_out_first,
                                               eval_split=cfg.eval_split)
print(f"train rows: {len(train_dataset)}, eval rows: {len(eval_dataset) if eval_dataset else 0}")
print(fmt.example(tokenizer, train_dataset[0]))

# %% [markdown]
# ## 6. Trainer
# W&B (offline when no key is set, never a login prompt), then TRL's `SFTTrainer` with the values from `cfg` and
# this machine's execution from `plan`.
#
# What the loss sees, on the first collated batch: every sample ends in exactly one supervised EOS.
#
# The held-out check before training: response loss, full-text loss, the probability of the stop token where the
# reference ends, and how many greedy answers to short-answer prompts stop within 128 new tokens.

# %%
from tinyllama_ft.train.trainers import build_trainer, training_plan
from tinyllama_ft.train.tracking import start_tracking

tracking = start_tracking(report_to=cfg.report_to, wandb_project=cfg.wandb_project, wandb_run_name=cfg.wandb_run_name,
                          output_dir=cfg.output_dir, config=cfg.to_dict())  # one line: how the run logs
trainer = build_trainer(model=model, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
                        cfg=cfg, plan=plan)
work = training_plan(trainer)
print(f"planned: {work['planned_steps']} optimizer steps, about {work['planned_tokens']:,} tokens")

# %%
print(fmt.check_first_batch(trainer))

# %%
from tinyllama_ft.evaluate.held_out import held_out_check

held_out = fmt.held_out_rows(eval_dataset)
before = held_out_check(model, tokenizer, held_out, data_format=fmt, max_seq_length=cfg.max_seq_length)
if before is not None:  # None: no held-out rows (held_out_check said so)
    print(f"before: {before}")

# %% [markdown]
# ## 7. Train
# Eval loss before and after, tokens, tokens/s and peak memory.
#
# The same held-out check after training, and base vs. fine-tuned answers side by side (the adapter switched off,
# then on: one model in memory). With `benchmark_tasks` set (e.g. `['tinyllama_ft_mmlu']`, or `['mmlu', 'gsm8k']` where
# the Hub answers), lm-evaluation-harness scores them with the adapter off and on (docs/evaluation.md).

# %%
from tinyllama_ft.train.loop import train_and_evaluate
from tinyllama_ft.train.summary import format_results

results = train_and_evaluate(trainer, resume=cfg.resume)
print(format_results(results))

# %%
from tinyllama_ft.evaluate.side_by_side import compare_answers, show_answers

after = held_out_check(model, tokenizer, held_out, data_format=fmt, max_seq_length=cfg.max_seq_length)
if after is not None:
    print(f"before: {before}\nafter:  {after}")
side_by_side = compare_answers(model, tokenizer, held_out[:4], data_format=fmt)
show_answers(side_by_side)

# %%
from tinyllama_ft.evaluate.benchmarks import benchmarks_after_training
from tinyllama_ft.train.tracking import finish_tracking

benchmarks = benchmarks_after_training(model, tokenizer, cfg, data_format=fmt)  # benchmark_tasks: [] runs none
finish_tracking(tracking)

# %% [markdown]
# ## 8. Save and export
# The adapter in PEFT format (safetensors), the tokenizer and the run's record beside it, written atomically.
#
# Each of `export_formats` (merged 16-bit, GGUF f16 / q8_0 / q4_k_m, GGUF LoRA, Ollama) to
# `<output_dir>/export/<format>/`, with the Alpaca prompt as the chat template. Empty (the default): nothing.

# %%
from tinyllama_ft.models.adapters import save_adapter
from tinyllama_ft.models.run_record import adapter_record

adapter_dir = save_adapter(model, tokenizer, cfg.resolved_adapter_dir, record=adapter_record(cfg, plan, data_format=fmt))
print(f"adapter saved to {adapter_dir}")

# %%
from tinyllama_ft.export.adapter_export import describe_exports, export_adapter

exports = export_adapter(adapter_dir=adapter_dir, formats=cfg.export_formats, output_dir=cfg.output_dir,
                         hardware=hardware, trust_remote_code=cfg.trust_remote_code)
print(describe_exports(exports))

# %% [markdown]
# ## 9. Reload and answer
# Free the trainer and the training model, then reload the saved adapter (`reload_merged=True`: merged into a 16-bit
# base, which answers with the CUDA-graph decoder on a GPU).
#
# Greedy answers to `prompts` as Alpaca prompts, stopping at EOS.
# Each answer is printed as it is generated, token by token (a `TextStreamer`); on a GPU the first needs no
# compilation.
#
# In an interactive notebook, a box to type your own prompt and watch the answer stream (skipped under papermill).

# %%
from accelerate.utils import release_memory

from tinyllama_ft.models.adapters import load_adapter

trainer, model = release_memory(trainer, model)
model, tokenizer = load_adapter(adapter_dir, backend=plan.backend, hardware=hardware,
                                trust_remote_code=cfg.trust_remote_code, merged=cfg.reload_merged)

# %%
from tinyllama_ft.infer.generation import stream

streamed = stream(model, tokenizer, cfg.prompts, max_new_tokens=cfg.max_new_tokens, data_format=fmt)

# %%
from tinyllama_ft.infer.tryout import tryout_box

box = tryout_box(model, tokenizer, data_format=fmt)

# %% [markdown]
# ## 10. Run summary and loss curve
# `run_summary.json` records the configuration, the plan, the data report, the results, the held-out checks, the
# side-by-side answers and the samples.
#
# The train and eval loss curves (`loss_curve.png`), and the output folder's run lock released.

# %%
import os

from tinyllama_ft.evaluate.held_out import heldout_summary
from tinyllama_ft.infer.generation import as_samples
from tinyllama_ft.train.summary import build_run_summary, write_run_summary

summary = build_run_summary(cfg=cfg, plan=plan, hardware=hardware, results=results, work=work, data_report=data_report,
                            trainable=trainable, adapter_dir=adapter_dir, samples=as_samples(cfg.prompts, streamed),
                            heldout=heldout_summary(before, after, side_by_side), **fmt.summary_fields())
print("run summary:", write_run_summary(os.path.join(cfg.output_dir, "run_summary.json"), **summary))

# %%
from tinyllama_ft.machine.lock import release_run_lock
from tinyllama_ft.train.plotting import loss_curve

figure = loss_curve(results["log_history"], os.path.join(cfg.output_dir, "loss_curve.png"))
released = release_run_lock(cfg.output_dir)  # the run is over: another run may now use output_dir
