"""The model cards a run saves, told what the libraries cannot know: TRL's card in ``output_dir`` (``README.md``, at
each checkpoint) and PEFT's beside the adapter (``save_pretrained``) name the folder the base was loaded from (the
demo model's converted GGUF in a cache) and no data set. ``CardFacts`` holds the base's Hub id (or says the base is a
local model), the data set (a Hub id or a file name) and the method; ``settle_card`` writes them into a card through
``huggingface_hub.ModelCard`` (``SettledCard`` after each checkpoint), and ``adapter_card`` fills huggingface_hub's
default template, PEFT's, for the adapter.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from transformers import TrainerCallback

from ..config.locations import GENERATED_DATASET
from ..config.methods import METHODS
from ..machine.paths import expand_path, is_local_path

#: The card's file name in a model folder (the Hub's).
CARD_FILE = "README.md"
#: The package's own tag on the cards it settles.
PACKAGE_TAG = "tinyllama-ft"
#: The line of TRL's card (``trl/templates/lm_model_card.md``) that names the base and the data set.
TRL_BASE_LINE = re.compile(r"^This model is a fine-tuned version of .*$", re.MULTILINE)
#: huggingface_hub's cache folder of a Hub model: ``models--<owner>--<name>/snapshots/<revision>``.
HUB_CACHE_FOLDER = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def _hub_id(text: str) -> str | None:
    """``text`` when it is a Hub id (``namespace/name`` or ``name``) and no local path, else None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not text or is_local_path(text):
        return None
    try:
        validate_repo_id(text)
    except HFValidationError:
        return None
    return text


def hub_base_model(model_name: str | os.PathLike) -> str | None:
    """The Hub id of the base a run's ``model_name`` names, or None for a local model with no Hub id.

    A Hub id is itself; the demo model's GGUF file (``demo_model.SMOLLM2_GGUF``, or the folder ``gguf_source``
    converted it into) is ``demo_model.SMOLLM2_HUB_ID``; a folder of huggingface_hub's cache is the repository it
    holds; a local folder whose ``config.json`` records a Hub id as ``_name_or_path`` (what older transformers saved)
    is that id. Anything else is a local model: no id is guessed.
    """
    from .demo_model import SMOLLM2_GGUF, SMOLLM2_HUB_ID
    from .gguf_source import MARKER, gguf_file_of

    text = expand_path(model_name)
    if _hub_id(text):
        return text
    path = Path(text)
    try:
        gguf = gguf_file_of(path)
    except ValueError:  # several GGUF files: not one model
        return None
    sources = [gguf] if gguf else []
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a converted GGUF: its marker names the file
        sources.append(Path(json.loads((path / MARKER).read_text(encoding="utf-8"))["source"]))
    if any(source.name == SMOLLM2_GGUF for source in sources):
        return SMOLLM2_HUB_ID
    cached = HUB_CACHE_FOLDER.search(path.resolve().as_posix()) if path.is_dir() else None
    if cached:
        return _hub_id("/".join(cached.groups()))
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return _hub_id(str(json.loads((path / "config.json").read_text(encoding="utf-8")).get("_name_or_path", "")))
    return None


@dataclass(frozen=True)
class CardFacts:
    """What a card says about a run.

    Attributes:
        base_model: the base's Hub id, or None for a local model (``hub_base_model``).
        base_label: the base as the run named it, its last path component when local (a card shows no local path).
        datasets: the data sets as the run named them: Hub ids, local files (their names), or GRPO's generated
            ``arithmetic`` problems.
        method: ``"sft"``, ``"dpo"``, ``"orpo"``, ``"kto"`` or ``"grpo"``.
    """

    base_model: str | None
    base_label: str
    datasets: tuple[str, ...]
    method: str

    @property
    def hub_datasets(self) -> list[str]:
        """The data sets that are Hub ids (the card's ``datasets`` metadata)."""
        return [d for d in self.datasets if not self._generated(d) and _hub_id(d)]

    @property
    def tags(self) -> list[str]:
        """The tags a card gets: the package's, the method's, and ``lora``."""
        return [PACKAGE_TAG, self.method, "lora"]

    def _generated(self, dataset: str) -> bool:
        return dataset in METHODS[self.method].generated

    def _dataset_text(self, dataset: str) -> str:
        if self._generated(dataset):
            return f"the arithmetic word problems {PACKAGE_TAG} generates (`dataset: {GENERATED_DATASET}`)"
        if dataset in self.hub_datasets:
            return f"the [{dataset}](https://huggingface.co/datasets/{dataset}) dataset"
        return f"the local file `{os.path.basename(expand_path(dataset).rstrip('/'))}`"

    @property
    def base_text(self) -> str:
        """The base as the card's text names it: a link to its Hub page, or "a local model" with its name."""
        if self.base_model:
            return f"[{self.base_model}](https://huggingface.co/{self.base_model})"
        return f"a local model (`{self.base_label}`, not on the Hugging Face Hub)"

    @property
    def data_text(self) -> str:
        """The data sets as the card's text names them: Hub links, local file names, GRPO's generated problems."""
        return " and ".join(self._dataset_text(d) for d in self.datasets)

    @property
    def method_name(self) -> str:
        """The method as the card names it (``"DPO"``)."""
        known = METHODS.get(self.method)  # a record of another version's method: its name as recorded
        return known.shown if known else self.method

    @property
    def sentence(self) -> str:
        """One sentence naming the base, the method and the data set, for the top of a card."""
        return (
            f"This model is a fine-tuned version of {self.base_text}, trained as a LoRA adapter with "
            f"{self.method_name} (`method: {self.method}`) on {self.data_text} by {PACKAGE_TAG}."
        )


