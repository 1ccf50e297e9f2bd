"""A GRPO run's data format (``method`` grpo): what ``formats.data_format`` returns for it.

The rows are prompts with reference answers (``grpo_prompts``; ``dataset: arithmetic`` generates the package's own
problems); TRL samples the completions. Prompts, stop tokens and the answers after training are those of the form the
prompts take, through the SFT format it wraps: the Alpaca prompt for text, the chat template for messages. The held-out
checks score greedy answers with the trainer's own reward functions (``evaluate.grpo_checks``).
"""

from __future__ import annotations

from typing import Any

from .arithmetic import SOURCE as ARITHMETIC, TRAIN as ARITHMETIC_TRAIN, arithmetic_splits
from .fingerprint import data_fingerprint
from .formats import AlpacaFormat, WrappedFormat
from ..models.chat_templates import chat_prompt
from .grpo_prompts import LAYOUT_SUFFIX, check_prompt_rows, drop_long_prompts, grpo_prompts
from .grpo_prompts import load_prompt_rows, prompt_token_ids
from .row_files import DataError

#: Held-out prompts the GRPO checks answer at least (``instructions.split_train_eval``'s ``min_test_rows``): 100, the
#: arithmetic demo's measure (docs/grpo.md).
MIN_HELD_OUT_PROMPTS = 100


def held_out_after_drops(first: int | tuple[int, ...], dropped: list[int]) -> int | tuple[int, ...]:
    """``first`` (rows at the front that are held out: one count, or one per held-out part in order) less the rows of
    each part whose indices are in ``dropped``."""
    counts = (first,) if isinstance(first, int) else first
    kept, start = [], 0
    for count in counts:
        kept.append(count - sum(start <= i < start + count for i in dropped))
        start += count
    return kept[0] if isinstance(first, int) else tuple(kept)


