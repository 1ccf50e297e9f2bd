"""A preference run's data format (``method`` dpo, orpo, kto or simpo): what ``formats.data_format`` returns for it.

The rows are TRL's preference rows (``preferences``), tokenized by the package (``preference_tokens``); prompts,
stop tokens and the held-out checks are those of the form the rows are in, through the SFT format it wraps: the
Alpaca prompt for text, the chat template for conversations. A run continuing a saved adapter
(``adapter_name_or_path``) takes the form and template it recorded (``formats.check_continued``).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..config.coercion import ConfigError
from ..config.methods import METHODS
from ..models.adapter_fit import saved_embedding_rows
from ..models.adapters import saves_whole_modules
from ..models.run_record import read_record
from .chat_masks import show_supervision
from .formats import WrappedFormat, recorded_data_format
from .preference_tokens import describe_pair_supervision, pair_supervision, tokenize_preferences
from .preferences import load_preference_data
from .tokenization import without_rows

#: Held-out pairs the preference checks read at least (``instructions.split_train_eval``'s ``min_test_rows``).
MIN_HELD_OUT_PAIRS = 50
#: ``dataset_format`` -> the ``preferences.FORMS`` value the rows are read with.
FORM_OF = {"alpaca": "text", "messages": "conversation", "auto": "auto"}


def _with_prompt(row: dict, response: str) -> tuple[list[int], list[int]]:
    """``(ids, mask)`` of a tokenized row's prompt and its ``response`` ("chosen", or KTO's "completion"), the mask 1
    on the response (its end id included)."""
    prompt, ids = list(row["prompt_ids"]), list(row[f"{response}_ids"])
    return prompt + ids, [0] * len(prompt) + [1] * len(ids)


class PreferenceFormat(WrappedFormat):
    """Preference rows (pairs, or KTO's unpaired rows) for a preference ``method`` (dpo, orpo, kto, simpo).

    ``load`` wraps the SFT format of the rows' form (``WrappedFormat._wrap``).

    Args:
        method: ``"dpo"``, ``"orpo"``, ``"kto"`` or ``"simpo"``.
        dataset_format: ``"alpaca"`` (text rows), ``"messages"`` (conversations) or ``"auto"`` (read from the rows).
        template, chat_template: as ``AlpacaFormat`` and ``ConversationFormat``.
        adapter_name_or_path: the saved adapter the run continues, or "".

    Raises:
        ValueError: another ``dataset_format``.
    """

    min_test_rows = MIN_HELD_OUT_PAIRS
    dataset_formats = tuple(FORM_OF)
    rows_are = f"preference rows are one of {sorted(FORM_OF)}"
    layout = token_report = None  # by load and tokenize
    #: The continued adapter's recorded format (``formats.recorded_data_format``), by load; for one continued on
    #: rows of another form (a raw-text adapter: ``continued_by_any_form``) the wrapped format the rows are prompted in.
    trained = None

    @property
    def rows_read(self) -> str:
        return f"preference {METHODS[self.method].trains_on} for {METHODS[self.method].shown}"

    def __repr__(self) -> str:
        return (
            f"PreferenceFormat({self.method!r}, dataset_format={self.dataset_format!r}, rows {self.layout or '?'} "
            f"{self.form or '?'}{f', continuing {self.adapter_name_or_path!r}' if self.adapter_name_or_path else ''})"
        )

    @property
    def response(self) -> str:
        """The rows' response column: "chosen" of a pair, or "completion" of KTO's unpaired rows."""
        return "chosen" if self.pairs else "completion"

    @property
    def pairs(self) -> bool:
        """The rows are pairs: the held-out checks score preference accuracy on them (KTO's unpaired rows are not)."""
        return self.layout == "paired"

    @property
    def trains_embeddings(self) -> bool:
        """A chat template's added tokens train (``ConversationFormat.trains_embeddings``), or the continued adapter
        saved whole modules (its embeddings and LM head): both are exported whole."""
        continued = bool(self.adapter_name_or_path) and saves_whole_modules(self.adapter_name_or_path)
        return super().trains_embeddings or continued

    # reading
    def load(self, cfg):
        """``(rows, data_report)``: ``preferences.load_preference_data`` of ``cfg.dataset`` in the form
        ``dataset_format`` says (``"auto"``: the first row's), checked with ``strict``; sets ``layout``, ``form``
        and the wrapped SFT format.

        Raises:
            ValueError: as ``load_preference_data``; coercion.ConfigError: the rows' form is not the continued
                adapter's (text pairs for a chat adapter, or conversations for an Alpaca one).
        """
        rows, report, self.layout, self.form = load_preference_data(
            cfg.dataset,
            split=cfg.dataset_split,
            config=cfg.dataset_config,
            form=FORM_OF[self.dataset_format],
            input_column=cfg.input_column,
            strict=cfg.strict,
        )
        self._wrap(self.form == "text")
        if self.adapter_name_or_path:
            self._check_adapter_form()
        print(f"{self.layout} {self.form} rows for method={self.method!r}")
        return rows, report

    def _check_adapter_form(self) -> None:
        record = read_record(self.adapter_name_or_path)
        trained = recorded_data_format(record)
        if record and not trained.continues_on(self.form):
            raise ConfigError(
                f"adapter_name_or_path={self.adapter_name_or_path!r} was trained on {trained.trained_on}, and "
                f"{self.form} rows would be prompted otherwise: continue it on {trained.rows} preference rows"
            )
        self.trained = trained if trained.form == self.form else self._inner()

    # the model
    def prepare(self, model, tokenizer, cfg) -> tuple[str, ...] | None:
        """The wrapped format's ``prepare`` (a chat template, stop ids and pad token for conversations); a continued
        adapter's recorded stop ids must be the ones the template gives, and any embedding rows it saved the
        model's (the same tokens added).

        Returns:
            The LoRA target modules (as the wrapped format's; a continued adapter keeps its own).

        Raises:
            coercion.ConfigError: the continued adapter's stop ids or embedding rows differ from this tokenizer's.
        """
        modules = super().prepare(model, tokenizer, cfg)
        if self.adapter_name_or_path:
            self._check_adapter_tokens(model, tokenizer)
        return modules

    def _check_adapter_tokens(self, model, tokenizer) -> None:
        recorded = self.trained.recorded_stop_ids  # a chat adapter's
        stops = self.stop_token_ids(tokenizer)
        if recorded and list(recorded) != list(stops):
            raise ConfigError(
                f"adapter_name_or_path={self.adapter_name_or_path!r} recorded stop ids {list(recorded)}, and the "
                f"chat template here gives {list(stops)}: is model_name the base it was trained on?"
            )
        rows, here = saved_embedding_rows(self.adapter_name_or_path, model), model.get_input_embeddings().num_embeddings
        if rows and rows != here:
            raise ConfigError(
                f"adapter_name_or_path={self.adapter_name_or_path!r} saved embeddings of {rows} rows (a chat "
                f"template's added tokens), and the model here has {here} ({len(tokenizer)} tokens): continue it on "
                f"conversations with the chat_template it was trained with, on the base it was trained on"
            )

    # ids and masks
    def tokenize(self, rows, tokenizer, cfg, data_report=None):
        """Rows -> TRL's id columns (``preference_tokens.tokenize_preferences``: one end id per response, rows too
        long handled per ``long_rows``, the report printed and kept in ``self.token_report``), the checked text
        columns kept beside them for the held-out checks.

        Returns:
            The kept rows (a ``datasets.Dataset``).
        """
        import datasets

        tokenized, self.token_report = tokenize_preferences(
            rows,
            tokenizer,
            form=self.form,
            template=self.template,
            max_seq_length=cfg.max_seq_length,
            long_rows=cfg.long_rows,
            strict=cfg.strict,
            name=cfg.dataset,
        )
        if self.form == "conversation":  # the chat block of the summary counts these rows
            self._inner().token_report = self.token_report
        kept = without_rows(rows, [bad.index for bad in self.token_report.bad])
        features = datasets.Features({**rows.features, **tokenized.features})
        return datasets.Dataset.from_list([{**a, **b} for a, b in zip(kept, tokenized)], features=features)

    def example(self, tokenizer, row: dict) -> str:
        """One tokenized row as the model reads it, the supervised tokens in ``[[...]]``: the prompt and chosen
        response, then the rejected one (or the completion and its label)."""
        shown = show_supervision(tokenizer, *_with_prompt(row, self.response))
        if not self.pairs:
            return f"{shown}\n(label: {'desirable' if row['label'] else 'undesirable'})"
        rejected = show_supervision(tokenizer, row["rejected_ids"], [1] * len(row["rejected_ids"]))
        return f"{shown}\n(rejected: {rejected})"

    def check_first_batch(self, trainer) -> str:
        """``preference_tokens.pair_supervision`` on the first batch (kept in ``self.first_batch``), in one line."""
        tokenizer = trainer.processing_class
        end_id = self.stop_token_ids(tokenizer)[0]
        self.first_batch = pair_supervision(trainer, end_id)
        return describe_pair_supervision(self.first_batch, end_token=tokenizer.convert_ids_to_tokens(end_id))

    # generation
    def _sft_row(self, row: dict) -> dict:
        """A preference row as the wrapped format's row, its chosen response (or KTO completion) the reference."""
        response = row[self.response]
        if self.form == "text":
            return {"instruction": row["prompt"], "input": row.get("input") or "", "output": response}
        return {"messages": list(row["prompt"]) + list(response)}

    def row_prompt(self, tokenizer, row: dict) -> str:
        """A held-out row's prompt, as the wrapped format prompts it."""
        return self._inner().row_prompt(tokenizer, self._sft_row(row))

    # held-out checks
    def held_out_rows(self, dataset) -> list[dict]:
        """The held-out rows as plain dicts (text and ids): every pair, or KTO's desirable rows (their completion is
        the reference the stop checks compare with); None (no split) gives []."""
        rows = super().held_out_rows(dataset)
        return rows if self.pairs else [r for r in rows if r["label"]]

    def score_ids(self, tokenizer, rows: Sequence[dict]) -> tuple[list[list[int]], list[list[int]]]:
        """``(ids, masks)`` per row as training tokenized it: the prompt, then the chosen response (or completion)
        with its end id, the mask 1 on the response."""
        encoded = [_with_prompt(row, self.response) for row in rows]
        return [ids for ids, _ in encoded], [mask for _, mask in encoded]

    def reference(self, row: dict) -> str:
        """The chosen response's text (KTO: the desirable completion's)."""
        return self._inner().reference(self._sft_row(row))

    def instruction(self, row: dict) -> tuple[str, str]:
        """``(instruction, input)`` of the row, for the side-by-side table."""
        return self._inner().instruction(self._sft_row(row))

    def summary_fields(self) -> dict[str, Any]:
        """``summary.build_run_summary`` arguments: ``preference`` (method, rows' layout and form, the adapter
        continued, tokenized-row counts, the first-batch supervision counts), beside the wrapped format's
        (``chat`` for conversations)."""
        report = self.token_report
        fields = self._inner().summary_fields() if self.form == "conversation" else {}
        fields["preference"] = {
            "method": self.method,
            "layout": self.layout,
            "form": self.form,
            "adapter_name_or_path": self.adapter_name_or_path or None,
            "rows_tokenized": report.total if report else None,
            "rows_kept": report.kept if report else None,
            "rows_dropped": report.by_reason if report else None,
            "supervision": self.first_batch,
        }
        return fields
