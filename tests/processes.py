"""Server processes a test starts: the repository they run in, free ports, waiting until one
listens, and the test database as a URL they can reach."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
FIRST_PORT = 7101


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` consecutive ports from 7101 up whose cluster bus ports (+10000) are free too."""
    start = FIRST_PORT
    while start < 7200 - count:
        ports = list(range(start, start + count))
        if all(free(port) and free(port + 10000) for port in ports):
            return ports
        start += count
    raise RuntimeError("no free ports in 7101-7199 for a Redis Cluster")


def wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server on port {port} exited:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    pytest.fail(f"server on port {port} did not start within 20 s:\n{log.read_text()}")


def database_url() -> str:
    """The test database (the test one, once it is set up) as a URL a server process can use."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
