"""Chat-completion stream shapes as OpenAI-compatible servers really send them.

Each shape is written by hand from the provider's documented wire format (no recordings): the
chunk bodies a server streams for the same job, so one test can replay them all through the real
``openai`` client. Call shapes ask for ``ping()`` and ``apong(times=2)`` in parallel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PING_ARGS = "{}"
APONG_ARGS = json.dumps({"times": 2})
SIGNATURE = "CiQBcsjafTNZnq1Qe4Zf0+thought/signature=="


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    usage: dict[str, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` makes a chunk with no choices at all."""
    body: dict[str, Any] = {
        "id": "chatcmpl-shape",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": "shape-model",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def pieces(raw: str, size: int) -> list[str]:
    return [raw[start : start + size] for start in range(0, len(raw), size)]


USAGE = {"prompt_tokens": 57, "completion_tokens": 17, "total_tokens": 74}


@dataclass(frozen=True)
class Shape:
    """A stream and what a correct client makes of it."""

    who: str
    chunks: list[dict[str, Any]]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    said: str = ""
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # by operation


def openai_char_by_char() -> Shape:
    """OpenAI, DeepSeek: an opening delta per call, then its arguments a character at a time;
    with ``include_usage`` the last chunk has no choices and carries usage."""
    chunks = [chunk({"role": "assistant", "content": None, "refusal": None})]
    for index, (call_id, name, arguments) in enumerate(
        [("call_Abc1", "ping", PING_ARGS), ("call_Abc2", "apong", APONG_ARGS)]
    ):
        opening = {"index": index, "id": call_id, "type": "function"}
        chunks.append(
            chunk({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]})
        )
        for char in arguments:
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": char}}]})
            )
    chunks += [chunk({}, "tool_calls"), chunk(None, usage=USAGE)]
    return Shape("OpenAI, DeepSeek", chunks, [("ping", {}), ("apong", {"times": 2})])


def same_index_distinct_ids() -> Shape:
    """Ollama without a model parser, lmdeploy, LiteLLM ollama_chat: every call whole, all at
    index 0, told apart only by their ids."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    for call_id, name, arguments in [
        ("call_o1", "ping", PING_ARGS),
        ("call_o2", "apong", APONG_ARGS),
    ]:
        part = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        chunks.append(chunk({"role": "assistant", "content": "", "tool_calls": [part]}))
    chunks.append(chunk({"role": "assistant", "content": ""}, "tool_calls"))
    return Shape(
        "Ollama, lmdeploy, LiteLLM ollama_chat", chunks, [("ping", {}), ("apong", {"times": 2})]
    )


def vllm_id_on_first_delta_only() -> Shape:
    """vLLM, sglang: all calls at index 0, the id only on a call's first delta and ``""`` (or
    nothing) on the argument deltas after it."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    for call_id, name, arguments in [
        ("chatcmpl-tool-9a1", "ping", PING_ARGS),
        ("chatcmpl-tool-9a2", "apong", APONG_ARGS),
    ]:
        opening = {"index": 0, "id": call_id, "type": "function", "function": {"name": name}}
        chunks.append(chunk({"tool_calls": [opening]}))
        for piece in pieces(arguments, 4):
            chunks.append(
                chunk({"tool_calls": [{"index": 0, "id": "", "function": {"arguments": piece}}]})
            )
    chunks.append(chunk({"content": ""}, "tool_calls"))
    return Shape("vLLM, sglang", chunks, [("ping", {}), ("apong", {"times": 2})])


def no_index(extra_content: bool = False) -> Shape:
    """Gemini's OpenAI compatibility layer: both calls in one delta, no ``index`` at all, and
    ``finish_reason: "stop"`` although tools were called. Gemini 3 adds a thought signature that
    must come back on the next request."""
    first: dict[str, Any] = {
        "id": "function-call-1",
        "type": "function",
        "function": {"name": "ping", "arguments": PING_ARGS},
    }
    extras = {}
    if extra_content:
        first["extra_content"] = {"google": {"thought_signature": SIGNATURE}}
        extras["ping"] = {"extra_content": {"google": {"thought_signature": SIGNATURE}}}
    second = {
        "id": "function-call-2",
        "type": "function",
        "function": {"name": "apong", "arguments": APONG_ARGS},
    }
    chunks = [
        chunk({"role": "assistant", "tool_calls": [first, second]}),
        chunk({"role": "assistant", "content": ""}, "stop", usage=USAGE),
    ]
    who = "Gemini 3 (thought signature)" if extra_content else "Gemini compatibility layer"
    return Shape(who, chunks, [("ping", {}), ("apong", {"times": 2})], extras=extras)


