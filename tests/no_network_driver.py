"""The command line and the planner with a Hub that does not answer, each call timed after the imports.

Run by ``test_locations.py`` in a subprocess whose environment points ``HF_ENDPOINT`` at a closed localhost port and
leaves ``HF_HUB_OFFLINE`` unset (huggingface_hub reads both when it is imported, so they cannot be changed inside
the test's own process). Prints one JSON object: case -> ``{"rc", "seconds", "last_line"}`` (the last line of
stderr and stdout together).

    python tests/no_network_driver.py ADAPTER_DIR ROWS_FILE
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time


def timed(call) -> dict:
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = call()
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    return {"rc": rc, "seconds": time.perf_counter() - start, "last_line": lines[-1] if lines else ""}


def main(adapter: str, rows: str) -> int:
    # what the commands import before they read their arguments (torch, transformers, peft: seconds to a minute on
    # a loaded machine), imported before the clock starts: what is timed is the wait for the Hub
    import peft  # noqa: F401
    import transformers  # noqa: F401

    import tinyllama_ft.infer.chat_generation  # noqa: F401
    import tinyllama_ft.infer.generation  # noqa: F401
    import tinyllama_ft.pipeline  # noqa: F401

    from tinyllama_ft import cli
    from tinyllama_ft.config.sources import config_from_recipe
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models import demo_model
    from tinyllama_ft.train.plan import plan_run

    cli.build_parser()  # jsonargparse's first build reads every docstring (seconds); not what is timed

    def plan_demo_model() -> int:
        plan_run(config_from_recipe("offline_cpu", {"dataset": rows}), Hardware())
        print(f"hub_snapshot: {demo_model.hub_snapshot()}")
        return 0

    results = {
        "train": timed(lambda: cli.main(["train", "--model_name", "someorg/some-model", "--dataset", rows])),
        "generate": timed(
            lambda: cli.main(["generate", "--adapter", adapter, "--base_model", "someorg/some-model", "--prompt", "x"])
        ),
        "demo_model": timed(plan_demo_model),
    }
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
