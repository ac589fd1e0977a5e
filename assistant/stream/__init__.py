"""A turn's events: the vocabulary, fan-out to sockets, the replay log."""
