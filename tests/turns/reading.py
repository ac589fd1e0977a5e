"""What the turn tests share: a turn's frames of one type, its conversation's stored messages, what
the model was fed back, and the next frame a channel layer carries."""

from __future__ import annotations

import asyncio
import json


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
        (message["tool_call_id"], json.loads(message["content"]))
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
