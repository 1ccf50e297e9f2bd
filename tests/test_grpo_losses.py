"""GRPO's loss variants (issue 41): every ``loss_type`` TRL's GRPO takes, and sequence-level importance sampling
(GSPO), reach TRL's config and trainer from the package's configuration, and one real step of each trains the tiny
model the GRPO tests use; a value TRL's config would take and fail on at the first step is refused by the package's
configuration first, naming the field."""

from __future__ import annotations

import math
import typing

import pytest
import torch
from test_grpo import TRL_READS_DEPRECATED, _tiny_grpo

from tinyllama_ft.config.coercion import ConfigError
from tinyllama_ft.config.finetune import FinetuneConfig, ImportanceSamplingLevel
from tinyllama_ft.config.methods import METHODS

#: Each loss type at TRL's default token level, then GSPO (sequence-level ratios with the "grpo" loss, as TRL
#: advises) and LUSPO (a sequence-level loss by design).
VARIANTS = [(loss, "token") for loss in METHODS["grpo"].loss_types] + [("grpo", "sequence"), ("luspo", "sequence")]


def test_trls_grpo_config_takes_any_loss_type_or_level(tmp_path):
    """Why ``loss_type`` and ``importance_sampling_level`` keep their ``Literal`` types: TRL's ``GRPOConfig`` checks
    neither (its trainer raises "Unknown loss type" at the first step), so the package's configuration refuses them."""
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), loss_type="gspo", importance_sampling_level="per_token", use_cpu=True)
    assert (args.loss_type, args.importance_sampling_level) == ("gspo", "per_token")
    assert typing.get_args(ImportanceSamplingLevel) == ("token", "sequence")
    assert GRPOConfig.__dataclass_fields__["importance_sampling_level"].default == "token"
    for fields, message in (
        (dict(importance_sampling_level="per_token"), "importance_sampling_level.*'per_token'.* not allowed"),
        (dict(loss_type="gspo"), "loss_type.*'gspo'.* not allowed"),
    ):
        with pytest.raises(ConfigError, match=message):
            FinetuneConfig(method="grpo", **fields)
    assert FinetuneConfig(method="grpo", importance_sampling_level="sequence").importance_sampling_level == "sequence"


def _varied(prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
    """A reward that differs between a group's random completions, so each step has advantages to learn from."""
    return [float(sum(ids) % 5) for ids in completion_ids]


@pytest.fixture(scope="session")
def grpo_steps(tmp_path_factory):
    """One GRPO step per variant on the tiny model (a few seconds each): ``{variant: (trainer, moved)}``."""
    from chat_fixtures import cpu_trl_cannot_train

    if cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
    steps = {}
    for loss_type, level in VARIANTS:
        out = tmp_path_factory.mktemp(f"{loss_type}-{level}")
        trainer, model = _tiny_grpo(
            out,
            rewards=[_varied],
            loss_type=loss_type,
            importance_sampling_level=level,
            max_completion_length=8,
            max_steps=1,
            logging_steps=1,
            optim="sgd",  # a step proportional to the gradient (Adam's first step is about lr x its sign)
        )
        before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
        trainer.train()
        after = {n: p.detach().clone() for n, p in model.named_parameters() if n in before}
        steps[loss_type, level] = trainer, after, any(not after[n].equal(before[n]) for n in before)
    return steps


@pytest.mark.slow
@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
@pytest.mark.parametrize("variant", VARIANTS, ids=[f"{loss}-{level}" for loss, level in VARIANTS])
def test_each_loss_variant_trains_one_step_through_trls_trainer(grpo_steps, variant):
    trainer, _, moved = grpo_steps[variant]
    assert (trainer.args.loss_type, trainer.args.importance_sampling_level) == variant
    assert (trainer.loss_type, trainer.importance_sampling_level) == variant  # what TRL's loss reads
    [logged] = [e for e in trainer.state.log_history if "loss" in e]
    assert math.isfinite(logged["loss"]) and moved


@pytest.mark.slow
@pytest.mark.filterwarnings(TRL_READS_DEPRECATED)
def test_on_policy_gspo_takes_grpos_step(grpo_steps):
    """What docs/grpo.md says of GSPO here: each batch of completions trains one optimizer step (TRL's
    num_iterations 1), so every importance ratio is 1 and the sequence-level ratio's gradient, averaged as the "grpo"
    loss averages a completion's tokens, is token-level GRPO's: the same completions give the same step."""
    token, sequence = (grpo_steps["grpo", level][1] for level in ("token", "sequence"))
    for name, value in token.items():  # lora_B starts at 0: its value after one SGD step is -lr x its gradient
        assert torch.allclose(value, sequence[name], rtol=1e-4, atol=1e-12), name
    luspo = grpo_steps["luspo", "sequence"][1]  # LUSPO sums a completion's tokens where GRPO averages them
    assert any(not torch.allclose(value, luspo[name], rtol=1e-2) for name, value in token.items())