def no_index_no_id() -> Shape:
    """Old Ollama and some proxies: neither index nor id, one call per delta."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    for name, arguments in [("ping", PING_ARGS), ("apong", APONG_ARGS)]:
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"type": "function", "function": {"name": name, "arguments": arguments}}
                    ]
                }
            )
        )
    chunks.append(chunk({}, "tool_calls"))
    return Shape("old Ollama, proxies", chunks, [("ping", {}), ("apong", {"times": 2})])


def name_on_every_delta() -> Shape:
    """llama.cpp server with ``--jinja``: the full name (and the id) repeated on every delta."""
    chunks = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(
        [("jb1", "ping", PING_ARGS), ("jb2", "apong", APONG_ARGS)]
    ):
        for piece in pieces(arguments, 3) or [""]:
            part = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": piece},
            }
            chunks.append(chunk({"tool_calls": [part]}))
    chunks.append(chunk({}, "tool_calls"))
    return Shape("llama.cpp server --jinja", chunks, [("ping", {}), ("apong", {"times": 2})])


def whole_calls_in_one_delta() -> Shape:
    """Groq, xAI: every call complete in a single delta, with indexes."""
    parts = [
        {
            "index": 0,
            "id": "call_g1",
            "type": "function",
            "function": {"name": "ping", "arguments": PING_ARGS},
        },
        {
            "index": 1,
            "id": "call_g2",
            "type": "function",
            "function": {"name": "apong", "arguments": APONG_ARGS},
        },
    ]
    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": parts}),
        chunk({}, "tool_calls", x_groq={"id": "req_01", "usage": USAGE}),
    ]
    return Shape("Groq, xAI", chunks, [("ping", {}), ("apong", {"times": 2})])


def empty_choices_everywhere() -> Shape:
    """Azure OpenAI (prompt filter results first), Mistral, OpenAI with usage: chunks with an
    empty ``choices`` list first, in the middle and last."""
    chunks = [
        chunk(None, prompt_filter_results=[{"prompt_index": 0, "content_filter_results": {}}]),
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello"}),
        chunk(None),
        chunk({"content": " there."}),
        chunk({}, "stop"),
        chunk(None, usage=USAGE),
    ]
    return Shape("Azure, Mistral, OpenAI usage chunk", chunks, said="Hello there.")


def reasoning_then_answer() -> Shape:
    """DeepSeek reasoner, xAI, vLLM reasoning parsers: ``reasoning_content`` deltas before the
    answer, and ``tool_calls: []`` on every delta."""
    chunks = [
        chunk({"role": "assistant", "content": None, "reasoning_content": "", "tool_calls": []})
    ]
    for thought in ["The user ", "greets me; ", "I should greet back."]:
        chunks.append(chunk({"content": None, "reasoning_content": thought, "tool_calls": []}))
    for word in ["Hi", ", how can I help?"]:
        chunks.append(chunk({"content": word, "reasoning_content": None, "tool_calls": []}))
    chunks.append(chunk({"content": "", "tool_calls": []}, "stop", usage=USAGE))
    return Shape("DeepSeek, xAI, vLLM reasoning", chunks, said="Hi, how can I help?")


def written(who: str, reply: str, calls: list[tuple[str, dict[str, Any]]]) -> Shape:
    """A call the model wrote as its reply's text (no tool_calls delta), in pieces of 7."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces(reply, 7)]
    chunks.append(chunk({}, "stop", usage=USAGE))
    return Shape(who, chunks, calls)


def text_fenced_json() -> Shape:
    """Qwen2.5-Coder on llama.cpp without a tool-call parser: the call in a ```json fence."""
    reply = '```json\n{"name": "apong", "arguments": {"times": 2}}\n```'
    return written("Qwen2.5-Coder, fenced", reply, [("apong", {"times": 2})])


def text_bare_tool_parameters() -> Shape:
    """Small models' own shape: bare JSON, ``tool`` and ``parameters``."""
    reply = '\n{"tool": "apong", "parameters": {"times": 2}}'
    return written("small models, bare", reply, [("apong", {"times": 2})])


def text_args_as_a_string() -> Shape:
    """``tool`` and ``args``, the arguments a JSON string as the wire format carries them."""
    reply = json.dumps({"tool": "apong", "args": APONG_ARGS})
    return written("small models, string args", reply, [("apong", {"times": 2})])


def text_tool_call_tags() -> Shape:
    """Hermes / Qwen template output passed through as text: two ``<tool_call>`` blocks."""
    reply = (
        '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "apong", "arguments": {"times": 2}}\n</tool_call>'
    )
    return written("Hermes tags as text", reply, [("ping", {}), ("apong", {"times": 2})])


SHAPES = {
    "openai_char_by_char": openai_char_by_char,
    "same_index_distinct_ids": same_index_distinct_ids,
    "vllm_id_on_first_delta_only": vllm_id_on_first_delta_only,
    "gemini_no_index": no_index,
    "gemini3_thought_signature": lambda: no_index(extra_content=True),
    "no_index_no_id": no_index_no_id,
    "llamacpp_name_on_every_delta": name_on_every_delta,
    "groq_whole_calls": whole_calls_in_one_delta,
    "azure_empty_choices": empty_choices_everywhere,
    "deepseek_reasoning": reasoning_then_answer,
    "text_fenced_json": text_fenced_json,
    "text_bare_tool_parameters": text_bare_tool_parameters,
    "text_args_as_a_string": text_args_as_a_string,
    "text_tool_call_tags": text_tool_call_tags,
}
