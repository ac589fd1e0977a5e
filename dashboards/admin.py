from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from guardian.admin import GuardedModelAdmin

from .models import Backup, Dashboard, Environment


@admin.register(Environment)
class EnvironmentAdmin(GuardedModelAdmin):
    list_display = ["name", "slug", "is_production", "database", "position"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Dashboard)
class DashboardAdmin(GuardedModelAdmin):
    list_display = ["title", "environment", "slug", "version", "published", "owner", "updated_at"]
    list_filter = ["environment", "published"]
    search_fields = ["title", "slug", "description"]
    list_select_related = ["environment", "owner"]
    readonly_fields = ["documentation_source", "documented_at", "created_at", "updated_at"]
    autocomplete_fields = ["owner"]


@admin.register(Backup)
class BackupAdmin(admin.ModelAdmin[Backup]):
    """Backups are written by the run_backup tool and restored with manage.py restore_dashboards."""

    list_display = ["pk", "environment", "dashboard_count", "size", "created_by", "created_at"]
    list_filter = ["environment"]
    readonly_fields = [
        "environment",
        "file",
        "size",
        "sha256",
        "dashboard_count",
        "created_by",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