def card_facts(values: Mapping) -> CardFacts:
    """``CardFacts`` from a run's values: a ``FinetuneConfig``'s ``to_dict()`` or an adapter's record (``model_name``,
    ``dataset``, ``extra_datasets`` (optional) and ``method``; a record without ``method`` is an SFT run's)."""
    name = expand_path(values["model_name"])
    base = hub_base_model(name)
    label = base or os.path.basename(name.rstrip("/")) or name
    datasets = (values["dataset"], *values.get("extra_datasets", ()))
    return CardFacts(base_model=base, base_label=label, datasets=tuple(datasets), method=values.get("method") or "sft")


def settle_card(path: str | os.PathLike, facts: CardFacts) -> None:
    """Write ``facts`` into the card at ``path`` (a library's ``README.md``): ``base_model`` (removed for a local base),
    ``datasets`` (the Hub ids), the tags (``base_model:adapter:...`` PEFT derived from the local folder replaced),
    and TRL's line naming the base and data set replaced by ``facts.sentence``. A missing card is left missing."""
    from huggingface_hub import ModelCard

    if not os.path.isfile(path):
        return
    card = ModelCard.load(path)
    adapter_tags = [t for t in card.data.tags or [] if t.startswith("base_model:adapter:")]
    tags = [t for t in card.data.tags or [] if t not in adapter_tags]
    if adapter_tags and facts.base_model:  # what the Hub derives from base_model, as PEFT writes it
        tags.append(f"base_model:adapter:{facts.base_model}")
    card.data.tags = tags + [t for t in facts.tags if t not in tags]
    card.data.base_model = facts.base_model
    card.data.datasets = facts.hub_datasets or None
    card.text = TRL_BASE_LINE.sub(facts.sentence.replace("\\", "\\\\"), card.text, count=1)
    card.save(path)


class SettledCard(TrainerCallback):
    """Settles TRL's card in ``output_dir`` each time a checkpoint writes it (``create_model_card``, then
    ``on_save``): ``settle_card`` with the run's ``facts``; ``sft_trainer.build_trainer`` adds it to every trainer."""

    def __init__(self, facts: CardFacts) -> None:
        self.facts = facts

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            settle_card(os.path.join(args.output_dir, CARD_FILE), self.facts)


@contextlib.contextmanager
def adapter_card(folder: str | os.PathLike, facts: CardFacts | None, *, name: str) -> Iterator[None]:
    """Around PEFT's ``save_pretrained(folder)``: before it, huggingface_hub's default card (the one PEFT starts from)
    filled in with ``facts`` (the summary sentence, the base, the training data and method) and titled ``name`` (the
    adapter folder's name); after it, PEFT's base (the local folder it loaded) replaced by ``settle_card``. ``facts``
    None: PEFT's card as it writes it."""
    if facts is None:
        yield
        return
    from huggingface_hub import ModelCard, ModelCardData

    path = os.path.join(folder, CARD_FILE)
    data = ModelCardData(
        base_model=facts.base_model,
        datasets=facts.hub_datasets or None,
        library_name="peft",
        pipeline_tag="text-generation",
        tags=facts.tags,
    )
    ModelCard.from_template(
        data,
        model_id=name,
        model_summary=facts.sentence,
        model_type="LoRA adapter (PEFT) of a causal language model",
        base_model=facts.base_text,
        training_data=facts.data_text[0].upper() + facts.data_text[1:] + ".",
        training_regime=f"{facts.method_name} with LoRA ({PACKAGE_TAG})",
    ).save(path)
    yield
    settle_card(path, facts)
