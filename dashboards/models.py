"""Environments, the dashboards deployed to them, and archived backups of an environment."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class Environment(models.Model):
    """Where dashboards run (dev, staging, prod), and the database connection they query there."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=50, unique=True)
    is_production = models.BooleanField(default=False)
    database = models.CharField(
        max_length=100, help_text="The database connection dashboards in this environment query."
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Promotion order.")

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name


class Dashboard(models.Model):
    """A BI dashboard in one environment: charts (title, type, SQL) against its database."""

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="dashboards"
    )
    title = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="dashboards",
    )
    published = models.BooleanField(default=False)
    # [{"title": "...", "type": "line" | "bar" | "table" | ..., "sql": "SELECT ..."}]
    charts = models.JSONField(default=list, blank=True)
    database = models.CharField(
        max_length=100,
        blank=True,
        help_text="The connection its charts query (remapped on deploy).",
    )
    version = models.PositiveIntegerField(default=1)
    documentation = models.TextField(blank=True, help_text="Markdown, written by the assistant.")
    documentation_source = models.CharField(max_length=120, blank=True)
    documented_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment__position", "title", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "slug"], name="dashboards_slug_unique_per_environment"
            )
        ]
        permissions = [
            ("search_dashboard", "Can search dashboards (sees those it may view)"),
            ("deploy_dashboard", "Can deploy dashboards to environments it may change"),
            ("migrate_dashboard", "Can migrate dashboards between environments it may change"),
            ("backup_dashboard", "Can back up the dashboards of environments it may change"),
            ("commit_dashboard", "Can create branches and commit dashboards to the repository"),
            ("document_dashboard", "Can have documentation written for dashboards"),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.environment.slug})"

    def as_export(self) -> dict[str, Any]:
        """What a dashboard is as code: the file committed to git and the entry in a backup."""
        return {
            "slug": self.slug,
            "title": self.title,
            "description": self.description,
            "owner": self.owner.get_username() if self.owner else None,
            "published": self.published,
            "database": self.database,
            "version": self.version,
            "charts": self.charts,
        }


def backup_path(backup: Backup, filename: str) -> str:
    return f"dashboard-backups/{backup.environment.slug}/{filename}"


class Backup(models.Model):
    """An archive of one environment's dashboards, in Django storage, with its checksum."""

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="backups")
    file = models.FileField(upload_to=backup_path)
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    dashboard_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="dashboard_backups",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"Backup #{self.pk} of {self.environment}"
