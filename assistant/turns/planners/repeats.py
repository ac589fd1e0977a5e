"""No identical call twice in a turn: a model's repeat is answered with the first call's result.

Small models re-propose the call they just made after its result comes back; with real tools that
is a second backup or a second pending action. Within one turn an identical call (same tool, same
arguments) is never dispatched again unless its tool is declared ``repeatable`` (its answer
changes while a turn runs, as a job's status does): reads included, since the model already has
their answer.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext_noop

from ...core.registry import ToolRegistry
from .told import told_again

STUCK_NOTICE = gettext_noop(
    "\n\n(I stopped: the model kept asking again for a call answered above.)"
)
STUCK_AFTER = 2  # model replies in a row made only of repeats: then the turn ends


def call_key(name: str, arguments: Any) -> str:
    """What makes two calls the same call: the tool and its arguments, keys in any order."""
    return json.dumps([name, arguments], sort_keys=True, default=str)


class CallMemory:
    """The results the model was told for this turn's calls, by call."""

    def __init__(self, site: ToolRegistry) -> None:
        self.site = site
        self.told: dict[str, str] = {}
        self.idle = 0  # model replies in a row that were only repeats
        self.made: set[str] = set()  # every call made, repeatable tools' too
        self.again = 0  # identical calls made again in this reply

    def earlier(self, name: str, arguments: Any) -> str | None:
        """What to tell the model instead of running a repeat, if it is one (else None)."""
        key = call_key(name, arguments)
        if key in self.made:
            self.again += 1  # (a repeatable tool's repeat runs, and still counts as one)
        self.made.add(key)
        told = self.told.get(key)
        if told is None:
            return None
        return told_again(told)

    def remember(self, name: str, arguments: Any, told: str) -> None:
        """Keep what the model was told for a call, unless its tool may be repeated."""
        tool = self.site.find(name)
        if tool is None or not tool.repeatable:
            self.told[call_key(name, arguments)] = told

    def stuck(self, calls: int) -> bool:
        """After a model reply: whether it and the one before were only identical calls made
        again (the model is looping; asking it again would cost a step and bring one more)."""
        again, self.again = self.again, 0
        self.idle = self.idle + 1 if calls and again == calls else 0
        return self.idle >= STUCK_AFTER
