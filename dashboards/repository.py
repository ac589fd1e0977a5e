"""The dashboards-as-code repository: a bare git repository driven through the git CLI.

Commits are built with plumbing (a private index, ``commit-tree``, ``update-ref`` with the old
value), so no working tree is shared between requests and two writers cannot lose a commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from assistant.exceptions import AssistantError, InvalidEntities

DEFAULT_BRANCH = "main"
GIT_TIMEOUT = 30  # seconds any one git command may take


class RepositoryError(AssistantError):
    """The dashboards repository is missing or git refused an operation."""

    code = "repository_error"


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    branch: str
    files: list[tuple[str, str]]  # (A/M/D, path)


def repository_path() -> Path:
    configured = getattr(settings, "DASHBOARDS_REPOSITORY", None)
    if not configured:
        raise RepositoryError("DASHBOARDS_REPOSITORY is not set in the project's settings.")
    return Path(configured)


def git(*args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run one git command against the repository; its stdout, or ``RepositoryError``."""
    path = repository_path()
    try:
        completed = subprocess.run(
            ["git", f"--git-dir={path}", *args],
            input=input,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RepositoryError(f"git {args[0]} could not run: {exc}") from exc
    if completed.returncode != 0:
        message = completed.stderr.decode(errors="replace").strip().splitlines()
        raise RepositoryError(f"git {args[0]} failed: {message[-1] if message else 'no reason'}")
    return completed.stdout.decode(errors="replace").strip()


def exists() -> bool:
    path = repository_path()
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def require_repository() -> None:
    if not exists():
        raise RepositoryError(
            f"The dashboards repository does not exist at {repository_path()}; "
            "create it with `manage.py demo_dashboards`."
        )


def identity(user: Any) -> dict[str, str]:
    """Author and committer: the user the assistant acts for (the seed when there is none)."""
    name = user.get_username() if user is not None else "django-ops-assistant"
    email = getattr(user, "email", "") or f"{name}@dashboards.invalid"
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def initialise(readme: str) -> bool:
    """Create the bare repository with a first commit on ``main``; False if it already exists."""
    if exists():
        return False
    path = repository_path()
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "init", "--quiet", "--bare", f"--initial-branch={DEFAULT_BRANCH}", str(path)],
        check=True,
        capture_output=True,
        timeout=GIT_TIMEOUT,
    )
    commit_files(
        DEFAULT_BRANCH,
        {"README.md": readme.encode()},
        prefix="",
        message="Dashboards as code",
        user=None,
    )
    return True


def branch_commit(branch: str) -> str | None:
    try:
        return git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    except RepositoryError:
        return None


def branches() -> list[str]:
    output = git("for-each-ref", "--format=%(refname:short)", "refs/heads/")
    return [line for line in output.splitlines() if line]


def check_branch_name(name: str, entity: str = "branch") -> str:
    """The name git would give this branch, or ``InvalidEntities``."""
    text = name.strip()
    if not text:
        raise InvalidEntities({entity: "name the branch"})
    try:
        return git("check-ref-format", "--branch", text)
    except RepositoryError:
        raise InvalidEntities({entity: f"{text!r} is not a valid branch name"}) from None


def create_branch(name: str, base: str, user: Any) -> str:
    """A new branch at ``base``'s commit; returns that commit."""
    require_repository()
    name = check_branch_name(name, "name")
    start = branch_commit(base.strip())
    if start is None:
        raise InvalidEntities(
            {"base": f"no branch {base.strip()!r}; branches: {', '.join(branches())}"}
        )
    try:
        # An empty old value: the ref must not exist yet (atomic, whoever else creates it).
        git("update-ref", f"refs/heads/{name}", start, "")
    except RepositoryError:
        raise InvalidEntities({"name": f"branch {name!r} already exists"}) from None
    return start


def commit_files(
    branch: str,
    files: Mapping[str, bytes],
    *,
    prefix: str,
    message: str,
    user: Any,
) -> Commit | None:
    """Make ``prefix/`` hold exactly ``files`` on ``branch``; None when nothing changed."""
    parent = branch_commit(branch)
    root = f"{prefix}/" if prefix else ""
    wanted = {f"{root}{path}": content for path, content in files.items()}
    lines = []
    if parent and prefix:
        for old in git("ls-tree", "-r", "--name-only", parent, "--", root).splitlines():
            if old and old not in wanted:
                lines.append(f"0 {'0' * 40}\t{old}")  # mode 0: drop the path from the index
    for path, content in sorted(wanted.items()):
        blob = git("hash-object", "-w", "--stdin", input=content)
        lines.append(f"100644 {blob}\t{path}")
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), **identity(user)}
        if parent:
            git("read-tree", parent, env=env)
        if lines:
            git(
                "update-index",
                "--index-info",
                input="".join(f"{line}\n" for line in lines).encode(),
                env=env,
            )
        tree = git("write-tree", env=env)
    if parent and tree == git("rev-parse", f"{parent}^{{tree}}"):
        return None
    commit = git("commit-tree", tree, *(("-p", parent) if parent else ()), "-m", message, env=env)
    # Compare-and-swap: a branch moved by someone else meanwhile makes this fail, not vanish.
    git("update-ref", f"refs/heads/{branch}", commit, parent or "")
    changed = git(
        "diff-tree",
        "--no-commit-id",
        "--name-status",
        "-r",
        *((parent, commit) if parent else ("--root", commit)),
    )
    return Commit(
        sha=commit,
        branch=branch,
        files=[tuple(line.split("\t", 1)) for line in changed.splitlines() if line],  # type: ignore[misc]
    )


def show(branch: str, path: str) -> str:
    return git("show", f"refs/heads/{branch}:{path}")


def export_file(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