class GrpoFormat(WrappedFormat):
    """Prompt rows with reference answers for ``method`` grpo.

    ``load`` wraps the SFT format of the prompts' form (``WrappedFormat._wrap``; text prompts with "messages" take
    the chat one, each a user turn).

    Args:
        dataset_format: ``"alpaca"``, ``"messages"`` or ``"auto"`` (``grpo_prompts.grpo_prompts``).
        template, chat_template: as ``AlpacaFormat`` and ``ConversationFormat`` (``DEFAULTS``' values).
        adapter_name_or_path: the saved adapter the run continues, or "" (``DEFAULTS``': a fresh adapter).

    Raises:
        ValueError: another ``dataset_format`` (``sharegpt`` rows are conversations, not prompts).
    """

    min_test_rows = MIN_HELD_OUT_PROMPTS
    #: The held-out checks sample greedy answers and score them with the rewards (no reference response to score).
    rollouts = True
    side_by_side_reference = False  # its reference is the answer the rewards read, not a response to set beside one
    dataset_formats = ("alpaca", "messages", "auto")
    rows_are = "GRPO prompts are 'alpaca', 'messages' or 'auto'"
    #: What each question gets after it, in training and in answers (``grpo_prompts.with_suffix``); the adapter's
    #: record keeps it (``run_record.adapter_record``), so ``generate``, ``export`` and ``load_adapter`` add it too.
    prompt_suffix = LAYOUT_SUFFIX
    rows_read = "GRPO prompts with reference answers"
    prompts_dropped: list[int] | None = None  # by tokenize
    reward_funcs: list | None = None  # by check_first_batch

    def __init__(self, method: str = "grpo", **wrapping):
        super().__init__(method, **wrapping)

    def __repr__(self) -> str:
        return (
            f"GrpoFormat(dataset_format={self.dataset_format!r}, prompts {self.form or '?'}"
            f"{f', continuing {self.adapter_name_or_path!r}' if self.adapter_name_or_path else ''})"
        )

    @property
    def prompt_format(self) -> str:
        """How the prompts reach TRL (``grpo_prompts``' ``dataset_format``): "alpaca" or "messages"."""
        return "alpaca" if isinstance(self._inner(), AlpacaFormat) else "messages"

    # reading
    def load(self, cfg):
        """``(rows, data_report)``: the prompt rows of ``cfg.dataset`` (``grpo_prompts.load_prompt_rows`` with
        ``prompt_column``, ``answer_column``, ``strict``), or for ``dataset: arithmetic`` the package's own problems
        (``arithmetic.arithmetic_splits``: ``arithmetic.TRAIN`` training and ``MIN_HELD_OUT_PROMPTS`` validation
        problems, as many test problems with ``cfg.eval_split``, seeded with ``cfg.seed``, no operand set twice,
        checked as any rows; the held-out ones first, and ``held_out_first`` says how many (a pair: validation,
        test), so the checks read 25 of each kind); sets the form and the wrapped SFT format.
        Raises row_files.DataError: as ``load_prompt_rows``; chat prompts with ``dataset_format="alpaca"``."""
        if cfg.dataset == ARITHMETIC:
            test = MIN_HELD_OUT_PROMPTS if cfg.eval_split else 0  # a three-way split deals a test set after validation
            train, held, tested = arithmetic_splits(
                ARITHMETIC_TRAIN, validation=MIN_HELD_OUT_PROMPTS, test=test, seed=cfg.seed
            )
            rows, report, self.form = check_prompt_rows(held + tested + train, strict=True, source=ARITHMETIC)
            # the checks read these, 25 of each kind, whatever the seed's split
            self.held_out_first = (len(held), len(tested)) if cfg.eval_split else len(held)
            print(report.summary())
        else:
            rows, report, self.form = load_prompt_rows(
                cfg.dataset,
                split=cfg.dataset_split,
                config=cfg.dataset_config,
                prompt_column=cfg.prompt_column,
                answer_column=cfg.answer_column,
                strict=cfg.strict,
            )
        if self.form == "conversation" and self.dataset_format == "alpaca":
            raise DataError(
                f"{cfg.dataset}: the prompts are chat messages, and dataset_format='alpaca' fills text into the Alpaca "
                "template: use dataset_format='messages' or 'auto'"
            )
        self._wrap(self.form == "text" and self.dataset_format != "messages")
        print(f"{len(rows)} {self.form} prompts for method='grpo', prompted as {self.prompt_format}")
        return rows, report

    def fingerprint(self, rows) -> str:
        """``fingerprint.data_fingerprint`` over the prompt and the reference answer (as read)."""
        return data_fingerprint(rows, fields=("prompt", "answer"))

    # prompts
    def tokenize(self, rows, tokenizer, cfg, data_report=None):
        """Rows -> the prompt rows TRL samples from (``grpo_prompts.grpo_prompts``: each asking for the answer layout,
        in the wrapped format's form), prompts longer than ``max_seq_length - max_completion_length`` tokens dropped
        (``grpo_prompts.drop_long_prompts``; their indices kept in ``prompts_dropped``), one line printed.

        Returns:
            A ``datasets.Dataset`` with ``prompt``, ``answer`` and the rows' other columns.

        Raises:
            ValueError: every prompt is too long (as ``drop_long_prompts``).
        """
        prompts = grpo_prompts(
            rows, dataset_format=self.prompt_format, template=self.template, suffix=self.prompt_suffix
        )
        kept, self.prompts_dropped = drop_long_prompts(
            prompts, tokenizer, max_prompt_tokens=cfg.max_seq_length - cfg.max_completion_length
        )
        self.held_out_first = held_out_after_drops(self.held_out_first, self.prompts_dropped)
        print(
            f"prompts: {len(kept)} kept, {len(self.prompts_dropped)} dropped as longer than "
            f"{cfg.max_seq_length - cfg.max_completion_length} tokens (max_seq_length - max_completion_length)"
        )
        return kept

    def example(self, tokenizer, row: dict) -> str:
        """One prompt as the model reads it (TRL's tokenization, decoded) and its reference answer."""
        return f"{tokenizer.decode(prompt_token_ids(tokenizer, row['prompt']))}\n(reference answer: {row['answer']})"

    def check_first_batch(self, trainer) -> str:
        """What each optimizer step samples (no batch exists before training: TRL generates it), in one line, kept in
        ``first_batch``; the trainer's reward functions are kept in ``reward_funcs`` for the held-out checks, which
        score with exactly them."""
        args = trainer.args
        self.reward_funcs = list(trainer.reward_funcs)
        self.first_batch = {  # TRL generates once per optimizer step (steps_per_generation: gradient_accumulation_steps)
            "prompts_per_step": args.generation_batch_size // args.num_generations,
            "num_generations": args.num_generations,
            "max_completion_length": args.max_completion_length,
            "temperature": args.temperature,
            "loss_type": args.loss_type,
            "rewards": list(trainer.reward_func_names),
            "reward_weights": [float(w) for w in trainer.reward_weights],
            "scale_rewards": args.scale_rewards,
            "mask_truncated_completions": args.mask_truncated_completions,
        }
        weighted = ", ".join(
            f"{n} x {w:g}" for n, w in zip(self.first_batch["rewards"], self.first_batch["reward_weights"])
        )
        return (
            f"each step: {self.first_batch['prompts_per_step']} prompts x {args.num_generations} completions of at "
            f"most {args.max_completion_length} tokens, sampled at temperature {args.temperature} with the current "
            f"adapter; rewards {weighted}{'; cut completions masked' if args.mask_truncated_completions else ''}"
        )

    # generation
    def row_prompt(self, tokenizer, row: dict) -> str:
        """A held-out row's prompt, as TRL renders it (text as it is; messages through the chat template)."""
        prompt = row["prompt"]
        return prompt if isinstance(prompt, str) else chat_prompt(tokenizer, prompt)

    # held-out checks
    def reference(self, row: dict) -> str:
        """The reference answer."""
        return str(row["answer"])

    def instruction(self, row: dict) -> tuple[str, str]:
        """``(the question, "")`` for the side-by-side table: the last user turn, or the text prompt."""
        prompt = row["prompt"]
        return (prompt if isinstance(prompt, str) else prompt[-1]["content"]), ""

    def summary_fields(self) -> dict[str, Any]:
        """``summary.build_run_summary`` arguments: ``grpo`` (the prompts' form, how they were prompted, the prompts
        dropped as too long, what each step samples and the rewards), beside the wrapped format's (``chat`` for
        messages)."""
        fields = self._inner().summary_fields() if self.prompt_format == "messages" else {}
        fields["grpo"] = {
            "form": self.form,
            "prompt_format": self.prompt_format,
            "adapter_name_or_path": self.adapter_name_or_path or None,
            "prompts_dropped": len(self.prompts_dropped) if self.prompts_dropped is not None else None,
            "per_step": self.first_batch,
        }
        return fields
