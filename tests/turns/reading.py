"""What the turn tests share: a turn's frames of one type, its conversation's stored messages, what
the model was fed back, and the next frame a channel layer carries."""

from __future__ import annotations

import asyncio
import json
import re

# What the model is told of a call (assistant.turns.planners.told): its text, a job's task id,
# then "(decision, code. note)"; a repeat adds "(repeated. note)" to the earlier answer.
TOLD = re.compile(
    r"\A(?P<text>.*?)(?:\ntask_id: (?P<task_id>\S+))?\n\n"
    r"\((?P<decision>[a-z_]+)(?:, (?P<code>[a-z_]+))?\. (?P<note>[^\n]*)\)\Z",
    re.S,
)
REPEATED = re.compile(r"\A(?P<earlier>.*)\n\(repeated\. (?P<note>[^\n]*)\)\Z", re.S)


def read_told(content):
    """What the model was told of a call, as a dict: decision, text, note (and code, task_id
    when there are; a repeat's ``earlier`` answer); fails on any other shape."""
    repeated = REPEATED.match(content)
    if repeated:
        return {
            "decision": "repeated",
            "note": repeated["note"],
            "earlier": read_told(repeated["earlier"]),
        }
    match = TOLD.match(content)
    assert match, f"not what the model is told of a call: {content!r}"
    return {key: value for key, value in match.groupdict().items() if value is not None}


def of_type(turn, kind):
    return [frame for frame in turn.frames if frame["type"] == kind]


def stored(conversation):
    return [
        (message.role, message.text, message.status)
        for message in conversation.messages.order_by("created_at", "id")
    ]


def fed_back(request):
    """The tool messages of a request, their content decoded."""
    return [
        (message["tool_call_id"], read_told(message["content"]))
        for message in request["messages"]
        if message["role"] == "tool"
    ]


async def next_frame(layer, channel, wanted):
    """The first frame sent to ``channel`` that ``wanted`` accepts (within five seconds)."""
    async with asyncio.timeout(5):
        while True:
            for text in (await layer.receive(channel))["texts"]:
                frame = json.loads(text)
                if wanted(frame):
                    return frame
