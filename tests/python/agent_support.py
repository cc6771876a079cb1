"""Test support for the agentic workflow (docs/agent.md): the engine's agent API or a skip with
the reason, a tiny attention model (its causal attention is a NEW match: no template realizes
it, at head dim 136 neither the bf16/fp16 kernel nor the float32 one, which stops at 128), the test kernels of tests/python/data/agent/, and a chat-completions server on loopback
that replays scripted replies and records every request (no network, no real LLM)."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNELS = Path(__file__).resolve().parent / "data" / "agent"

MODEL_SOURCE = '''
import torch
import torch.nn.functional as F


class TinyAttention(torch.nn.Module):
    """softmax(q kᵀ / √d) v, causal, over [batch, heads, seq, dim] inputs."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class AttentionProj(torch.nn.Module):
    """The same attention, then an output projection (a GEMM the templates realize)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(136, 64)

    def forward(self, q, k, v):
        return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))


def get_inputs(dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    # head dim 136: no FACT attention kernel takes it (bf16/fp16: 64, 80, 96, 128; float32:
    # multiples of 8 up to 128), so the attention is left to an agent
    return [torch.randn(2, 2, 8, 136, generator=g).to(device=device, dtype=dtype) for _ in range(3)]
'''

EXPLOITS = {
    # file -> the gate that must catch it
    "exploit_allocator_reuse.cpp": "poisoned_outputs_written",
    "exploit_cached_result.cpp": "new_inputs_new_results",
    "exploit_other_stream.cpp": "completes_on_return",
    "exploit_mutates_inputs.cpp": "inputs_unchanged",
    "exploit_nan_wildcard.cpp": "finite_outputs",
    "exploit_lazy_output.cpp": "repoison_rerun",
}


def kernel(name: str) -> str:
    return (KERNELS / name).read_text()


def engine_or_skip():
    """The engine library with the agent API, or pytest.skip with what is missing."""
    from fact import _engine
    try:
        library = _engine.engine_library()
    except _engine.EngineNotFound as error:
        pytest.skip(f"no FACT engine: {error}")
    if not library.has("fact_engine_build"):
        pytest.skip(f"the engine library {library.path} predates the agent API (fact_engine_build)")
    return library


def write_model(folder: Path) -> Path:
    path = folder / "tiny_models.py"
    path.write_text(MODEL_SOURCE)
    return path


def capture(model_file: Path, name: str, out: Path, dtype: str = "float32") -> Path:
    """Captures model_file:name as graph JSON (in a child, as the CLI does)."""
    import subprocess
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-m", "fact.capture", f"{model_file}:{name}", "-o", str(out), "--dtype", dtype,
                    "--device", "cpu"], check=True, capture_output=True, env=env)
    return out


BASELINE_PROBE = """
import atexit, json, os, time
import torch
from fact.agent import fragment
_run, _copy = fragment.Fragment.run, torch.Tensor.copy_
_seen = {"runs": 0, "copies": 0}
_outputs = []  # the latest baseline run's outputs
def run(self, values, widen=True):
    outputs = _run(self, values, widen)
    if not widen:  # the baseline (the reference widens to float64)
        _seen["runs"] += 1
        time.sleep(float(os.environ.get("FACT_TEST_BASELINE_SLEEP_MS", "0")) / 1e3)
        _outputs[:] = outputs
    return outputs
def copy_(self, src, *args, **kwargs):
    if any(src is output for output in _outputs):
        _seen["copies"] += 1
    return _copy(self, src, *args, **kwargs)
fragment.Fragment.run = run
torch.Tensor.copy_ = copy_
def _write():
    if _seen["runs"]:  # the gates' child that ran the baseline, not another Python process
        with open(os.environ["FACT_TEST_BASELINE_PROBE"], "w") as out:
            out.write(json.dumps(_seen))
atexit.register(_write)
"""


def probe_the_baseline(folder: Path, monkeypatch, sleep_ms: float = 0.0) -> Path:
    """Makes the gates' child count its PyTorch baseline's runs and the copies of their outputs
    (Tensor.copy_ from a tensor the baseline returned), and sleep `sleep_ms` in each run, through
    a sitecustomize on its PYTHONPATH. -> the file the child writes {"runs", "copies"} to at exit."""
    hook = folder / "baseline_probe"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(BASELINE_PROBE)
    monkeypatch.setenv("PYTHONPATH", str(hook) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("FACT_TEST_BASELINE_SLEEP_MS", str(sleep_ms))
    counts = folder / "baseline_counts.json"
    monkeypatch.setenv("FACT_TEST_BASELINE_PROBE", str(counts))
    return counts


def reply(text: str, **usage) -> dict:
    """A chat-completions answer holding `text`."""
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": usage.get("prompt", 900), "completion_tokens": usage.get("completion", 400),
                      "total_tokens": usage.get("prompt", 900) + usage.get("completion", 400)}}


def code_reply(source: str, note: str = "Here is the kernel.") -> dict:
    return reply(f"{note}\n\n```cpp\n{source}\n```\n")


class ScriptedLLM:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 replaying `script`, one item per
    request: a chat-completions document (reply()), or {"raw": text} (a malformed body),
    {"status": code, "body": text}, {"sleep": seconds, "then": item} (a slow answer)."""

    def __init__(self, script: list):
        self.script = list(script)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append({"path": self.path, "body": body,
                                       "authorization": self.headers.get("Authorization")})
                item = outer.script.pop(0) if outer.script else {"status": 500, "body": "script exhausted"}
                if "sleep" in item:
                    time.sleep(item["sleep"])
                    item = item.get("then", reply("late"))
                try:
                    if "raw" in item:
                        self._send(200, item["raw"].encode(), "application/json")
                    elif "status" in item:
                        self._send(item["status"], str(item.get("body", "")).encode(), "text/plain")
                    else:
                        self._send(200, json.dumps(item).encode(), "application/json")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _send(self, code, data, kind):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def user_messages(self, request: int) -> list[str]:
        return [m["content"] for m in self.requests[request]["body"]["messages"] if m["role"] == "user"]
