"""Tool calls put together from a model's streamed deltas, as OpenAI-compatible servers send them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ...dispatch.bounds import PREVIEW_CHARS, summary

NAME_LIMIT = 200  # characters of a streamed call's name and id kept (a tool's name has 64)
DROPPED_TRACKED = 50_000  # calls past the kept ones whose deltas are told apart (then counted)


@dataclass(kw_only=True, slots=True)
class StreamedCall:
    """One tool call being put together from streamed deltas."""

    index: int | None
    id: str = ""
    name: str = ""
    arguments: str = ""  # (only their start once they are more than a call may bring)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. Gemini's extra_content
    size: int = 0  # bytes of arguments streamed
    digest: Any = None  # their sha256, once they are more than a call may bring
    dropped: bool = False  # past the calls a reply may keep: counted, nothing else

    def append(self, piece: str, max_bytes: int | None) -> None:
        """More of the arguments; past ``max_bytes`` only their digest and start are kept."""
        if self.dropped or not piece:
            return
        encoded = piece.encode("utf-8", "surrogatepass")
        self.size += len(encoded)
        if self.digest is not None:
            self.digest.update(encoded)
            return
        self.arguments += piece
        if max_bytes is not None and self.size > max_bytes:
            self.digest = hashlib.sha256(self.arguments.encode("utf-8", "surrogatepass"))
            self.arguments = self.arguments[:PREVIEW_CHARS]

    @property
    def too_large(self) -> dict[str, Any] | None:
        """What is kept instead of arguments that are more than a call may bring, if they are."""
        if self.digest is None:
            return None
        return summary(self.size, self.digest.hexdigest(), self.arguments)

    def as_message(self) -> dict[str, Any]:
        """The call as the assistant message sent back on the next step (extras included)."""
        too_large = self.too_large
        if too_large is not None:
            too_large = {**too_large, "preview": ""}
        arguments = self.arguments if too_large is None else json.dumps(too_large)
        return {
            **self.extra,
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }

    def as_intent(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "too_large": self.too_large,  # (its preview is the arguments' start, unredacted)
            "extra": self.extra,
        }


class StreamedCalls:
    """Merges tool-call deltas by (index, id), as OpenAI-compatible servers really send them.

    A new non-empty id at an occupied index starts a new call (Ollama, vLLM: every call at
    index 0); a delta without an index goes by id, or continues the last call unless it names
    a new one (Gemini, proxies); a delta repeating the full name sets it (llama.cpp).
    """

    def __init__(self, *, keep: int | None = None, max_bytes: int | None = None) -> None:
        self.calls: list[StreamedCall] = []
        self.keep = keep  # calls kept; the rest are counted in ``dropped``
        self.max_bytes = max_bytes  # of one call's arguments: past it, their digest and start
        self.dropped = 0
        self.finish_reasons: list[str] = []  # why the model stopped, per choice (its trace)
        self._last: StreamedCall | None = None
        self._at_index: dict[int, StreamedCall] = {}
        self._by_id: dict[str, StreamedCall] = {}

    def add(self, part: Any) -> None:
        function = getattr(part, "function", None)
        name = (getattr(function, "name", None) or "") if function is not None else ""
        arguments = (getattr(function, "arguments", None) or "") if function is not None else ""
        call_id = (getattr(part, "id", None) or "")[:NAME_LIMIT]
        call = self._slot(getattr(part, "index", None), call_id, name[:NAME_LIMIT])
        if call.dropped:
            return
        if name and not (call.name and call.name.endswith(name)):
            # A repeated or growing full name replaces; a genuinely new fragment appends.
            call.name = name if name.startswith(call.name) else call.name + name
            call.name = call.name[:NAME_LIMIT]
        call.append(arguments, self.max_bytes)
        extra = getattr(part, "model_extra", None) or {}
        call.extra.update({key: value for key, value in extra.items() if value is not None})

    def _slot(self, index: int | None, call_id: str, name: str) -> StreamedCall:
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        current = self._at_index.get(index) if index is not None else None
        last = self._last
        if index is None and not call_id and last is not None and not (name and last.name):
            current = last  # an index-less continuation of the last call
        if current is not None and not (call_id and current.id and current.id != call_id):
            if call_id and not current.id:
                current.id = call_id
                self._by_id[call_id] = current
            return current
        call = StreamedCall(index=index, id=call_id)
        self._last = call
        if self.keep is not None and len(self.calls) >= self.keep:
            call.dropped = True
            self.dropped += 1
            if self.dropped > DROPPED_TRACKED:
                return call  # (counted still; a continuation of it may count again)
        else:
            self.calls.append(call)
        if index is not None:
            self._at_index[index] = call
        if call_id:
            self._by_id[call_id] = call
        return call

    def finished(self, *, prefix: str) -> list[StreamedCall]:
        """The calls in the order they were opened; a call the model left without an id gets one."""
        for position, call in enumerate(self.calls):
            call.id = call.id or f"{prefix}_{position}"
        return [call for call in self.calls if call.name or call.arguments]
