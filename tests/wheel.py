"""The built wheel, installed into a virtualenv of its own: what a user's ``pip install`` gets.

The wheel is built once per test process from a copy of the sources (a stale ``build/`` in the
checkout cannot leak into it) and installed with ``--no-deps`` into a fresh venv. The
dependencies come from the test environment through a ``.pth`` file: the venv's own
site-packages (the wheel) comes first on ``sys.path`` and the checkout is not on it at all, so
``import assistant`` reaches only what the wheel installed. ``pip check`` then holds the wheel's
declared requirements against those dependencies.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "assistant")
_installed: InstalledWheel | None = None


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return set(archive.namelist())

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 120) -> str:
        """Run the venv's python (no variable of the test run leaks in); its stdout."""
        result = subprocess.run(
            [str(self.python), *args],
            cwd=cwd or self.venv,
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"python {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result.stdout


def clean_environment() -> dict[str, str]:
    """The environment without the test run's settings, databases or paths."""
    leaks = ("DJANGO_", "DATABASE_", "REDIS_", "ASSISTANT_", "PYTEST_", "PYTHON", "VIRTUAL_ENV")
    return {key: value for key, value in os.environ.items() if not key.startswith(leaks)}


def _check(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"


def _build(workdir: Path) -> Path:
    source = workdir / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    # no isolation: the pinned setuptools of this environment, no index needed (CI builds
    # the release artefacts in isolation, `nox -s package`)
    dist = workdir / "dist"
    _check(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), "."],
        source,
    )
    (wheel,) = dist.glob("*.whl")
    return wheel


def _install(wheel: Path, venv: Path) -> None:
    _check([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    shared = [path for path in site.getsitepackages() if Path(path).is_dir()]
    lines = [f"import site; site.addsitedir({path!r})" for path in shared]
    (purelib / "test-environment.pth").write_text("\n".join(lines) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    _check(
        [
            *pip,
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            str(wheel),
        ],
        venv,
    )
    _check([*pip, "check", "--disable-pip-version-check"], venv)


def installed_wheel(factory: pytest.TempPathFactory) -> InstalledWheel:
    """The wheel, built and installed once per test process."""
    global _installed
    if _installed is None:
        workdir = factory.mktemp("wheel")
        wheel = _build(workdir)
        _install(wheel, workdir / "venv")
        _installed = InstalledWheel(wheel=wheel, venv=workdir / "venv")
    return _installed
