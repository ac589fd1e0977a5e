"""The chat websocket: ``consumer`` (``AssistantConsumer``: the frames, the conversations a socket
watches, replay) over ``output`` (what a socket sends and how fast: bursts, backpressure)."""

from .consumer import AssistantConsumer

__all__ = ["AssistantConsumer"]
