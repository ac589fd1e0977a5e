"""A PostgreSQL cluster of a test's own, on a private port, that the test may stop (an outage)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_SERVICES
from tests.processes import free_port


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian's layout), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


@dataclass
class Cluster:
    """A running throwaway cluster: trust auth, user ``postgres``, on 127.0.0.1:``port``."""

    bin: Path
    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *command: str) -> None:
        # initdb and the server refuse to run as root: as the postgres user, then
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.data.parent / "server.log")  # (the server's output: not our pipe)
        pg_ctl = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-o", options]
        self.run(*pg_ctl, "-w", "start")

    def crash(self) -> None:
        """The server goes down at once, its connections cut (``immediate``: no goodbye)."""
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


@contextlib.contextmanager
def private_postgres() -> Iterator[Cluster]:
    """Start a cluster of its own (skipped without the binaries, an error when services are
    required); it is stopped and removed afterwards, whatever happened."""
    bin = postgres_bin()
    if bin is None:
        reason = "needs PostgreSQL's server binaries (/usr/lib/postgresql/*/bin)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)
    home = Path(tempfile.mkdtemp(prefix="assistant-outage-"))
    data = home / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
        shutil.chown(data, "postgres")
        home.chmod(0o755)
    cluster = Cluster(bin=bin, data=data, port=free_port())
    try:
        cluster.run(str(bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            cluster.crash()
        shutil.rmtree(home, ignore_errors=True)
