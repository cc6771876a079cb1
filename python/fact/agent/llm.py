"""An OpenAI-compatible chat-completions client (OpenAI, vLLM, llama.cpp's server, ...) on httpx,
and where its configuration comes from.

Configuration, first found wins per field:
  1. arguments (`fact optimize --agent-endpoint/--agent-model`, `synthesize(..., config=...)`);
  2. the environment: FACT_AGENT_BASE_URL, FACT_AGENT_MODEL, FACT_AGENT_API_KEY,
     FACT_AGENT_TIMEOUT (seconds per request);
  3. <fact cache root>/agent.json: {"base_url", "model", "api_key_env" (the variable holding the
     key; keys are never written to files by FACT), "timeout"}.
The base URL is the API root (".../v1"); requests go to <base_url>/chat/completions.

Every failure is an LLMError with a `kind`: "timeout", "connection", "http" (a non-2xx answer),
"malformed" (not the chat-completions shape), "refusal" (the model declined: a `refusal` field,
finish_reason "content_filter", or a reply that only apologizes).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

DEFAULT_TIMEOUT = 120.0
REFUSAL = re.compile(r"^\s*(i'?m sorry|i am sorry|i can(?:'|no)t|i cannot|i won'?t|as an ai)\b", re.I)


def cache_root() -> Path:
    """$FACT_CACHE_DIR, else $XDG_CACHE_HOME/fact, else ~/.cache/fact (as the engine's)."""
    if os.environ.get("FACT_CACHE_DIR"):
        return Path(os.environ["FACT_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "fact"
    return Path.home() / ".cache" / "fact"


@dataclass
class LLMConfig:
    base_url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_reply_tokens: int = 8192
    temperature: float = 0.2
    source: str = ""  # where the endpoint came from, for reports

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None,
                config_file: str | Path | None = None) -> "LLMConfig":
        """The configuration from arguments, the environment and the config file (module doc)."""
        path = Path(config_file) if config_file else cache_root() / "agent.json"
        stored: dict[str, Any] = {}
        if path.is_file():
            try:
                stored = json.loads(path.read_text())
            except ValueError:
                stored = {}
        config = cls()
        if base_url:
            config.base_url, config.source = base_url, "argument"
        elif os.environ.get("FACT_AGENT_BASE_URL"):
            config.base_url, config.source = os.environ["FACT_AGENT_BASE_URL"], "$FACT_AGENT_BASE_URL"
        elif stored.get("base_url"):
            config.base_url, config.source = str(stored["base_url"]), str(path)
        config.base_url = config.base_url.rstrip("/")
        config.model = model or os.environ.get("FACT_AGENT_MODEL") or str(stored.get("model", "")) or "default"
        key_variable = str(stored.get("api_key_env", "FACT_AGENT_API_KEY"))
        config.api_key = os.environ.get("FACT_AGENT_API_KEY") or os.environ.get(key_variable, "")
        timeout = os.environ.get("FACT_AGENT_TIMEOUT") or stored.get("timeout")
        if timeout:
            config.timeout = float(timeout)
        return config

    def describe(self) -> str:
        if not self.configured:
            return ("no LLM endpoint configured (--agent-endpoint, $FACT_AGENT_BASE_URL or "
                    f"{cache_root() / 'agent.json'})")
        return f"{self.base_url} (model {self.model}, from {self.source})"


class LLMError(RuntimeError):
    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


@dataclass
class Reply:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatClient:
    """POST <base_url>/chat/completions with the conversation so far."""

    def __init__(self, config: LLMConfig, client: httpx.Client | None = None):
        self.config = config
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._client = client or httpx.Client(timeout=httpx.Timeout(config.timeout), headers=headers)

    def close(self) -> None:
        self._client.close()

    def complete(self, messages: list[dict], max_tokens: int | None = None) -> Reply:
        body = {"model": self.config.model, "messages": messages,
                "max_tokens": int(max_tokens or self.config.max_reply_tokens),
                "temperature": self.config.temperature}
        url = f"{self.config.base_url}/chat/completions"
        try:
            response = self._client.post(url, json=body)
        except httpx.TimeoutException as error:
            raise LLMError("timeout", f"no answer from {url} within {self.config.timeout:.0f} s ({type(error).__name__})") from None
        except httpx.TransportError as error:
            raise LLMError("connection", f"{url}: {error}") from None
        seconds = response.elapsed.total_seconds() if response.elapsed else 0.0
        if response.status_code // 100 != 2:
            raise LLMError("http", f"HTTP {response.status_code} from {url}: {response.text[:300]}")
        try:
            document = response.json()
        except ValueError:
            raise LLMError("malformed", f"the answer is not JSON: {response.text[:200]!r}") from None
        try:
            choice = document["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise LLMError("malformed", f"no choices[0].message in the answer: {json.dumps(document)[:200]}") from None
        finish = str(choice.get("finish_reason") or "")
        if message.get("refusal") or finish == "content_filter":
            raise LLMError("refusal", str(message.get("refusal") or f"finish_reason {finish}"))
        text = message.get("content")
        if not isinstance(text, str):
            raise LLMError("malformed", f"choices[0].message.content is {type(text).__name__}, not text")
        usage = document.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or sum(len(str(m.get("content", ""))) for m in messages) // 4)
        completion = int(usage.get("completion_tokens") or len(text) // 4)
        return Reply(text, finish, prompt, completion, seconds)


CODE_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)```", re.S)


def extract_source(text: str, entry: str = "fact_entry") -> str | None:
    """The source in a reply: the largest fenced code block that defines `entry` (any language
    tag), else the largest C/C++/CUDA block; None when there is none."""
    blocks = [(tag.lower(), body) for tag, body in CODE_BLOCK.findall(text)]
    defining = [body for _, body in blocks if entry in body]
    if defining:
        return max(defining, key=len)
    code = [body for tag, body in blocks if tag in ("c", "cpp", "c++", "cu", "cuda", "cxx", "")]
    return max(code, key=len) if code else None


def looks_like_refusal(text: str) -> bool:
    return bool(REFUSAL.match(text or "")) and "```" not in (text or "")
