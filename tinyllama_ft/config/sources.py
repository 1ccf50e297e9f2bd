"""Where a configuration comes from: the notebook's parameters, a YAML recipe, command-line flags.

All three end in ``FinetuneConfig.from_mapping`` and share its validation. ``config_from_notebook`` reads only
the fields among the names the parameters cell defined and those defined after it (papermill's injected cell),
never an unrelated global. Recipes are YAML files of flat field names, shipped in ``tinyllama_ft/recipes`` or
given by path (docs/parameters.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..machine.paths import expand_path
from .coercion import ConfigError
from .secrets import check_keys
from .finetune import FIELD_NAMES, FinetuneConfig, parse_values

#: The types of the values papermill (and Colab's forms) write into a notebook.
_LITERALS = (str, int, float, bool, type(None), list, tuple, dict)
#: The recipes that ship inside the package.
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


class RecipeNotFound(ConfigError, FileNotFoundError):
    """``--config`` names neither a file nor a shipped recipe (a configuration error: exit status 2)."""


def config_from_notebook(namespace: Mapping[str, Any], *, names_before: set[str] | frozenset[str]) -> FinetuneConfig:
    """``FinetuneConfig`` from the notebook's parameters: the fields the parameters cell defined, plus the names added
    after it.

    Args:
        namespace: the notebook's ``globals()``.
        names_before: the names recorded at the end of the parameters cell.

    Returns:
        The configuration of every field name in ``names_before`` that the namespace holds, and every public name (no
        leading ``_``) defined after the parameters cell with a value papermill can inject (a literal: str, number,
        bool, None, list, dict), field or not (``from_mapping`` refuses the others, naming them). Imported modules and
        functions (the config cell's own import) are not parameters.

    Raises:
        ConfigError: a name added after the parameters cell is not a field (e.g. papermill's ``-p lora_rank 8``:
            "did you mean lora_r?"), or a value has the wrong type (``-p max_steps ten``); ValueError: a
            secret-looking name (value not shown). A name defined by a later cell (the notebook run
            before) counts as added: run the parameters cell again first.
    """
    values = {name: namespace[name] for name in FIELD_NAMES if name in names_before and name in namespace}
    values.update(
        {
            name: value
            for name, value in namespace.items()
            if name not in names_before and not name.startswith("_") and isinstance(value, _LITERALS)
        }
    )
    return FinetuneConfig.from_mapping(values, where="notebook parameters (the parameters cell and papermill's -p)")


def recipe_names() -> list[str]:
    """Names of the recipes shipped in ``tinyllama_ft/recipes``."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """The YAML file for a shipped recipe's name (``"article"``) or a path (``"tests/recipes/chat_offline.yaml"``).

    Raises:
        RecipeNotFound: (a FileNotFoundError and a ConfigError) neither an existing file nor a shipped recipe (the
            message lists those).
    """
    path = Path(expand_path(name_or_path))
    if path.is_file():
        return path
    shipped = RECIPES_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    what = "is a folder, not a YAML file" if path.is_dir() else "no such file"
    raise RecipeNotFound(
        f"--config {name_or_path!r}: {what}, and not a shipped recipe (one of {', '.join(recipe_names())})"
    )


def _read_yaml(path: Path) -> Any:
    """A YAML file's content, refusing a key given twice in one mapping (PyYAML would keep the last silently)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ConfigError(
                        f"recipe {path}: {key!r} is given twice, on line {seen[key]} and on line {line}: keep one"
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    text = path.read_text(encoding="utf-8")
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(
            f"recipe {path}: not valid YAML:{where} {problem} (a recipe is lines of `field: value`)"
        ) from None


def load_recipe(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """The key -> value mapping of a recipe, keys checked (values are checked by ``FinetuneConfig``).

    Raises:
        FileNotFoundError (``RecipeNotFound``, also a ConfigError): as ``recipe_path``. ConfigError: the file is
            not valid YAML (line and column), gives a key twice (both lines), is not a mapping, holds a
            secret-looking key (value not shown), or a key is not a field (named, with the closest field).
    """
    path = recipe_path(name_or_path)
    values = _read_yaml(path) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"recipe {path}: expected a mapping of parameter: value, got {type(values).__name__}")
    check_keys(values, FIELD_NAMES, f"recipe {path}")
    return values


def config_from_recipe(name_or_path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> FinetuneConfig:
    """A recipe with ``overrides`` on top (the command line's ``--NAME VALUE``), validated as one configuration.

    ``resume`` and ``overwrite_output_dir`` exclude each other: an override that sets one to True switches off the
    recipe's other (``offline_cpu`` sets ``overwrite_output_dir: true``; ``--resume true`` continues its run, as
    ``scripts/run_offline.sh -p resume True`` does), unless the overrides set both.

    Raises:
        As ``load_recipe`` and ``FinetuneConfig.from_mapping``.
    """
    recipe, overrides = load_recipe(name_or_path), dict(overrides or {})
    for given, other in (("resume", "overwrite_output_dir"), ("overwrite_output_dir", "resume")):
        if (
            other in recipe
            and other not in overrides
            and given in overrides
            and parse_values({given: overrides[given]})[given]
        ):
            recipe[other] = False
    values = {**recipe, **overrides}
    return FinetuneConfig.from_mapping(values, where=f"recipe {recipe_path(name_or_path)} with overrides")
