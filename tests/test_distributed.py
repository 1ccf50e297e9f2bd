"""The execution plan under a multi-process launch: the configured effective batch split over the processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.machine.distributed import is_main_process, local_process_index, world_size
from tinyllama_ft.train.plan import plan_run, split_over_processes


@pytest.mark.parametrize(
    "split, processes, expected",
    [
        ((2, 4), 2, (2, 2)),  # the article's 2 x 4: micro-batches kept, accumulation halved
        ((2, 4), 4, (2, 1)),
        ((2, 4), 8, (1, 1)),
        ((8, 1), 2, (4, 1)),  # no accumulation to halve: the micro-batch is
        ((2, 3), 2, (1, 3)),
        ((3, 2), 2, (3, 1)),
    ],
)
def test_each_process_takes_its_share_of_the_configured_effective_batch(split, processes, expected):
    cfg = split_over_processes(
        FinetuneConfig(per_device_train_batch_size=split[0], gradient_accumulation_steps=split[1]), processes
    )
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == expected
    assert cfg.effective_batch_size * processes == split[0] * split[1]


def test_an_effective_batch_that_does_not_divide_names_the_fields(cpu):
    cfg = FinetuneConfig(per_device_train_batch_size=3, gradient_accumulation_steps=3)
    with pytest.raises(
        ValueError, match=r"per_device_train_batch_size=3 x gradient_accumulation_steps=3 = 9 .* 2 processes"
    ):
        plan_run(cfg, cpu, world_size=2)


def test_the_plan_records_the_processes_and_keeps_the_effective_batch(cpu, tinyllama_dir):
    cfg = FinetuneConfig(model_name=str(tinyllama_dir))
    one, two = plan_run(cfg, cpu, world_size=1), plan_run(cfg, cpu, world_size=2)
    assert (one.world_size, one.gradient_accumulation_steps) == (1, 4)
    assert (two.world_size, two.per_device_train_batch_size, two.gradient_accumulation_steps) == (2, 2, 2)
    assert one.effective_batch_size == two.effective_batch_size == 8
    assert two.to_dict()["world_size"] == 2 and "2 processes (DDP)" in two.summary()


def test_under_ddp_the_trainer_averages_the_loss_over_all_processes_tokens(cpu, tinyllama_dir):
    from tinyllama_ft.train.sft_trainer import sft_config_kwargs

    cfg = FinetuneConfig(model_name=str(tinyllama_dir))
    two = sft_config_kwargs(cfg, plan_run(cfg, cpu, world_size=2), has_eval=True)
    assert (two["per_device_train_batch_size"], two["gradient_accumulation_steps"]) == (2, 2)
    assert two["average_tokens_across_devices"] is True and two["ddp_find_unused_parameters"] is False
    assert "eval_on_start" not in two  # decided by train_and_evaluate, which knows whether it resumes
    one = sft_config_kwargs(cfg, plan_run(cfg, cpu, world_size=1), has_eval=True)
    assert "ddp_find_unused_parameters" not in one


def test_unsloth_is_left_for_transformers_under_ddp_and_refused_when_asked(t4, tinyllama_dir):
    auto = plan_run(
        FinetuneConfig(model_name=str(tinyllama_dir)), t4, world_size=2, budget_gib=14, importable=lambda name: True
    )
    assert auto.backend == "transformers" and auto.world_size == 2
    with pytest.raises(ValueError, match="backend='unsloth' trains on one GPU"):
        plan_run(
            FinetuneConfig(model_name=str(tinyllama_dir), backend="unsloth"),
            t4,
            world_size=2,
            budget_gib=14,
            importable=lambda name: True,
        )


def test_the_launchers_variables_decide_world_size_rank_and_device():
    assert (world_size({}), is_main_process({}), local_process_index({})) == (1, True, 0)
    launched = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}
    assert (world_size(launched), is_main_process(launched), local_process_index(launched)) == (2, False, 1)
    assert is_main_process({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        world_size({"WORLD_SIZE": "two"})


def _launch_command(text: str) -> str:
    """The ``accelerate launch ... -m tinyllama_ft.cli train ...`` command in ``text``, continuation lines joined."""
    found = re.search(r"accelerate launch --config_file .*?--config article", re.sub(r"\\\n#?", " ", text), re.S)
    assert found, "no accelerate launch command"
    return " ".join(found.group(0).split())


def test_the_readme_launch_command_finds_the_shipped_accelerate_configuration():
    readme = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")
    yaml_path = REPO / "tinyllama_ft" / "recipes" / "accelerate" / "multi_gpu.yaml"
    command = _launch_command(readme)
    assert command == _launch_command(yaml_path.read_text(encoding="utf-8"))
    assert "-m tinyllama_ft.cli train --config article" in command
    code = re.search(r"python -c '([^']*)'", command).group(1)
    printed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/", env={"PYTHONPATH": str(REPO)}
    ).stdout.strip()
    assert printed == str(yaml_path)

    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    launch = load_config_from_file(printed)
    assert (launch.distributed_type, launch.num_processes, launch.mixed_precision, launch.use_cpu) == (
        DistributedType.MULTI_GPU,
        2,
        "no",
        False,
    )


PROCESSES_SCRIPT = """
import os
from tinyllama_ft.machine.distributed import MainProcessError, main_process_first, same_on_all_processes

rank = int(os.environ["RANK"])
out = open(f"rank{rank}.txt", "w", encoding="utf-8", buffering=1)  # one file each: stdout lines interleave
assert same_on_all_processes((2, 2, False), what="the split") == (2, 2, False)
try:
    same_on_all_processes((2 + rank, 2), what="the split")
except ValueError as e:
    print(f"rank {rank} differs: {e}", file=out)
with main_process_first("writing") as main:  # the others run the block after the main process
    print(f"rank {rank} block main={main}", file=out)
try:
    with main_process_first("preparing output_dir") as main:
        if main:
            raise FileExistsError("output_dir='x' holds an earlier run")
        print(f"rank {rank} ran the block after a failure", file=out)
except (FileExistsError, MainProcessError) as e:
    print(f"rank {rank} stopped: {type(e).__name__}: {e}", file=out)
"""


def test_two_launched_processes_agree_on_the_plan_and_share_the_main_process_failure(tmp_path):
    """Two gloo processes (torchrun, as accelerate launch starts them): a split that differs between them is
    an error on both, naming each; a block the main process fails in stops the other with that error."""
    script = tmp_path / "processes.py"
    script.write_text(PROCESSES_SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = {
        line for rank in (0, 1) for line in (tmp_path / f"rank{rank}.txt").read_text(encoding="utf-8").splitlines()
    }
    differs = "the split differs between the launched processes (process 0: (2, 2), process 1: (3, 2))"
    assert {f"rank 0 differs: {differs}", f"rank 1 differs: {differs}"} <= lines
    assert {"rank 0 block main=True", "rank 1 block main=False"} <= lines
    assert "rank 0 stopped: FileExistsError: output_dir='x' holds an earlier run" in lines
    assert (
        "rank 1 stopped: MainProcessError: preparing output_dir failed on the main process: "
        "FileExistsError: output_dir='x' holds an earlier run"
    ) in lines
    assert not any("after a failure" in line for line in lines)
