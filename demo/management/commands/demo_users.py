"""Create (or reset) the demo's three users and their groups, and print how to sign in."""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand

DEMO_USERS = [
    # username, password, staff, superuser, group
    ("admin", "admin-demo-password", True, True, None),
    ("operator", "operator-demo-password", True, False, "operators"),
    ("viewer", "viewer-demo-password", False, False, "viewers"),
]
GROUP_PERMISSIONS = {
    "operators": [
        "auth.view_user",
        "auth.change_user",
        "assistant.view_auditentry",
        "assistant.database_read",
    ],
    "viewers": ["auth.view_user"],
}
# an account nobody signs in with, there to be deactivated in the demo (re-activated on each run)
PRACTICE_ACCOUNT = "leaver"


def _permission(label: str) -> Permission:
    app_label, codename = label.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


class Command(BaseCommand):
    help = "Create the demo users (admin, operator, viewer) and print their passwords."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, perms in GROUP_PERMISSIONS.items():
            group, _ = Group.objects.get_or_create(name=name)
            group.permissions.add(*[_permission(label) for label in perms])
        User = get_user_model()
        self.stdout.write("Demo users (sign in on the demo's home page):")
        for username, password, staff, superuser, group in DEMO_USERS:
            user, _ = User._default_manager.get_or_create(username=username)
            user.is_staff, user.is_superuser, user.is_active = staff, superuser, True
            user.set_password(password)
            user.save()
            if group:
                user.groups.set([Group.objects.get(name=group)])
            self.stdout.write(f"  {username:<9} password: {password}")
        leaver, _ = User._default_manager.get_or_create(username=PRACTICE_ACCOUNT)
        leaver.is_staff, leaver.is_superuser, leaver.is_active = False, False, True
        leaver.set_unusable_password()
        leaver.save()
        self.stdout.write(
            f"Try deactivating {PRACTICE_ACCOUNT} (it cannot sign in): "
            f'deactivate user user_id={leaver.pk} reason="left"'
        )
