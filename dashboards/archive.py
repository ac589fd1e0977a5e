"""Backups of an environment's dashboards: one JSON archive in Django storage, and its restore."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from .models import Backup, Dashboard, Environment

FORMAT = "dashboards-backup/1"


class RestoreError(Exception):
    """The archive is missing, damaged or not a dashboards backup."""


def archive_content(environment: Environment, dashboards: list[Dashboard], user: Any) -> bytes:
    payload = {
        "format": FORMAT,
        "environment": {
            "slug": environment.slug,
            "name": environment.name,
            "database": environment.database,
        },
        "created_at": timezone.now().isoformat(),
        "created_by": user.get_username() if user is not None else None,
        "dashboards": [dashboard.as_export() for dashboard in dashboards],
    }
    return (json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def store_backup(environment: Environment, content: bytes, count: int, user: Any) -> Backup:
    """Write the archive to storage and record it with its size and checksum."""
    backup = Backup(
        environment=environment,
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        dashboard_count=count,
        created_by=user,
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%S")
    backup.file.save(f"{environment.slug}-{stamp}.json", ContentFile(content), save=False)
    backup.save()
    return backup


def read_archive(backup: Backup) -> dict[str, Any]:
    """The archive's content, after checking it is there and unchanged since it was written."""
    try:
        with backup.file.open("rb") as handle:
            content = handle.read()
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise RestoreError(
            f"backup #{backup.pk}: its file {backup.file.name!r} is missing"
        ) from exc
    if len(content) != backup.size or hashlib.sha256(content).hexdigest() != backup.sha256:
        raise RestoreError(f"backup #{backup.pk}: the file does not match its size and checksum")
    try:
        payload = json.loads(content)
    except ValueError as exc:
        raise RestoreError(f"backup #{backup.pk}: the file is not JSON") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise RestoreError(f"backup #{backup.pk}: not a {FORMAT} archive")
    return payload


@dataclass
class Restored:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


FIELDS = ("title", "description", "published", "database", "version", "charts")


def restore(backup: Backup, *, dry_run: bool = False) -> Restored:
    """Make the backup's environment hold exactly the archived dashboards again."""
    payload = read_archive(backup)
    environment = backup.environment
    users = get_user_model()._default_manager
    outcome = Restored()
    with transaction.atomic():
        current = {
            dashboard.slug: dashboard
            for dashboard in Dashboard.objects.select_for_update().filter(environment=environment)
        }
        archived = {entry["slug"]: entry for entry in payload["dashboards"]}
        for slug, entry in archived.items():
            owner = (
                users.filter(**{users.model.USERNAME_FIELD: entry["owner"]}).first()
                if entry.get("owner")
                else None
            )
            dashboard = current.get(slug)
            values = {name: entry.get(name) for name in FIELDS}
            values["description"] = values["description"] or ""
            values["database"] = values["database"] or ""
            values["charts"] = values["charts"] or []
            if dashboard is None:
                outcome.created.append(slug)
                if not dry_run:
                    Dashboard.objects.create(
                        environment=environment, slug=slug, owner=owner, **values
                    )
                continue
            changed = {
                name: value for name, value in values.items() if getattr(dashboard, name) != value
            }
            if dashboard.owner_id != (owner.pk if owner else None):
                changed["owner"] = owner
            if not changed:
                outcome.unchanged.append(slug)
                continue
            outcome.updated.append(slug)
            if not dry_run:
                for name, value in changed.items():
                    setattr(dashboard, name, value)
                dashboard.save()
        for slug, dashboard in current.items():
            if slug not in archived:
                outcome.deleted.append(slug)
                if not dry_run:
                    dashboard.delete()
    return outcome
