"""Run benchmark configurations each in a fresh Python process and collect their ``RESULT {json}`` lines.

Shared by train_throughput.py and generate_throughput.py; imports only the standard library (the
children import torch, Unsloth, transformers in the order each needs).
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD_ENV = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "UNSLOTH_DISABLE_STATISTICS": "1",
    "WANDB_DISABLED": "true",
}
STDERR_LINES = 15


def _pump(stream, echo, keep: bytearray, limit: int | None = None) -> None:
    """Copy a child's stream to ``echo`` as it comes (progress bars included), keeping (the tail of) it."""
    for chunk in iter(lambda: stream.read1(4096), b""):
        echo.write(chunk)
        echo.flush()
        keep += chunk
        if limit and len(keep) > limit:
            del keep[: len(keep) - limit]


def run_configuration(
    name: str,
    script: str,
    argv: list[str],
    workdir: str,
    extra_env: dict | None = None,
    launcher: list[str] = (),
    timeout_s: float | None = None,
) -> dict:
    """Run one configuration's script (with ``extra_env`` added to its environment); its RESULT dict, or
    ``{"name", "failed": last stderr lines}``.

    ``launcher``: arguments between the interpreter and the script, e.g. ``["-m", "accelerate.commands.launch",
    "--config_file", ..., "--num_processes", "2"]`` (the script then runs once per GPU; rank 0 prints RESULT).
    ``timeout_s``: the child is killed after that many seconds (its row then says so).
    """
    print(f"\n===== {name}: {script} =====", flush=True)
    env = {**os.environ, **CHILD_ENV, **(extra_env or {})}
    proc = subprocess.Popen(
        [sys.executable, *launcher, str(HERE / script), *argv],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = bytearray(), bytearray()
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, out)),
        threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, err, 1 << 16)),
    ]
    timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
    for t in [*pumps, *([timer] if timer else [])]:
        t.start()
    for t in pumps:
        t.join()
    rc = proc.wait()
    if timer is not None:
        timer.cancel()
    stdout = out.decode(errors="replace").splitlines()
    results = [line[len("RESULT ") :] for line in stdout if line.startswith("RESULT ")]
    try:
        return json.loads(results[-1])
    except (IndexError, json.JSONDecodeError):
        pass
    lines = [s for s in err.decode(errors="replace").replace("\r", "\n").splitlines() if s.strip()]
    killed = f"stopped after {timeout_s:g} s: " if timer is not None and rc == -9 else ""
    return {"name": name, "failed": f"{killed}exit status {rc}: " + "\n".join(lines[-STDERR_LINES:])}


def gpu_name() -> str | None:
    """Device 0's name; asked after the children ran, so this process holds no GPU memory while they run."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def chosen_names(ap, only: str | None, choices, default) -> list[str]:
    """The configuration names of ``--only`` (comma-separated), or ``default``; ``ap.error`` on an unknown one."""
    names = [n.strip() for n in only.split(",") if n.strip()] if only else list(default)
    unknown = [n for n in names if n not in choices]
    if unknown:
        ap.error(f"--only: unknown {unknown}; choose among {list(choices)}")
    return names


def write_results(kind: str, packages, **fields) -> Path:
    """Write ``results/<YYYY-MM-DD>-<kind>.json``: date, GPU, the versions of ``packages``, then ``fields``."""
    import datetime

    sys.path.insert(0, str(HERE.parent))  # the repo root, for tinyllama_ft (imports neither torch nor transformers)
    from tinyllama_ft.train.summary import library_versions

    record = {
        "date": datetime.date.today().isoformat(),
        "gpu": gpu_name(),
        "versions": library_versions(tuple(packages)),
        **fields,
    }
    path = HERE / "results" / f"{record['date']}-{kind}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")
    return path
