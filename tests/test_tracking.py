"""W&B: key from the environment or Colab secrets, never a prompt without a person, offline fallback."""

import os
import subprocess
import sys
import time
import types

import pytest

from tinyllama_ft.config.secrets import find_secret
from tinyllama_ft.train.tracking import Tracking, finish_tracking, start_tracking
from wandb_runfile import read_offline_metrics


@pytest.fixture
def no_wandb_env(monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")


def test_key_from_environment_then_colab_secrets(monkeypatch):
    assert find_secret("WANDB_API_KEY", {"WANDB_API_KEY": "k1"}, secret=lambda name: "k2") == ("k1", "environment")
    assert find_secret("WANDB_API_KEY", {}, secret=lambda name: "k2" if name == "WANDB_API_KEY" else None) == (
        "k2",
        "colab-secrets",
    )
    assert find_secret("WANDB_API_KEY", {}, secret=lambda name: None) == (None, None)


def test_colab_secrets_are_read_through_google_colab_userdata(monkeypatch):
    from tinyllama_ft.config.secrets import colab_secret

    userdata = types.SimpleNamespace(get=lambda name: {"WANDB_API_KEY": "from-colab"}[name])
    colab = types.ModuleType("google.colab")
    colab.userdata = userdata
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    assert colab_secret("WANDB_API_KEY") == "from-colab"
    assert colab_secret("HF_TOKEN") is None  # a missing secret is "no key", not an error


def test_report_to_none_starts_nothing():
    assert start_tracking(report_to="none") == Tracking(report_to="none")


def test_no_key_and_no_person_logs_offline_and_says_where(no_wandb_env, tmp_path, capsys, monkeypatch):
    import wandb

    monkeypatch.setattr(wandb, "login", lambda *a, **k: pytest.fail("must not prompt"))
    tracking = start_tracking(
        report_to="wandb",
        wandb_project="tiny-llama",
        wandb_run_name="test-run",
        output_dir=str(tmp_path),
        config={"lora_r": 32},
        prompt_allowed=False,
    )
    wandb.log({"loss": 1.25})
    finish_tracking(tracking)
    out = capsys.readouterr().out
    assert tracking.mode == "offline" and tracking.key_source is None and "no API key" in tracking.offline_reason
    assert "offline" in out and str(tmp_path) in out and out.count("\n") == 1
    run_folder = tmp_path / "wandb"
    assert any(p.name.startswith("offline-run-") for p in run_folder.iterdir())
    assert [row["loss"] for row in read_offline_metrics(tracking.run_dir)] == [1.25]  # the run's record file has it


# --- headless, and no network: offline within seconds, one line saying why ---------------------------

FAKE_KEY = "local-" + "0" * 40  # well-formed for W&B, known to no server


@pytest.fixture
def wandb_key_env(no_wandb_env, monkeypatch):
    """A W&B key in the environment; each test points WANDB_BASE_URL somewhere."""
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    yield monkeypatch
    wandb.finish()


@pytest.fixture
def server(request):
    """A local stand-in for a W&B server that fails in the way named by the parameter; yields its URL."""
    import http.server
    import socket
    import threading

    kind = request.param
    if kind == "unroutable":
        yield "http://10.255.255.1"
        return
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    held = []
    if kind == "closed-port":
        listener.close()  # nothing listens: connection refused
    elif kind == "syn-dropped":  # accept queue full: the kernel drops new SYNs, like a blackholed route
        listener.listen(0)
        held.append(socket.create_connection(("127.0.0.1", port)))
    elif kind == "silent":  # accepts TCP, never answers HTTP
        listener.listen(8)
    if kind in ("answers-404", "graphql-hangs"):
        listener.close()
        stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # the probe gets an answer
                self.send_error(404)

            def do_POST(self):  # W&B's API call
                if kind == "graphql-hangs":
                    stop.wait(60)
                    return  # W&B gave up long ago: nobody left to answer
                self.send_error(404)

            def log_message(self, *args):
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{port}"
        stop.set()
        httpd.shutdown()
        httpd.server_close()
        return
    yield f"http://127.0.0.1:{port}"
    for s in held:
        s.close()
    listener.close()


@pytest.mark.parametrize(
    "server, why, init_timeout",
    [
        ("closed-port", "not reachable", None),
        ("syn-dropped", "not reachable", None),
        ("silent", "not reachable", None),
        ("unroutable", "", None),
        ("answers-404", "online wandb.init to", None),
        ("graphql-hangs", "online wandb.init to", 5),
    ],  # the probe passes; init_timeout bounds the online init
    indirect=["server"],
)
def test_key_without_a_reachable_server_goes_offline_within_seconds(
    wandb_key_env, server, why, init_timeout, tmp_path, capsys
):
    import wandb

    wandb_key_env.setenv("WANDB_BASE_URL", server)
    timeouts = {"init_timeout": init_timeout} if init_timeout else {}  # else the defaults: probe 3 s, init 30 s
    start = time.monotonic()
    tracking = start_tracking(
        report_to="wandb",
        wandb_project="tiny-llama",
        wandb_run_name="no-network",
        output_dir=str(tmp_path),
        config={"lora_r": 32},
        prompt_allowed=False,
        **timeouts,
    )
    elapsed = time.monotonic() - start
    wandb.log({"loss": 0.5})
    finish_tracking(tracking)
    out = capsys.readouterr().out
    print(f"{server}: offline after {elapsed:.2f} s ({tracking.offline_reason})")
    assert tracking.mode == "offline" and tracking.key_source == "environment"
    assert elapsed < 10, f"{server}: {elapsed:.1f} s to fall back (W&B's own init_timeout is 90 s)"
    assert out.count("\n") == 1 and "logging offline" in out and why in out and server in out, out
    assert FAKE_KEY not in out
    assert read_offline_metrics(tracking.run_dir)[0]["loss"] == 0.5  # the offline run really logs


@pytest.mark.parametrize(
    "server, why",
    [("answers-404", None), ("closed-port", "refused"), ("silent", "no answer within 2 s")],
    indirect=["server"],
)
def test_probe_takes_any_http_answer_as_reachable_and_says_why_not(server, why):
    from tinyllama_ft.train.tracking import probe_server

    start = time.monotonic()
    said = probe_server(server, timeout=2)
    assert time.monotonic() - start < 3
    assert said is None if why is None else why in said.lower(), said


def test_probe_says_when_the_name_does_not_resolve():
    from tinyllama_ft.train.tracking import probe_server

    assert "name" in probe_server("http://wandb.invalid", timeout=2).lower()


def test_headless_process_without_key_never_prompts_and_says_where(tmp_path):
    """stdin not a terminal (papermill, CI): no prompt, no hang; the run finishes and names its folder."""
    code = (
        "from tinyllama_ft.machine.kernel import can_prompt\n"
        "from tinyllama_ft.train.tracking import start_tracking, finish_tracking\n"
        "import wandb\n"
        "assert not can_prompt()\n"
        f"t = start_tracking(report_to='wandb', wandb_project='tiny-llama', wandb_run_name='headless', output_dir={str(tmp_path)!r})\n"
        "wandb.log({'loss': 2.5})\n"
        "finish_tracking(t)\n"
        "print('mode', t.mode)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED")}
    env.update(WANDB_DISABLE_GIT="true", HOME=str(tmp_path / "home"))  # no ~/.netrc key either
    done = subprocess.run(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "mode offline" and len(lines) == 2, done.stdout
    assert "logging offline to " + str(tmp_path / "wandb") in lines[0] and "no API key" in lines[0]


# --- offline metrics read back from the run file ----------------------------------------------------


def test_logged_values_read_back_equal_from_the_offline_run_file(no_wandb_env, tmp_path):
    import wandb

    rows = [
        {"train/loss": 4.5 / (i + 1), "train/global_step": i, "note": "x" * i, "nested": {"a": i}} for i in range(30)
    ]
    rows.append({"big": "y" * 100_000})  # one record over several 32 KiB blocks
    tracking = start_tracking(
        report_to="wandb",
        wandb_project="tiny-llama",
        wandb_run_name="readback",
        output_dir=str(tmp_path),
        prompt_allowed=False,
    )
    for row in rows:
        wandb.log(row)
    finish_tracking(tracking)
    history = read_offline_metrics(tracking.run_dir)
    assert len(history) == len(rows)
    for logged, read in zip(rows, history):
        flat = {
            (f"{k}.a" if isinstance(v, dict) else k): (v["a"] if isinstance(v, dict) else v) for k, v in logged.items()
        }
        assert {k: v for k, v in read.items() if not k.startswith("_")} == flat
    assert [r["_step"] for r in history] == list(range(len(rows)))


def test_damaged_or_foreign_run_files_are_refused_and_a_torn_tail_is_dropped(no_wandb_env, tmp_path):
    import wandb

    from wandb_runfile import wandb_records

    tracking = start_tracking(
        report_to="wandb",
        wandb_project="tiny-llama",
        wandb_run_name="damage",
        output_dir=str(tmp_path / "run"),
        prompt_allowed=False,
    )
    for i in range(5):
        wandb.log({"loss": float(i)})
    finish_tracking(tracking)
    read_offline_metrics(tracking.run_dir)  # waits for the exit record
    path = next((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    data = path.read_bytes()
    whole = wandb_records(str(path))
    torn = tmp_path / "torn.wandb"
    torn.write_bytes(data[:-3])  # the last record cut short, as while W&B is still writing
    assert len(wandb_records(str(torn))) == len(whole) - 1
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.wandb"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="bad checksum"):
        wandb_records(str(bad))
    other = tmp_path / "other.wandb"
    other.write_bytes(b"not a run file at all")
    with pytest.raises(ValueError, match="not a W&B run file"):
        wandb_records(str(other))
    with pytest.raises(FileNotFoundError, match="run_dir="):
        read_offline_metrics(str(tmp_path))
