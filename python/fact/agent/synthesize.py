"""The LLM synthesis loop (`fact optimize --agent`; `python -m fact.agent.synthesize`).

For each NEW match of a captured graph (nothing in the pattern registry realizes it), ask an
OpenAI-compatible chat-completions endpoint (fact.agent.llm) for a kernel in the subgraph ABI:
the task (its reference semantics, the call, the ABI), the most relevant vetted examples
(fact.agent.examples), and after each failed attempt the compiler's diagnostics or the gate
that failed (fact.agent.prompt). Each attempt is built by the engine (fact_engine_build) and,
when it compiles, checked by the gates (fact.agent.gates: a child process with a time limit).
Bounded by attempts, wall-clock seconds and tokens per match. Every attempt is logged
(<log_dir>/match-<label>/attempt-<n>.json and transcript.md). A kernel that passes every gate
enters the registry with its provenance (LLM model, endpoint, prompt digest, attempt, log);
the next plan takes it from there (the engine plans verified registry sources). Without an
endpoint nothing is asked: NEW matches are left to PyTorch and reported as such.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from fact.agent import engine, examples as retrieval, gates, prompt
from fact.agent.llm import ChatClient, LLMConfig, LLMError, extract_source, looks_like_refusal


@dataclass
class Budget:
    attempts: int = 4
    seconds: float = 600.0
    tokens: int = 60000
    gate_seconds: float = 120.0


@dataclass
class Attempt:
    number: int
    outcome: str            # accepted | compile_error | gate_failed | too_slow | no_code | refusal | llm_error
    detail: str = ""
    failed_check: str = ""
    tokens: int = 0
    seconds: float = 0.0
    log: str = ""


@dataclass
class MatchResult:
    label: str
    rule: str
    status: str             # registered | failed | left_to_pytorch
    reason: str = ""
    entry: str = ""
    attempts: list = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    log_dir: str = ""
    timing: dict = field(default_factory=dict)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _device_name(device: str) -> str:
    if device == "cpu":
        return f"host CPU ({platform.machine()}, {platform.processor() or platform.system()})"
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda"


def _shape_summary(call: dict) -> str:
    parts = [f"{t['value']}{list(t['shape'])}" for t in call["operands"]]
    return ", ".join(parts) + " -> " + ", ".join(f"{t['value']}{list(t['shape'])}" for t in call["results"])


def registry_entry(task: dict, source: str, report: gates.GateReport, *, arch: str, device: str,
                   provenance: dict) -> dict:
    """The registry entry of a kernel that passed the gates (docs/agent.md, "Entries")."""
    match = task["match"]
    semantics = task["semantics"]
    call = task["call"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    device_name = _device_name(device)
    checks = [c["name"] for c in report.checks if c["passed"]]
    entry = {
        "rule": match["rule"], "scope": "rule", "pattern": match.get("pattern", ""), "kind": "subgraph",
        "dtype": match["dtype"], "arch": arch, "origin": provenance.get("by", "agent"),
        "source": {"text": source, "language": "c++" if arch == "host" else "cuda",
                   "device": "host" if arch == "host" else "cuda", "abi": "subgraph", "entry": "fact_entry"},
        "param_space": {"parameters": {}, "note": "a hand-written kernel: no template parameters; it is specialized to "
                                                  "the constants of its reference semantics"},
        "reference": {"fragment": semantics["fragment"], "semantics_hash": semantics["hash"],
                      "tolerance": call.get("tolerance"), "precision": task.get("precision", "")},
        "verified": [{"semantics_hash": semantics["hash"], "shape": _shape_summary(call), "device": device_name,
                      "rel_err": report.rel_err, "tolerance": report.tolerance, "date": now, "checks": checks}],
        "tuned": [],
        "gates": {"passed": True, "source_sha256": _sha256(source), "semantics_hash": semantics["hash"],
                  "checks": [{"name": c["name"], "passed": c["passed"]} for c in report.checks],
                  "device": device_name, "date": now},
        "provenance": {**provenance, "date": now},
    }
    if report.timing:
        entry["tuned"].append({"semantics_hash": semantics["hash"], "device": device_name, "ms": report.timing.get("ms"),
                               "baseline": {"name": "PyTorch eager (same run)", "ms": report.timing.get("baseline_ms")},
                               "speedup": report.timing.get("speedup"), "timer": report.timing.get("timer"), "date": now})
    return entry


class _Log:
    """<log_dir>/attempt-<n>.json per attempt and transcript.md for people."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.transcript = folder / "transcript.md"
        self.transcript.write_text("")

    def note(self, heading: str, text: str, fence: bool = False) -> None:
        with self.transcript.open("a") as out:
            out.write(f"### {heading}\n\n")
            out.write(f"~~~~\n{text}\n~~~~\n\n" if fence else f"{text}\n\n")

    def attempt(self, number: int, record: dict) -> str:
        path = self.folder / f"attempt-{number}.json"
        path.write_text(json.dumps(record, indent=1, default=str) + "\n")
        return str(path)


