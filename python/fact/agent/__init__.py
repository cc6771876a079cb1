"""FACT's agentic workflow (docs/agent.md): the pattern registry's Python front, the gates every
agent-written kernel passes, the LLM synthesis loop (`fact optimize --agent`) and the MCP server
(`fact mcp`). Everything here calls the engine's C API (libfact, include/fact/engine/c_api.h);
the engine stays the source of truth for discovery, the registry and builds.
"""
