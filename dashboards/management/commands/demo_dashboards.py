"""Seed the dashboards demo: environments, dashboards, the git repository and who may do what."""

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand
from django.db import transaction
from guardian.shortcuts import assign_perm

from dashboards import repository
from dashboards.models import Dashboard, Environment
from dashboards.seed import ENVIRONMENTS, VIEWER_READS, seed_rows

GROUP_PERMISSIONS = {
    "operators": [
        "dashboards.view_dashboard",
        "dashboards.search_dashboard",
        "dashboards.deploy_dashboard",
        "dashboards.migrate_dashboard",
        "dashboards.backup_dashboard",
        "dashboards.commit_dashboard",
        "dashboards.document_dashboard",
        "dashboards.view_environment",
        "assistant.health_read",
        "assistant.validation_run",
    ],
    "viewers": ["dashboards.search_dashboard"],
}
# Environments the operators may change (deploy to, back up, migrate): never production.
OPERATOR_ENVIRONMENTS = ("dev", "staging")
README = """# Dashboards as code

One folder per environment (`dev/`, `staging/`, `prod/`), one JSON file per dashboard, written by
the assistant's `commit_changes` tool. Branches come from its `create_branch` tool.
"""


def _permission(label: str) -> Permission:
    app_label, codename = label.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


class Command(BaseCommand):
    help = (
        "Create the dev/staging/prod environments, a few dozen dashboards (some deliberately "
        "broken), the dashboards git repository and the demo groups' permissions. Safe to run "
        "again: what exists is kept (use --reset to restore the seeded dashboards)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="put every seeded dashboard back as seeded (others are left alone)",
        )

    def handle(self, *args: Any, reset: bool, **options: Any) -> None:
        users = {user.get_username(): user for user in get_user_model()._default_manager.all()}
        with transaction.atomic():
            environments = {}
            for slug, name, production, database, position in ENVIRONMENTS:
                environments[slug], _ = Environment.objects.update_or_create(
                    slug=slug,
                    defaults={
                        "name": name,
                        "is_production": production,
                        "database": database,
                        "position": position,
                    },
                )
            created = 0
            for row in seed_rows():
                values = {
                    "title": row["title"],
                    "owner": users.get(row["owner"]) if row["owner"] else None,
                    "description": row["description"],
                    "charts": row["charts"],
                    "database": row["database"],
                    "version": row["version"],
                    "published": row["published"],
                }
                lookup = {"environment": environments[row["environment"]], "slug": row["slug"]}
                if reset:
                    _, made = Dashboard.objects.update_or_create(**lookup, defaults=values)
                else:
                    _, made = Dashboard.objects.get_or_create(**lookup, defaults=values)
                created += made
            self._grant(environments)
        total = Dashboard.objects.count()
        self.stdout.write(
            f"Dashboards: {total} in {', '.join(environments)} ({created} created now); "
            "some are broken on purpose — ask the assistant to validate 'dashboards.Dashboard'."
        )
        self._repository(environments)
        self.stdout.write(
            "  operator may deploy to, back up and migrate dev and staging; only admin touches "
            f"prod; viewer reads {', '.join(VIEWER_READS)}."
        )

    def _grant(self, environments: dict[str, Environment]) -> None:
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in GROUP_PERMISSIONS}
        for name, labels in GROUP_PERMISSIONS.items():
            groups[name].permissions.add(*[_permission(label) for label in labels])
        for slug in OPERATOR_ENVIRONMENTS:
            assign_perm("dashboards.change_environment", groups["operators"], environments[slug])
        for dashboard in Dashboard.objects.filter(slug__in=VIEWER_READS):
            assign_perm("dashboards.view_dashboard", groups["viewers"], dashboard)

    def _repository(self, environments: dict[str, Environment]) -> None:
        if repository.initialise(README):
            self.stdout.write(
                f"Created the dashboards repository at {repository.repository_path()}"
            )
        for slug, environment in environments.items():
            files = {
                f"{dashboard.slug}.json": repository.export_file(dashboard.as_export())
                for dashboard in Dashboard.objects.filter(environment=environment).select_related(
                    "owner"
                )
            }
            commit = repository.commit_files(
                repository.DEFAULT_BRANCH,
                files,
                prefix=slug,
                message=f"Seed {environment.name}'s dashboards",
                user=None,
            )
            if commit is not None:
                self.stdout.write(f"  committed {slug}/ on main: {commit.sha[:12]}")
