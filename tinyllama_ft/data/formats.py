"""What differs between a run on Alpaca rows and a run on conversations, as one object per ``dataset_format``.

The run (``pipeline.run_training``, the notebooks) is written once and given one of these: ``AlpacaFormat``
(Alpaca prompt, loss on the response, stop at EOS) or ``ConversationFormat`` (the model's chat template, loss on
assistant turns, stop at the end-of-turn token); a preference method's ``preference_format.PreferenceFormat`` and
GRPO's ``grpo_format.GrpoFormat`` wrap either (``WrappedFormat``). Each says how rows are read, fingerprinted,
tokenized and prompted, what the model needs before LoRA, what the held-out checks compare and what the summary adds.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..config.coercion import ConfigError
from ..config.finetune import DEFAULTS
from ..config.locations import check_source
from ..config.methods import METHODS
from ..models.chat_templates import adds_bos, chat_ollama_template, chat_prompt, suffixed_chat_template
from ..models.chat_templates import stop_token_ids as template_stop_ids
from ..models.adapters import check_start_adapter
from ..models.demo_model import check_model_source
from ..models.families import prepare_family
from ..models.run_record import PROMPT_SUFFIX, resolve_settings, with_suffix
from . import chat_masks
from .alpaca_chat_template import jinja_chat_template, ollama_template as alpaca_ollama_template, stop_strings
from .alpaca_prompts import format_prompt
from .conversations import load_conversation_sources
from .eos_check import describe_eos, eos_first_batch
from .fingerprint import FINGERPRINT_FIELDS, data_fingerprint
from .instructions import load_instruction_data
from .lengths import apply_long_rows, length_report
from .text_documents import chunk_ids, document_ids, forgetting_rows, load_documents, tokenize_documents
from .tokenization import alpaca_segments, tokenize_dataset, tokenize_segments


def _alpaca_fields(row: dict) -> tuple[str, str, str]:
    try:
        return row["instruction"], row.get("input") or "", row["output"]
    except (KeyError, AttributeError, TypeError) as err:
        raise ValueError(f"row {row!r:.80} lacks instruction/output ({err})") from None


class _Format:
    """What every format has unless it says otherwise."""

    #: Rows ``split_train_eval`` holds out at least (``test_size`` > 0).
    min_test_rows = 1
    #: Rows at the front that are the held-out set as dealt by the source (``split_train_eval``'s ``first``; a pair:
    #: validation then test rows); 0: a seeded random split.
    held_out_first: int | tuple[int, int] = 0
    pairs = False  # the rows are no preference pairs
    rollouts = False  # the held-out checks score reference responses (GRPO's sample answers instead)
    #: The side-by-side table (``side_by_side.compare_answers``) gives each row's ``reference`` beside the answers.
    side_by_side_reference = True
    first_batch = None  # what check_first_batch found
    family = None  # the chat setup (families.FamilySetup) of conversations, once prepared
    #: What the run added after each question (a saved GRPO adapter's record: ``run_record.PROMPT_SUFFIX``).
    prompt_suffix = ""
    takes_input = False  # a prompt has an input besides the question (generate's ``inputs``)
    #: A saved adapter of this form may be continued on rows of another (a text adapter: instructions on top).
    continued_by_any_form = False
    #: Alpaca rows scored before and after training beside the run's own (a text run's forgetting check).
    forgetting_rows: list[dict] = []
    recorded_stop_ids = None  # a saved chat adapter's stop ids (``from_record``), the chat setup being its tokenizer's
    trains_embeddings = False  # no chat template: no added tokens
    #: The columns of a row: hashed by ``fingerprint``, read by the held-out checks; None: every column.
    fields: tuple[str, ...] | None = None

    def continues_on(self, form: str) -> bool:
        """A saved adapter of this format may be continued on rows of ``form`` (another format's ``form``): its own,
        or any for a format ``continued_by_any_form``. ``check_continued`` and a preference run's rows ask it."""
        return self.continued_by_any_form or form == self.form

    def fingerprint(self, rows) -> str:
        """``fingerprint.data_fingerprint`` over ``fields`` (None: every column of the ``datasets.Dataset``)."""
        return data_fingerprint(rows, fields=self.fields or tuple(rows.column_names))

    def prepare(self, model, tokenizer, cfg) -> tuple[str, ...] | None:
        """Nothing to set (the tokenizer's pad token is set on loading); returns ``cfg.target_modules``."""
        return cfg.target_modules

    def stop_token_ids(self, tokenizer) -> list[int]:
        """``[EOS id]``: what every training sample ends with."""
        return [tokenizer.eos_token_id]

    def held_out_rows(self, dataset) -> list[dict]:
        """A held-out split's ``fields`` (those it has; None: every column) as plain dicts; None (no split) gives []."""
        if dataset is None:
            return []
        columns = dataset.column_names if self.fields is None else [c for c in self.fields if c in dataset.column_names]
        return dataset.select_columns(columns).to_list()


class AlpacaFormat(_Format):
    """Alpaca rows: instruction, optional input, output; the article's prompt and EOS.

    Args:
        template: the prompt template (``alpaca_prompts.TEMPLATES``; ``DEFAULTS.template``).
    """

    name = "alpaca"
    takes_input = True
    #: The rows' form (``preferences.FORMS``), the setting its prompt depends on, and what it is in messages.
    form, setting, trained_on, rows = "text", "template", "Alpaca prompts", "text"
    #: Tokenizer-call arguments of a generation prompt, as training rows are tokenized
    #: (``tokenization.tokenize_segments``): special-token text typed by a user stays text.
    encode_kwargs = {"split_special_tokens": True}
    fields = FINGERPRINT_FIELDS
    lengths = None  # the length report, by tokenize

    def __init__(self, template: str = DEFAULTS.template):
        self.template = template

    @classmethod
    def from_record(cls, record, template: str) -> AlpacaFormat:
        """A saved adapter's format (``recorded_data_format``): ``template`` as resolved against its record."""
        return cls(template)

    def __repr__(self) -> str:
        return f"AlpacaFormat(template={self.template!r})"

    def __str__(self) -> str:
        rows = "Alpaca rows (instruction, input, output)"
        return f"data format: {rows}, the {self.template!r} prompt, answers ending in EOS"

    # reading
    def load(self, cfg):
        """``(rows, data_report)``: ``instructions.load_instruction_data`` with ``cfg``'s columns and ``strict``."""
        return load_instruction_data(
            cfg.dataset,
            split=cfg.dataset_split,
            config=cfg.dataset_config,
            instruction_column=cfg.instruction_column,
            input_column=cfg.input_column,
            output_column=cfg.output_column,
            strict=cfg.strict,
        )

    # ids and masks
    def tokenize(self, rows, tokenizer, cfg, data_report=None):
        """The kept rows (a ``datasets.Dataset``, Alpaca columns beside ``input_ids`` + ``completion_mask``:
        ``tokenization.tokenize_dataset``), measured and handled per ``long_rows`` (``lengths``; the report printed,
        kept in ``self.lengths``)."""
        rows = tokenize_dataset(rows, tokenizer, template=self.template)
        lengths = length_report(
            rows,
            tokenizer,
            max_seq_length=cfg.max_seq_length,
            packing=cfg.packing,
            packing_strategy=cfg.packing_strategy,
            data_report=data_report,
        )
        rows, self.lengths = apply_long_rows(rows, lengths, policy=cfg.long_rows)
        print(self.lengths.summary())
        return rows

    def example(self, tokenizer, row: dict) -> str:
        """One tokenized row as the model reads it (its ids decoded)."""
        return tokenizer.decode(row["input_ids"])

    def check_first_batch(self, trainer) -> str:
        """``eos_check.eos_first_batch`` (kept in ``self.first_batch``), described in one line."""
        self.first_batch = eos_first_batch(trainer)
        return describe_eos(self.first_batch)

    # generation
    def prompt(self, tokenizer, text: str, context: str = "") -> str:
        """A user's instruction (``cfg.prompts``, with ``prompt_suffix``) as the Alpaca prompt with ``context`` as its
        input and an empty response."""
        return format_prompt(with_suffix(text, self.prompt_suffix), context, "", self.template)

    def exported_chat_template(self, tokenizer) -> str:
        """The Jinja chat template an exported model (and lm-eval) renders prompts with: exactly ``prompt``'s
        (``alpaca_chat_template.jinja_chat_template``), BOS first only if the tokenizer adds one."""
        return jinja_chat_template(self.template, self.prompt_suffix, bos=adds_bos(tokenizer))

    def ollama_template(self, tokenizer) -> tuple[str | None, list[str]]:
        """``(TEMPLATE, stop strings)`` of an Ollama Modelfile (``alpaca_chat_template.ollama_template``)."""
        return alpaca_ollama_template(self.template, self.prompt_suffix), stop_strings(
            tokenizer.eos_token, self.template
        )

    def row_prompt(self, tokenizer, row: dict) -> str:
        """A held-out row's prompt: its instruction and input, the response left empty."""
        instruction, context, _ = _alpaca_fields(row)
        return format_prompt(instruction, context, "", self.template)

    # held-out checks
    def score_ids(self, tokenizer, rows: Sequence[dict]) -> tuple[list[list[int]], list[list[int]]]:
        """``(ids, masks)`` per row as training tokenizes it (``tokenization.tokenize_segments``); masks are 1 on the
        response and EOS. Raises ValueError: a row without instruction/output, naming it."""
        return tokenize_segments([alpaca_segments(*_alpaca_fields(r), template=self.template) for r in rows], tokenizer)

    def reference(self, row: dict) -> str:
        """The row's reference answer (``output``)."""
        return _alpaca_fields(row)[2]

    def instruction(self, row: dict) -> tuple[str, str]:
        """``(instruction, input)`` of the row, for the side-by-side table."""
        return _alpaca_fields(row)[:2]

    def summary_fields(self) -> dict[str, Any]:
        """``summary.build_run_summary`` arguments: the length report and the first-batch EOS counts."""
        return {"length_report": self.lengths, "eos": self.first_batch}


def _last_answer(row: dict) -> tuple[list[dict], dict]:
    """``(the turns before the last assistant turn, that turn)`` of a ``messages`` row."""
    messages = list(row["messages"])
    for j in range(len(messages) - 1, -1, -1):
        if messages[j]["role"] == "assistant":
            return messages[:j], messages[j]
    raise ValueError(f"conversation {messages!r:.80} has no assistant turn")


class ConversationFormat(_Format):
    """Conversations (``messages`` rows; ShareGPT and Alpaca rows converted) through the model's chat template.

    Args:
        dataset_format: ``"auto"``, ``"messages"`` or ``"sharegpt"`` (how ``conversations.load_conversations``
            reads each source).
        chat_template: ``"auto"`` (the tokenizer's own, else the family's), a named template or a Jinja string
            (``families.prepare_family``).
        assistant_only_loss: loss on the assistant turns only (else on every token).
    """

    encode_kwargs = {"add_special_tokens": False}  # as apply_chat_template tokenizes: the template writes its BOS
    form, setting, trained_on, rows = "conversation", "chat_template", "conversations", "conversational"
    fields = ("messages",)

    def __init__(
        self,
        dataset_format: str = "auto",
        *,
        chat_template: str = DEFAULTS.chat_template,
        assistant_only_loss: bool = DEFAULTS.assistant_only_loss,
    ):
        self.name = dataset_format
        self.chat_template = chat_template
        self.assistant_only_loss = assistant_only_loss
        self.token_report = None

    @classmethod
    def from_record(cls, record, template=None) -> ConversationFormat:
        """A saved adapter's format (``recorded_data_format``): its layout, chat template and stop ids."""
        fmt = cls(record["dataset_format"], chat_template=record.get("chat_template") or DEFAULTS.chat_template)
        fmt.recorded_stop_ids = list(record.get("stop_token_ids") or ())
        return fmt

    def __repr__(self) -> str:
        return f"ConversationFormat({self.name!r}, chat_template={self.chat_template!r})"

    def __str__(self) -> str:
        rows = "messages or ShareGPT rows, read from each source" if self.name == "auto" else f"{self.name} rows"
        loss = "the assistant turns" if self.assistant_only_loss else "every token"
        return f"data format: conversations ({rows}) through the chat template {self.chat_template!r}, loss on {loss}"

    @property
    def trains_embeddings(self) -> bool:
        """True when the chat template added tokens: their embedding and LM-head rows train (and export whole)."""
        return bool(self.family and self.family.added_token_ids)

    def _family(self):
        if self.family is None:
            raise RuntimeError("call prepare(model, tokenizer, cfg) first: the chat template is set there")
        return self.family

    # reading
    def load(self, cfg):
        """``(rows, data_report)``: ``conversations.load_conversation_sources`` on ``dataset`` then
        ``extra_datasets``."""
        return load_conversation_sources(
            [cfg.dataset, *cfg.extra_datasets],
            split=cfg.dataset_split,
            config=cfg.dataset_config,
            dataset_format=self.name,
            strict=cfg.strict,
        )

    # the model
    def prepare(self, model, tokenizer, cfg) -> tuple[str, ...]:
        """``families.prepare_family`` in place (printed, kept in ``self.family``); returns the LoRA target modules:
        ``cfg.target_modules`` when set, else (the default, the Llama names) the model's own projections. Raises
        ValueError: as ``families.prepare_family``."""
        self.family = prepare_family(
            model, tokenizer, chat_template=self.chat_template, max_seq_length=cfg.max_seq_length
        )
        print(self.family)
        return self.family.target_modules if cfg.target_modules == DEFAULTS.target_modules else cfg.target_modules

    # ids and masks
    def tokenize(self, rows, tokenizer, cfg, data_report=None):
        """The kept rows (a ``datasets.Dataset``, ``messages`` beside ``input_ids`` + ``assistant_masks``:
        ``chat_masks.tokenize_conversations``; the report printed, kept in ``self.token_report``)."""
        rows, self.token_report = chat_masks.tokenize_conversations(
            rows,
            tokenizer,
            max_seq_length=cfg.max_seq_length,
            long_rows=cfg.long_rows,
            assistant_only_loss=self.assistant_only_loss,
            strict=cfg.strict,
        )
        return rows

    def example(self, tokenizer, row: dict) -> str:
        """One tokenized row with the supervised tokens in ``[[...]]`` (``chat_masks.show_supervision``)."""
        return chat_masks.show_supervision(tokenizer, row["input_ids"], row["assistant_masks"])

    def check_first_batch(self, trainer) -> str:
        """``chat_masks.assistant_supervision`` on the first batch (kept in ``self.first_batch``), in one line."""
        family = self._family()
        self.first_batch = chat_masks.assistant_supervision(trainer, family.stop_token_ids[0])
        return chat_masks.describe_supervision(self.first_batch, end_of_turn=family.end_of_turn)

    # generation
    def stop_token_ids(self, tokenizer) -> list[int]:
        """The template's end-of-turn token, then EOS and the generation config's EOS ids
        (``families.FamilySetup.stop_token_ids``); a saved adapter's: the recorded ones, else its template's."""
        if self.family is None and self.recorded_stop_ids is not None:
            return list(self.recorded_stop_ids) or template_stop_ids(tokenizer)
        return list(self._family().stop_token_ids)

    def prompt(self, tokenizer, text) -> str:
        """A user message (or a conversation's turns; ``prompt_suffix`` added to the last) as the chat template's
        generation prompt."""
        return chat_prompt(tokenizer, with_suffix(text, self.prompt_suffix))

    def exported_chat_template(self, tokenizer) -> str:
        """The Jinja chat template an exported model renders prompts with: the tokenizer's own, adding
        ``prompt_suffix`` (``chat_templates.suffixed_chat_template``, once). Raises ValueError: it has none."""
        if not tokenizer.chat_template:
            raise ValueError("a chat adapter's export keeps the tokenizer's own chat template, and it has none")
        if tokenizer.chat_template.startswith(suffixed_chat_template("", self.prompt_suffix)):
            return tokenizer.chat_template
        return suffixed_chat_template(tokenizer.chat_template, self.prompt_suffix)

    def ollama_template(self, tokenizer) -> tuple[str | None, list[str]]:
        """``(TEMPLATE, stop strings)`` of an Ollama Modelfile: no ``TEMPLATE`` (Ollama reads the GGUF's chat
        template) unless a ``prompt_suffix`` is added (``chat_templates.chat_ollama_template`` of
        ``exported_chat_template``); the stop ids' tokens (end-of-turn first) and EOS. Raises ValueError: no EOS."""
        if not tokenizer.eos_token:
            raise ValueError("eos_token is empty: a chat model's answers end with its end-of-turn token and EOS")
        stops = tokenizer.convert_ids_to_tokens(self.stop_token_ids(tokenizer))
        body = chat_ollama_template(tokenizer, self.exported_chat_template(tokenizer)) if self.prompt_suffix else None
        return body, [t for t in dict.fromkeys([*stops, tokenizer.eos_token]) if t]

    def row_prompt(self, tokenizer, row: dict) -> str:
        """A held-out conversation's prompt: its turns before the last assistant turn, then the assistant header."""
        return chat_prompt(tokenizer, _last_answer(row)[0])

    # held-out checks
    def score_ids(self, tokenizer, rows: Sequence[dict]) -> tuple[list[list[int]], list[list[int]]]:
        """``(ids, masks)`` per conversation as training tokenizes it (``chat_masks.tokenize_conversation``);
        masks are 1 on the assistant turns and their end-of-turn tokens."""
        end = self._family().end_of_turn
        encoded = [chat_masks.tokenize_conversation(tokenizer, r["messages"], end_of_turn=end) for r in rows]
        return [e["input_ids"] for e in encoded], [e["assistant_masks"] for e in encoded]

    def reference(self, row: dict) -> str:
        """The last assistant turn's text."""
        return _last_answer(row)[1]["content"]

    def instruction(self, row: dict) -> tuple[str, str]:
        """``(the last user message before the last assistant turn, "")``, for the side-by-side table."""
        before = [m["content"] for m in _last_answer(row)[0] if m["role"] == "user"]
        return (before[-1] if before else ""), ""

    def summary_fields(self) -> dict[str, Any]:
        """``summary.build_run_summary`` arguments: ``chat`` (family, end-of-turn token, stop ids, pad token,
        target modules, tokenized-row counts, the first-batch supervision counts)."""
        family, report = self._family(), self.token_report
        return {
            "chat": {
                "family": family.family,
                "end_of_turn": family.end_of_turn,
                "stop_token_ids": family.stop_token_ids,
                "pad_token": family.pad_token,
                "target_modules": list(family.target_modules),
                "rows_tokenized": report.total if report else None,
                "rows_kept": report.kept if report else None,
                "rows_dropped": report.by_reason if report else None,
                "supervision": self.first_batch,
            }
        }


#: Tokens of a held-out document's opening the side-by-side continuations start from (``TextFormat.row_prompt``).
OPENING_TOKENS = 32


class TextFormat(_Format):
    """Raw text (continued pretraining): documents from ``.txt`` / ``.md`` files or a ``text`` column
    (``text_documents``), each ending in EOS, loss on every token, long ones split into ``max_seq_length`` windows;
    prompted with the raw text itself (no template): a tuned model completes it.

    Args:
        max_seq_length: the training window (``FinetuneConfig.max_seq_length``): held-out documents are scored in
            windows of this many tokens, as training reads them.
    """

    name = "text"
    form, setting, trained_on, rows = "raw text", None, "raw text documents", "text"
    continued_by_any_form = True  # continued pretraining comes before instruction or preference tuning
    side_by_side_reference = False  # the rest of a document (``reference``), beside a short continuation of its opening
    encode_kwargs = AlpacaFormat.encode_kwargs  # as documents are tokenized (``text_documents.document_ids``)
    fields = ("text",)
    chunks = None  # the ChunkReport, by tokenize
    tokenizer = None  # the tokenizer tokenize read the documents with (``reference``, ``instruction``)

    def __init__(self, max_seq_length: int = DEFAULTS.max_seq_length):
        self.max_seq_length = max_seq_length

    @classmethod
    def from_record(cls, record, template=None) -> TextFormat:
        """A saved adapter's format (``recorded_data_format``): its recorded ``max_seq_length``."""
        return cls(record.get("max_seq_length") or DEFAULTS.max_seq_length)

    def __repr__(self) -> str:
        return f"TextFormat(max_seq_length={self.max_seq_length})"

    def __str__(self) -> str:
        return (
            f"data format: raw text documents, each ending in EOS, loss on every token, split into "
            f"{self.max_seq_length}-token windows when longer; prompts are completed as they are (no template)"
        )

    # reading
    def load(self, cfg):
        """``(rows, data_report)``: ``text_documents.load_documents`` of ``cfg.dataset``; the forgetting check's
        Alpaca rows (``text_documents.forgetting_rows``) kept in ``self.forgetting_rows``."""
        self.forgetting_rows = forgetting_rows(cfg)
        return load_documents(cfg.dataset, split=cfg.dataset_split, config=cfg.dataset_config, strict=cfg.strict)

    def tokenize(self, rows, tokenizer, cfg, data_report=None):
        """Whole documents (``text_documents.tokenize_documents``: ``text``, ``input_ids`` ending in EOS,
        ``completion_mask`` all 1), split into training windows by the trainer (``packing_strategy='bfd_split'``);
        the ``ChunkReport`` printed and kept in ``self.chunks``. Documents stay whole here so that the held-out
        split takes whole documents."""
        self.tokenizer = tokenizer
        rows, self.chunks = tokenize_documents(rows, tokenizer, max_seq_length=cfg.max_seq_length)
        print(self.chunks.summary())
        return rows

    def example(self, tokenizer, row: dict) -> str:
        """The first training window of a document as the model reads it (its ids decoded)."""
        ids = row["input_ids"]
        more = f" [... {len(ids) - self.max_seq_length} more tokens]" if len(ids) > self.max_seq_length else ""
        return tokenizer.decode(ids[: self.max_seq_length]) + more

    def check_first_batch(self, trainer) -> str:
        """``eos_check.eos_first_batch`` (kept in ``self.first_batch``) in one line: a window ends its document with
        one supervised EOS, or (a long document's earlier window) holds none; any other EOS is a fault named."""
        self.first_batch = counts = eos_first_batch(trainer)
        faults = counts["samples_with_several_eos"] + counts["eos_not_last"] + counts["eos_masked"]
        return (
            f"first batch: {counts['samples']} windows, {counts['samples_ok']} ending their document with its "
            f"supervised EOS, {counts['samples_without_eos']} continued in the next window"
            + (f"; {faults} with an EOS inside or masked (a tokenizer adding its own?)" if faults else "")
        )

    # generation
    def prompt(self, tokenizer, text: str, context: str = "") -> str:
        """The text itself (with ``prompt_suffix``), to be continued."""
        return with_suffix(text, self.prompt_suffix)

    def exported_chat_template(self, tokenizer) -> str:
        """A Jinja template that renders the messages' text as it is, one after another: a text model has no
        prompt format."""
        return "{% for message in messages %}{{ message['content'] }}{% endfor %}"

    def ollama_template(self, tokenizer) -> tuple[str | None, list[str]]:
        """``(TEMPLATE, stop strings)``: the prompt as it is, stopping at EOS."""
        return "{{ .Prompt }}", [tokenizer.eos_token]

    def _opening(self, tokenizer, row: dict) -> tuple[str, str]:
        ids = tokenizer(row["text"], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return tokenizer.decode(ids[:OPENING_TOKENS]), tokenizer.decode(ids[OPENING_TOKENS:])

    def row_prompt(self, tokenizer, row: dict) -> str:
        """A held-out document's first ``OPENING_TOKENS`` tokens, to be continued."""
        return self._opening(tokenizer, row)[0]

    # held-out checks
    def score_ids(self, tokenizer, rows: Sequence[dict]) -> tuple[list[list[int]], list[list[int]]]:
        """``(ids, masks)`` of each document's training windows (``text_documents.chunk_ids`` of
        ``document_ids``), all tokens scored: the mean loss over them is the held-out perplexity's log. A last
        window of one token (nothing to predict in it) is left out."""
        windows = [w for r in rows for w in chunk_ids(document_ids(tokenizer, r["text"]), self.max_seq_length)]
        windows = [w for w in windows if len(w) > 1]
        return windows, [[1] * len(w) for w in windows]

    def reference(self, row: dict) -> str:
        """The rest of the document after its opening (by the tokenizer ``tokenize`` read the documents with): the
        stopping count asks whether a document whose rest is short is ended with EOS. Raises RuntimeError: before
        ``tokenize``."""
        return self._opening(self._tokenizer(), row)[1]

    def instruction(self, row: dict) -> tuple[str, str]:
        """``(the opening, "")``, for the side-by-side table."""
        return self._opening(self._tokenizer(), row)[0], ""

    def _tokenizer(self):
        if self.tokenizer is None:
            raise RuntimeError("call tokenize(rows, tokenizer, cfg) first: the documents' tokenizer is kept there")
        return self.tokenizer

    def summary_fields(self) -> dict[str, Any]:
        """``summary.build_run_summary`` arguments: the first-batch EOS counts and the ``ChunkReport``."""
        return {"eos": self.first_batch, "chunks": self.chunks}


#: The format class of a saved adapter's recorded ``dataset_format`` (``run_record.recorded_format``); any other name
#: is a conversation layout. A new data form is one class here.
RECORDED_FORMATS = {"alpaca": AlpacaFormat, "text": TextFormat}


def recorded_data_format(record, *, template: str | None = None, where: str = "load_adapter"):
    """How a saved adapter is prompted, read from its record (``run_record.read_record``): the one place that reads
    it for ``generate``, ``export`` (merged chat template, GGUF, Ollama), a run continuing it and ``load_adapter``.

    Args:
        record: the adapter's record (``{}``: a PEFT folder from elsewhere, prompted as Alpaca).
        template: a ``template`` the caller gave (``--template``); None: the recorded one, else ``DEFAULTS``'.
        where: the caller, for messages.

    Returns:
        An ``AlpacaFormat`` or ``ConversationFormat`` (``RECORDED_FORMATS``) with the recorded ``prompt_suffix``.

    Raises:
        ConfigError: ``template`` contradicts the record, or is given for an adapter whose prompt does not use one.
    """
    cls = RECORDED_FORMATS.get(record.get("dataset_format") or "alpaca", ConversationFormat)  # none recorded: Alpaca
    if template is not None and cls.setting != "template":
        raise ConfigError(
            f"{where}: template={template!r}, but the adapter was trained on {cls.trained_on} "
            f"(dataset_format={record['dataset_format']!r}, chat_template={record.get('chat_template')!r}): "
            f"it is prompted through its chat template; leave template out"
        )
    given = {"template": template}
    fmt = cls.from_record(
        record, resolve_settings(record, given, defaults={"template": DEFAULTS.template}, where=where)["template"]
    )
    fmt.prompt_suffix = record.get(PROMPT_SUFFIX) or ""
    return fmt


def check_continued(cfg, record, *, flag: str = "adapter_name_or_path") -> None:
    """Check that a run continuing a saved adapter (``cfg.adapter_name_or_path``, ``record``: its record) prompts it
    as it was trained: rows of its form (``cfg.dataset_format``; any form continues a text adapter) and its
    ``template`` or ``chat_template``.

    Raises:
        ConfigError: either differs: names the field, both values and the fix.
    """
    fmt = recorded_data_format(record, where=flag)
    where = f"{flag}={cfg.adapter_name_or_path!r} was trained with"
    reads = RECORDED_FORMATS.get(cfg.dataset_format, ConversationFormat)
    if cfg.dataset_format != "auto" and not fmt.continues_on(reads.form):
        raise ConfigError(
            f"{where} {fmt.trained_on}, and dataset_format={cfg.dataset_format!r} reads {reads.trained_on} (its "
            f"record: dataset_format={fmt.name!r}): continue it on {fmt.rows} pairs (or "
            f"dataset_format 'auto')"
        )
    name = fmt.setting
    if name in record and record[name] != getattr(cfg, name):
        raise ConfigError(
            f"{where} {name}={record[name]!r} (recorded with it), and {name}={getattr(cfg, name)!r}: set "
            f"{name}={record[name]!r} to prompt it as it was trained"
        )


class WrappedFormat(_Format):
    """What a preference or GRPO format takes from the SFT format it wraps (``inner``: an ``AlpacaFormat`` for text,
    a ``ConversationFormat`` for conversations, set by ``load`` once the rows' form is read): the recorded name, the
    chat setup, how prompts are tokenized, the stop ids."""

    inner: AlpacaFormat | ConversationFormat | None = None
    #: The ``dataset_format`` values the rows can be read with, and the error's words for another one.
    dataset_formats: tuple[str, ...] = ()
    rows_are = ""
    #: What the rows are, as printed (``str``).
    rows_read = ""

    def __init__(
        self,
        method: str,
        *,
        dataset_format: str = "auto",
        template: str = DEFAULTS.template,
        chat_template: str = DEFAULTS.chat_template,
        adapter_name_or_path: str = DEFAULTS.adapter_name_or_path,
    ):
        if dataset_format not in self.dataset_formats:
            raise ValueError(f"dataset_format={dataset_format!r}: {self.rows_are}")
        self.method, self.dataset_format = method, dataset_format
        self.template, self.chat_template = template, chat_template
        self.adapter_name_or_path = adapter_name_or_path
        self.form = None

    @classmethod
    def from_config(cls, cfg):
        """The format of ``cfg``'s run (a ``FinetuneConfig``: its method, data form, template, continued adapter)."""
        names = ("dataset_format", "template", "chat_template", "adapter_name_or_path")
        return cls(cfg.method, **{name: getattr(cfg, name) for name in names})

    def __str__(self) -> str:
        rows = {"alpaca": "text rows", "messages": "conversations"}.get(self.dataset_format, "text or conversations")
        continuing = f", continuing the adapter {self.adapter_name_or_path!r}" if self.adapter_name_or_path else ""
        return f"data format: {self.rows_read} ({rows}{continuing})"

    def _wrap(self, text: bool) -> None:
        """Wrap an ``AlpacaFormat`` (``text``: the run's ``template``) or a ``ConversationFormat`` (the run's
        ``chat_template``, loss on the assistant turns)."""
        chat = ConversationFormat("messages", chat_template=self.chat_template, assistant_only_loss=True)
        self.inner = AlpacaFormat(self.template) if text else chat

    def _inner(self):
        if self.inner is None:
            raise RuntimeError("call load(cfg) first: the rows' form (text or conversations) is read there")
        return self.inner

    @property
    def name(self) -> str:
        """The SFT data format the adapter is recorded with (``run_record``): "alpaca" or "messages"."""
        return self._inner().name

    @property
    def family(self):
        """The chat setup of conversations (``families.FamilySetup``, once prepared), None for text."""
        return self._inner().family

    @property
    def encode_kwargs(self) -> dict:
        return self._inner().encode_kwargs

    @property
    def trains_embeddings(self) -> bool:
        """A chat template's added tokens train (``ConversationFormat.trains_embeddings``)."""
        return self._inner().trains_embeddings

    def prepare(self, model, tokenizer, cfg) -> tuple[str, ...] | None:
        """The wrapped format's ``prepare`` (for conversations: the chat template, stop ids and a pad token that is
        no stop token, ``families.prepare_family``). Returns the LoRA target modules."""
        return self._inner().prepare(model, tokenizer, cfg)

    def stop_token_ids(self, tokenizer) -> list[int]:
        """The wrapped format's stop ids: EOS (text), the template's end-of-turn token first (conversations)."""
        return self._inner().stop_token_ids(tokenizer)

    def prompt(self, tokenizer, text) -> str:
        """A user's question (or a conversation's turns) as training prompted it: ``prompt_suffix`` added
        (``run_record.with_suffix``; GRPO's layout line), in the wrapped format's generation prompt."""
        return self._inner().prompt(tokenizer, with_suffix(text, self.prompt_suffix))


def data_format(cfg):
    """The format object of a run (``cfg``: a ``FinetuneConfig``), built by its method's ``Method.data_format``:
    ``sft_format`` for SFT, ``preference_format.PreferenceFormat`` or ``grpo_format.GrpoFormat``."""
    return METHODS[cfg.method].resolve("data_format")(cfg)


def sft_format(cfg):
    """SFT's format: ``AlpacaFormat`` or ``ConversationFormat`` by ``cfg.dataset_format``."""
    if cfg.dataset_format == "alpaca":
        return AlpacaFormat(cfg.template)
    if cfg.dataset_format == "text":
        return TextFormat(cfg.max_seq_length)
    return ConversationFormat(
        cfg.dataset_format, chat_template=cfg.chat_template, assistant_only_loss=cfg.assistant_only_loss
    )


def check_sources(cfg, *, flag_prefix: str = "") -> None:
    """Check a run's model and data arguments before anything is read, written or loaded: each local path exists,
    each Hub id is answered for or cached (``config.locations.check_source``); GRPO's ``dataset: arithmetic`` is the
    package's own. The command line, ``pipeline.run_training`` and the notebooks call it.

    Args:
        cfg: the run's ``FinetuneConfig`` (``model_name``, ``dataset``, ``extra_datasets``, ``adapter_name_or_path``).
        flag_prefix: put before each field's name in messages (``"--"``: ``"--model_name: no such file or folder"``).

    Raises:
        config.locations.PathArgumentError: (a ConfigError) a local path that does not exist, or a value that is
            neither a path nor a Hub id; config.locations.HubUnreachableError: a Hub id the Hub does not answer for
            and the cache lacks; ``adapters.check_start_adapter``'s and ``check_continued``'s errors for
            ``adapter_name_or_path`` (not a saved adapter, or trained with another template, data form or RoPE
            scaling).
    """
    check_model_source(cfg.model_name, f"{flag_prefix}model_name")
    if cfg.dataset not in METHODS[cfg.method].generated:  # generated by the package: nothing to find
        check_source(cfg.dataset, f"{flag_prefix}dataset", repo_type="dataset")
    for i, extra in enumerate(cfg.extra_datasets):
        check_source(extra, f"{flag_prefix}extra_datasets[{i}]", repo_type="dataset")
    if cfg.adapter_name_or_path:
        if record := check_start_adapter(cfg, flag=f"{flag_prefix}adapter_name_or_path"):
            check_continued(cfg, record, flag=f"{flag_prefix}adapter_name_or_path")
