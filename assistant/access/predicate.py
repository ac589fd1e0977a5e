"""The one predicate catalog and dispatch use (``denials``), over a snapshot of what a user holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..core.compiled import rows_for
from ..core.declaration import AssistantTool
from ..core.registry import ToolRegistry
from .requirements import _required, required_permissions

ACCESS_ATTRIBUTE = "_assistant_access"
NOT_AUTHENTICATED = "not authenticated"
INACTIVE = "inactive user"
MISSING = "missing permission "  # a denial's reason: this prefix, then the permission string


_settings_epoch = 0  # bumped when ASSISTANT changes: what was derived from it is stale


@receiver(setting_changed)
def _forget_on_change(*, setting: str, **kwargs: Any) -> None:
    global _settings_epoch
    if setting == "ASSISTANT":
        _required.clear()
        _settings_epoch += 1


@dataclass(slots=True)
class UserAccess:
    """A snapshot of what a user holds, loaded once (2 or 3 queries) and reused for every tool."""

    user: Any
    authenticated: bool
    active: bool
    superuser: bool
    perms: frozenset[str]
    _object_perms: frozenset[str] | None = field(default=None)
    _allowed: dict[tuple[Any, ...], tuple[AssistantTool, ...]] = field(default_factory=dict)
    _origin: UserAccess | None = None  # the snapshot this one was shared from (``_adopt``)

    def object_perms(self) -> frozenset[str]:
        """Permissions the user holds on at least one object (through django-guardian)."""
        if self._object_perms is None:
            origin = self._origin
            if origin is not None and origin._object_perms is not None:
                self._object_perms = origin._object_perms
            else:
                self._object_perms = _load_object_perms(self.user)
                if origin is not None:
                    origin._object_perms = self._object_perms
        return self._object_perms

    def allowed(self, site: ToolRegistry) -> tuple[AssistantTool, ...]:
        """The site's tools ``denials`` lets this user use (without an instance), in order.

        Worked out once per snapshot: a snapshot is replaced when permissions change, and the
        answer is kept apart per registry version and per ``ASSISTANT`` setting.
        """
        key = (site, site.version, _settings_epoch)
        tools = self._allowed.get(key)
        if tools is None:
            tools = self._allowed[key] = tuple(tool for tool in site if not denials(self, tool))
        return tools


HELD = ("permission__content_type__app_label", "permission__codename")  # a guardian row's


def _held_on_objects(user: Any) -> tuple[Any, Any]:
    """Guardian's rows of the user's object permissions: their own, and their groups'."""
    from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

    return (
        get_user_obj_perms_model()._default_manager.filter(user=user),
        get_group_obj_perms_model()._default_manager.filter(group__in=user.groups.all()),
    )


def _load_object_perms(user: Any) -> frozenset[str]:
    direct, via_groups = (rows.values_list(*HELD) for rows in _held_on_objects(user))
    return frozenset(f"{app}.{codename}" for app, codename in direct.union(via_groups))


MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
GUARDIAN_BACKEND = "guardian.backends.ObjectPermissionBackend"  # (no model permissions of its own)


def _model_backend_alone(user: Any) -> bool:
    """Whether ``get_all_permissions()`` is Django's ModelBackend's answer alone: the backends
    are it and, at most, guardian's (which answers for objects only), and the user model does
    not answer otherwise itself."""
    from django.contrib.auth.models import PermissionsMixin

    backends = set(settings.AUTHENTICATION_BACKENDS)
    return (
        MODEL_BACKEND in backends
        and backends <= {MODEL_BACKEND, GUARDIAN_BACKEND}
        and getattr(type(getattr(user, "_wrapped", user)), "get_all_permissions", None)
        is PermissionsMixin.get_all_permissions  # (a lazy user object, as a request's: its own)
    )


OWN, GROUPS, ON_OBJECTS = 0, 1, 2  # where a row of ``_load_perms`` comes from


def _load_perms(user: Any) -> tuple[frozenset[str], frozenset[str]]:
    """An active user's model permissions as ModelBackend reads them (their own and their
    groups'), and their object permissions (``_load_object_perms``): one query, not three,
    compiled once per process (``compiled.rows_for``).

    ModelBackend's caches are filled with them, as ``get_all_permissions()`` fills them: a
    handler's ``has_perm`` (or ``get_user_permissions``, ``ahas_perm``) asks nothing more.
    """
    read: tuple[set[str], set[str], set[str]] = (set(), set(), set())
    for app, codename, source in rows_for("assistant.permissions", user, _permission_rows):
        read[source].add(f"{app}.{codename}")
    own, via_groups, objects = read
    user._user_perm_cache = own
    user._group_perm_cache = via_groups
    user._perm_cache = own | via_groups
    return frozenset(user._perm_cache), frozenset(objects)


def _permission_rows(user: Any) -> Any:
    """``(app_label, codename, source)`` of every permission the user holds, each source once.

    A ``UNION`` (distinct), not ``UNION ALL``: guardian keeps a row per object.
    """
    from django.contrib.auth.models import Permission
    from django.db.models import Value

    plain = ("content_type__app_label", "codename")
    direct, via_groups = _held_on_objects(user)

    def tagged(queryset: Any, fields: tuple[str, str], source: int) -> Any:
        # (each part and the whole without a default ordering: SQL allows none in a part)
        tagged = queryset.annotate(source=Value(source)).order_by()
        return tagged.values_list(*fields, "source")

    return (
        tagged(user.user_permissions.all(), plain, OWN)
        .union(
            tagged(Permission.objects.filter(group__in=user.groups.all()), plain, GROUPS),
            tagged(direct, HELD, ON_OBJECTS),
            tagged(via_groups, HELD, ON_OBJECTS),
        )
        .order_by()
    )


def _load_access(user: Any) -> UserAccess:
    authenticated = bool(user is not None and user.is_authenticated)
    active = authenticated and bool(getattr(user, "is_active", False))
    superuser = active and bool(getattr(user, "is_superuser", False))
    perms: frozenset[str] = frozenset()
    object_perms: frozenset[str] | None = None  # (read when first needed)
    if active and not superuser:
        if _model_backend_alone(user):
            perms, object_perms = _load_perms(user)
        else:
            perms = frozenset(user.get_all_permissions())
    access = UserAccess(
        user=user,
        authenticated=authenticated,
        active=active,
        superuser=superuser,
        perms=perms,
        _object_perms=object_perms,
    )
    if authenticated:
        setattr(user, ACCESS_ATTRIBUTE, access)
    return access


def denials(access: UserAccess, tool: AssistantTool, instance: Any = None) -> tuple[str, ...]:
    """Why this user may not use this tool (empty when they may).

    Without ``instance`` an object-checked permission passes when the user holds it on at least
    one object (the catalog's question); with one, it must be held globally or on that instance.
    """
    if not access.authenticated:
        return (NOT_AUTHENTICATED,)
    if not access.active:
        return (INACTIVE,)
    if access.superuser or tool.public:
        return ()
    failing = []
    for perm in required_permissions(tool):
        if perm in access.perms:
            if tool.permission_mode == "any":
                return ()
            continue
        if tool.object_check is not None:
            if instance is None:
                held = perm in access.object_perms()
            else:
                held = access.user.has_perm(perm, instance)
            if held:
                if tool.permission_mode == "any":
                    return ()
                continue
        failing.append(f"{MISSING}{perm}")
    return tuple(failing)