def synthesize_match(task: dict, client: ChatClient, *, budget: Budget, arch: str = "host",
                     registry_dir: str | Path | None = None, log_dir: str | Path, found_examples: list | None = None,
                     provenance_extra: dict | None = None) -> MatchResult:
    """The loop for one task (module doc). Never raises for what the model or its kernels do."""
    device = "cpu" if arch == "host" else "cuda"
    match = task["match"]
    result = MatchResult(label=str(task.get("label")), rule=match["rule"], status="failed")
    log = _Log(Path(log_dir))
    result.log_dir = str(log.folder)
    start = time.monotonic()
    messages = [{"role": "system", "content": prompt.SYSTEM},
                {"role": "user", "content": prompt.task_message(task, found_examples or [], arch)}]
    first_prompt_sha = _sha256(json.dumps(messages))
    log.note(f"task #{result.label} {result.rule} ({match['dtype']}, {arch})", messages[1]["content"], fence=True)
    for number in range(1, budget.attempts + 1):
        elapsed = time.monotonic() - start
        if elapsed > budget.seconds:
            result.reason = f"time budget spent ({elapsed:.0f} s of {budget.seconds:.0f} s) after {number - 1} attempt(s)"
            break
        if result.tokens >= budget.tokens:
            result.reason = f"token budget spent ({result.tokens} of {budget.tokens}) after {number - 1} attempt(s)"
            break
        attempt_start = time.monotonic()
        record: dict[str, Any] = {"attempt": number, "request": {"model": client.config.model,
                                                                  "endpoint": client.config.base_url,
                                                                  "messages": list(messages)}}
        attempt = Attempt(number, "llm_error")
        try:
            reply = client.complete(messages, max_tokens=min(client.config.max_reply_tokens,
                                                             max(budget.tokens - result.tokens, 256)))
        except LLMError as error:
            attempt.outcome = "refusal" if error.kind == "refusal" else "llm_error"
            attempt.detail = str(error)
            record["error"] = {"kind": error.kind, "message": str(error)}
            log.note(f"attempt {number}: {attempt.outcome}", attempt.detail)
            if error.kind in ("refusal", "malformed"):
                messages.append({"role": "user", "content": prompt.no_code_feedback()})
        else:
            attempt.tokens = reply.tokens
            result.tokens += reply.tokens
            record["reply"] = {"text": reply.text, "finish_reason": reply.finish_reason,
                               "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
            messages.append({"role": "assistant", "content": reply.text})
            source = extract_source(reply.text)
            log.note(f"attempt {number}: reply ({reply.tokens} tokens)", reply.text[:6000], fence=True)
            if source is None:
                attempt.outcome = "refusal" if looks_like_refusal(reply.text) else "no_code"
                attempt.detail = "the reply held no code block defining fact_entry"
                messages.append({"role": "user", "content": prompt.no_code_feedback()})
            else:
                record["source_sha256"] = _sha256(source)
                build = engine.build(source, device="host" if arch == "host" else "cuda", kind="subgraph",
                                     name=f"agent_{result.rule}", timeout_seconds=int(max(budget.gate_seconds, 60)))
                record["build"] = build
                if build.get("status") == "unavailable":
                    attempt.outcome, attempt.detail = "llm_error", f"cannot build here: {build.get('reason')}"
                    result.reason = attempt.detail
                    result.attempts.append(asdict(attempt))
                    log.attempt(number, record)
                    break
                if build.get("status") not in ("built", "cached"):
                    attempt.outcome = "compile_error"
                    attempt.detail = build.get("reason", "")
                    feedback = prompt.compile_feedback(build)
                    messages.append({"role": "user", "content": feedback})
                    log.note(f"attempt {number}: does not compile", feedback, fence=True)
                else:
                    report = gates.run_gates(task["call"], task["semantics"]["fragment"], build["library"],
                                             device=device, seed=7919 * number, timeout=budget.gate_seconds,
                                             work_dir=log.folder / f"gates-{number}")
                    record["gates"] = report.to_json()
                    if not report.passed:
                        attempt.outcome, attempt.failed_check = "gate_failed", report.failed_check
                        attempt.detail = report.failure
                        feedback = prompt.gate_feedback(report.to_json())
                        messages.append({"role": "user", "content": feedback})
                        log.note(f"attempt {number}: rejected by the gate {report.failed_check}", feedback, fence=True)
                    elif not (report.timing or {}).get("speedup", 0) >= 1.0:
                        # The registry refuses a kernel slower than PyTorch: say so, and try again.
                        attempt.outcome, attempt.failed_check = "too_slow", "speed"
                        attempt.detail = (f"{(report.timing or {}).get('ms')} ms vs PyTorch "
                                          f"{(report.timing or {}).get('baseline_ms')} ms")
                        feedback = prompt.slow_feedback(report.timing or {})
                        messages.append({"role": "user", "content": feedback})
                        log.note(f"attempt {number}: slower than PyTorch", feedback, fence=True)
                    else:
                        attempt.outcome = "accepted"
                        provenance = {"by": "agent", "model": client.config.model, "endpoint": client.config.base_url,
                                      "prompt_sha256": first_prompt_sha, "attempt": number,
                                      "log": str(log.folder), "task": {"module": task.get("module", ""),
                                                                       "graph": task.get("graph", ""),
                                                                       "label": result.label},
                                      **(provenance_extra or {})}
                        entry = registry_entry(task, source, report, arch=arch, device=device, provenance=provenance)
                        stored = engine.registry("add", dir=registry_dir, entry=entry)["entry"]
                        result.status, result.entry = "registered", stored["id"]
                        result.timing = report.timing
                        result.reason = (f"passed every gate on attempt {number}; registry entry {stored['id']} "
                                         f"(registry version {stored.get('registry_version')})")
                        log.note(f"attempt {number}: accepted", result.reason)
        attempt.seconds = time.monotonic() - attempt_start
        attempt.log = log.attempt(number, {**record, "outcome": asdict(attempt)})
        result.attempts.append(asdict(attempt))
        if result.status == "registered":
            break
    else:
        if not result.reason:
            result.reason = f"no kernel passed the gates in {budget.attempts} attempt(s)"
    if result.status != "registered" and not result.reason:
        result.reason = f"no kernel passed the gates in {len(result.attempts)} attempt(s)"
    result.seconds = time.monotonic() - start
    (log.folder / "result.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    return result


def run(graph: str | Path, *, arch: str = "host", precision: str | None = None, config: LLMConfig | None = None,
        budget: Budget | None = None, out_dir: str | Path, registry_dir: str | Path | None = None,
        matches: list[str] | None = None, client: ChatClient | None = None, k_examples: int = 4) -> dict:
    """The loop over a graph's NEW matches (or the `matches` named: labels or rules). Returns
    and writes <out_dir>/agent_report.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = config or LLMConfig.resolve()
    budget = budget or Budget()
    discovery = engine.discover(graph, precision=precision, arch=arch, registry_dir=registry_dir)
    chosen = []
    for index, match in enumerate(discovery["matches"]):
        label = str(index + 1)
        named = matches is not None and (label in matches or match["rule"] in matches or match["pattern"] in matches)
        if named or (matches is None and match["classification"] == "NEW"):
            chosen.append((label, match))
    report: dict[str, Any] = {"schema": "fact.agent.report/1", "graph": str(graph), "arch": arch,
                              "endpoint": config.describe(), "matches": []}
    if not chosen:
        report["summary"] = "no NEW match: nothing for an agent to write"
    elif not config.configured:
        for label, match in chosen:
            report["matches"].append(asdict(MatchResult(label, match["rule"], "left_to_pytorch",
                                                        f"NEW: {match.get('classification_reason', '')}; "
                                                        f"{config.describe()}")))
        report["summary"] = (f"{len(chosen)} NEW match(es) left to PyTorch: {config.describe()}")
    else:
        gpu = engine.device()
        own_client = client is None
        client = client or ChatClient(config)
        entries = engine.registry("list", dir=registry_dir, full=True)["entries"]
        try:
            for label, match in chosen:
                if arch != "host" and gpu.get("gpu_unavailable"):
                    report["matches"].append(asdict(MatchResult(label, match["rule"], "left_to_pytorch",
                                                                f"needs a Hopper GPU: {gpu['gpu_unavailable']}")))
                    continue
                try:
                    task = engine.task(graph, label, precision=precision, arch=arch, registry_dir=registry_dir)
                except engine.AgentEngineError as error:
                    report["matches"].append(asdict(MatchResult(label, match["rule"], "left_to_pytorch",
                                                                f"no agent task: {error}")))
                    continue
                found = retrieval.retrieve(task, entries, k=k_examples)
                result = synthesize_match(task, client, budget=budget, arch=arch, registry_dir=registry_dir,
                                          log_dir=out / f"match-{label}", found_examples=found)
                report["matches"].append(asdict(result))
        finally:
            if own_client:
                client.close()
        registered = sum(1 for m in report["matches"] if m["status"] == "registered")
        report["summary"] = f"{registered} of {len(chosen)} match(es) realized by agent kernels that passed every gate"
    (out / "agent_report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None, say: Callable[[str], None] = print) -> int:
    """The command line; its summary (what each NEW match got) goes through `say` (print, or
    the caller's own output: `fact optimize --agent` shows it among its stages)."""
    parser = argparse.ArgumentParser(prog="python -m fact.agent.synthesize",
                                     description="Ask an LLM for kernels of a captured graph's NEW matches; "
                                                 "those that pass FACT's gates enter the registry.")
    parser.add_argument("--graph", required=True, help="captured graph JSON")
    parser.add_argument("--model", default="", help="the model file it was captured from (for the report)")
    parser.add_argument("--dtype", default="", help="(for the report)")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--arch", default="host", choices=("host", "sm_90a"))
    parser.add_argument("-o", "--out", default="out/agent")
    parser.add_argument("--endpoint", default=None, help="chat-completions base URL (…/v1)")
    parser.add_argument("--llm-model", default=None)
    parser.add_argument("--attempts", type=int, default=Budget.attempts)
    parser.add_argument("--max-tokens", type=int, default=Budget.tokens)
    parser.add_argument("--seconds", type=float, default=Budget.seconds)
    parser.add_argument("--gate-seconds", type=float, default=Budget.gate_seconds)
    parser.add_argument("--match", action="append", default=None, help="labels or rules (default: every NEW match)")
    parser.add_argument("--registry-dir", default=None)
    args = parser.parse_args(argv)
    config = LLMConfig.resolve(args.endpoint, args.llm_model)
    report = run(args.graph, arch=args.arch, precision=args.precision, config=config,
                 budget=Budget(args.attempts, args.seconds, args.max_tokens, args.gate_seconds), out_dir=args.out,
                 registry_dir=args.registry_dir, matches=args.match)
    say(f"agent: {report['summary']}")
    for m in report["matches"]:
        say(f"  #{m['label']} {m['rule']}: {m['status']}: {m['reason']}")
        for a in m.get("attempts", []):
            check = f" [{a['failed_check']}]" if a.get("failed_check") else ""
            say(f"      attempt {a['number']}: {a['outcome']}{check} {a['detail'][:160]}")
    say(f"agent: report {Path(args.out) / 'agent_report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
