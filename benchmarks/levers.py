"""One speed lever at a time: the article's model, LoRA, rows and effective batch, with one thing changed.

Standalone (nothing from tinyllama_ft; benchmarks/common.py for the measurement), so what each lever
gives is measured apart from the package that adopts it. The effective batch (``--bs`` x ``--ga``
sequences of ``--seq`` tokens), learning-rate schedule, optimizer and LoRA stay the article's; the
levers are the micro-batch / accumulation split, gradient checkpointing, 4-bit or bf16 base weights,
the backend (Unsloth or transformers + PEFT), the attention kernel (``sdpa`` or ``flex_attention``,
which with TRL's padding-free packing masks each packed row from the others and skips masked blocks),
Liger's fused kernels (RMSNorm, RoPE, SwiGLU, linear + cross-entropy without materialising the logits)
and ``torch.compile``.

    python3 benchmarks/levers.py --model /tmp/tinyllama-shaped --data alpaca.jsonl --name NAME \\
        --backend unsloth|transformers [--bs 8 --ga 1] [--gc false] [--four-bit false] \\
        [--attn flex_attention] [--liger] [--compile]
"""

import argparse
import sys

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--model", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--steps", type=int, default=15)
ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--name", required=True)
ap.add_argument("--backend", choices=("unsloth", "transformers"), required=True)
ap.add_argument("--bs", type=int, default=2)
ap.add_argument("--ga", type=int, default=4)
ap.add_argument("--gc", choices=("true", "false", "unsloth"), default="true")
ap.add_argument("--four-bit", choices=("true", "false"), default="true")
ap.add_argument("--attn", default="sdpa")
ap.add_argument("--liger", action="store_true")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--profile", help="write a torch.profiler table of one timed step to this file")
a = ap.parse_args()

if a.backend == "unsloth":
    import unsloth  # noqa: F401  first: it patches transformers, TRL and peft

import torch
from trl import SFTTrainer

from common import Clock, alpaca_texts, read_rows, recipe_sft_config, train_and_report

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
gc = {"true": True, "false": False, "unsloth": "unsloth"}[a.gc]
four_bit = a.four_bit == "true"
bf16 = torch.cuda.get_device_capability(0)[0] >= 8
dtype = torch.bfloat16 if bf16 else torch.float16

if a.backend == "unsloth":
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=a.model, max_seq_length=a.seq, dtype=None, load_in_4bit=four_bit
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=32,
        target_modules=TARGETS,
        lora_alpha=32,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing=gc,
        random_state=3407,
    )
else:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    tokenizer.pad_token = tokenizer.unk_token
    quant = (
        BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
        )
        if four_bit
        else None
    )
    model = AutoModelForCausalLM.from_pretrained(
        a.model, quantization_config=quant, dtype=dtype, attn_implementation=a.attn, device_map={"": 0}
    )
    if four_bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(gc))
    torch.manual_seed(3407)
    model = get_peft_model(
        model,
        LoraConfig(r=32, lora_alpha=32, lora_dropout=0.0, bias="none", target_modules=TARGETS, task_type="CAUSAL_LM"),
    )

dataset = read_rows(a.data).map(alpaca_texts(tokenizer.eos_token), batched=True)
args = recipe_sft_config(
    a.name,
    a.steps,
    a.seq,
    bf16=bf16,
    per_device_train_batch_size=a.bs,
    gradient_accumulation_steps=a.ga,
    gradient_checkpointing=bool(gc),
    use_liger_kernel=a.liger,
    torch_compile=a.compile,
)
clock = Clock()
trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=dataset, args=args, callbacks=[clock])

if a.profile:
    from transformers import TrainerCallback

    class Profile(TrainerCallback):
        """Profile the optimizer step after the warm-up (step 5) and write the top CUDA ops."""

        def __init__(self):
            self.prof = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 5:
                self.prof = torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
                )
                self.prof.__enter__()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is not None:
                torch.cuda.synchronize()
                self.prof.__exit__(None, None, None)
                with open(a.profile, "w", encoding="utf-8") as f:
                    f.write(self.prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))
                self.prof = None

    trainer.add_callback(Profile())

train_and_report(trainer, clock, a.name, a.seq, a.bs, a.ga)
sys.stdout.flush()
