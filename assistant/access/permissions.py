"""Permission checks → Django permissions, and the one predicate used by catalog and dispatch."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.translation import gettext

from ..conf import assistant_settings
from ..core.compiled import rows_for
from ..core.registry import AssistantTool, PermissionCheck, ToolRegistry, registry
from ..exceptions import AccountInactive, PermissionDenied, ToolHidden
from ..models import Tool

# (resource, ACTION) on a model listed in ASSISTANT["RESOURCES"] → that model's permission verb.
MODEL_ACTIONS = {
    "READ": "view",
    "VIEW": "view",
    "LIST": "view",
    "CREATE": "add",
    "ADD": "add",
    "UPDATE": "change",
    "CHANGE": "change",
    "WRITE": "change",
    "EDIT": "change",
    "DELETE": "delete",
}
ACCESS_ATTRIBUTE = "_assistant_access"
RELOAD_ATTRIBUTE = "_assistant_reload_user"
STAMP_ATTRIBUTE = "_assistant_read"  # (generation, monotonic time) the user's access was read at
USER_FLAGS = ("is_active", "is_superuser", "is_staff")
NOT_AUTHENTICATED = "not authenticated"
INACTIVE = "inactive user"
MISSING = "missing permission "  # a denial's reason: this prefix, then the permission string

_required: weakref.WeakKeyDictionary[AssistantTool, tuple[str, ...]] = weakref.WeakKeyDictionary()


_settings_epoch = 0  # bumped when ASSISTANT changes: what was derived from it is stale


@receiver(setting_changed)
def _forget_on_change(*, setting: str, **kwargs: Any) -> None:
    global _settings_epoch
    if setting == "ASSISTANT":
        _required.clear()
        _settings_epoch += 1


def permission_for(check: PermissionCheck) -> str:
    """The Django permission string (``app_label.codename``) one check stands for."""
    if isinstance(check, str):
        return check
    resource, action = check
    resources = assistant_settings.RESOURCES
    model_label = resources.get(resource) if isinstance(resources, dict) else None
    if isinstance(model_label, str) and "." in model_label:
        app_label, model_name = model_label.split(".", 1)
        verb = MODEL_ACTIONS.get(action.upper(), action.lower())
        return f"{app_label}.{verb}_{model_name.lower()}"
    return f"assistant.{assistant_codename(resource, action)}"


def assistant_codename(resource: str, action: str) -> str:
    """The codename of the permission the app creates for an unmapped ``(resource, ACTION)``."""
    return f"{resource}_{action}".lower().replace(" ", "_")


def required_permissions(tool: AssistantTool) -> tuple[str, ...]:
    """The tool's checks as Django permission strings, resolved once per settings."""
    try:
        return _required[tool]
    except KeyError:
        perms = _required[tool] = tuple(permission_for(check) for check in tool.permission_checks)
        return perms


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


def access_for(user: Any) -> UserAccess:
    """The user's access snapshot, cached on the user object like Django's own permission cache.

    A user object marked stale (``refresh_access``) first reads its flags again, under a lock
    of its own: two turns of one socket never build a snapshot from flags the other is
    replacing.
    """
    if not getattr(user, RELOAD_ATTRIBUTE, False):
        return getattr(user, ACCESS_ATTRIBUTE, None) or _load_access(user)
    with _reload_lock(user):
        reload = getattr(user, RELOAD_ATTRIBUTE, False)
        if reload:  # (not done by the other turn meanwhile)
            # The mark goes once the new reading is in place: a turn checking meanwhile waits
            # for this lock rather than take the stale snapshot.
            if not (reload is SHARED and _adopt(user)):
                stamp = (access_generation(), time.monotonic())  # before reading: conservative
                _reload_flags(user)
                forget_access(user)
                setattr(user, STAMP_ATTRIBUTE, stamp)
                _share(user, stamp, _load_access(user))
            with contextlib.suppress(AttributeError):
                delattr(user, RELOAD_ATTRIBUTE)
        return getattr(user, ACCESS_ATTRIBUTE, None) or _load_access(user)


# A process shares what it read of a user between that user's objects (their sockets, a page
# reloaded): a reading as fresh as ``refresh_access`` would trust, of the same flags, read while
# permission news reached this process, serves another object's first check with no query.
SHARED = "shared"  # RELOAD_ATTRIBUTE's value when a shared reading will do
SHARED_MAX = 10_000  # users whose readings are kept; the oldest go first
_shared: dict[Any, tuple[tuple[int, float], tuple[Any, ...], UserAccess]] = {}
_news_since: float | None = None  # since when permission news reaches this process
_shared_lock = threading.Lock()


def hearing_news(listening: bool = True) -> None:
    """A control channel began to listen (or could not): readings from before are shared no
    more (nor any, while none listens)."""
    global _news_since
    with _shared_lock:
        _news_since = time.monotonic() if listening else None
        _shared.clear()


def _shared_key(user: Any) -> tuple[Any, str]:
    # (the username too: a key a deleted user's reading could pass to a new one is unlikely)
    return (user.pk, user.get_username())


def _flags(user: Any) -> tuple[Any, ...]:
    return tuple(getattr(user, flag, None) for flag in USER_FLAGS)


def _share(user: Any, stamp: tuple[int, float], access: UserAccess) -> None:
    if not access.authenticated:
        return
    with _shared_lock:  # (``hearing_news`` clears under it: what is kept was read while news came)
        if _news_since is None or stamp[1] < _news_since:
            return
        key = _shared_key(user)
        _shared.pop(key, None)
        _shared[key] = (stamp, _flags(user), access)
        while len(_shared) > SHARED_MAX:
            _shared.pop(next(iter(_shared)), None)


def _adopt(user: Any) -> bool:
    """Take another object's fresh reading of this user, if there is one and it still holds."""
    entry = _shared.get(_shared_key(user))
    if entry is None:
        return False
    stamp, flags, origin = entry
    generation, read_at = stamp
    fresh = generation == access_generation() and (
        time.monotonic() - read_at < assistant_settings.ACCESS_MAX_AGE
    )
    # flags this object read since (say, a deactivation that sent no signal) win: read again
    if not fresh or flags != _flags(user):
        return False
    forget_access(user)
    setattr(user, STAMP_ATTRIBUTE, stamp)
    setattr(user, ACCESS_ATTRIBUTE, replace(origin, user=user, _origin=origin))
    return True


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


def cached_access(user: Any) -> UserAccess | None:
    """The user's snapshot if one is loaded and still trusted (no query), else None."""
    if getattr(user, RELOAD_ATTRIBUTE, False):
        return None
    access: UserAccess | None = getattr(user, ACCESS_ATTRIBUTE, None)
    return access


async def aaccess_for(user: Any) -> UserAccess:
    access = cached_access(user)
    if access is not None:
        return access
    return await sync_to_async(access_for)(user)


def forget_access(user: Any) -> None:
    """Drop the cached snapshot (and Django's) so the next check reads the database again."""
    for attribute in (ACCESS_ATTRIBUTE, "_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        with contextlib.suppress(AttributeError):
            delattr(user, attribute)


def refresh_access(user: Any) -> None:
    """For a user object that outlives a request (a websocket's): reload what may have changed.

    What was read is kept while it is fresh: no permission, group or user changed since (in
    this process, or in any process reached through the channel layer) and it was read less
    than ``ASSISTANT["ACCESS_MAX_AGE"]`` seconds ago. Otherwise the next check reads the user's
    flags and permissions again. A user object with no such record (a request's) is left as
    it is. Only marks: the reading happens in ``access_for``, on the thread that checks.
    """
    stamp = getattr(user, STAMP_ATTRIBUTE, None)
    if stamp is None:
        return
    generation, read_at = stamp
    max_age = assistant_settings.ACCESS_MAX_AGE
    if generation == access_generation() and time.monotonic() - read_at < max_age:
        return
    if getattr(user, RELOAD_ATTRIBUTE, False) is not True:  # (a reading afresh stays one)
        setattr(user, RELOAD_ATTRIBUTE, SHARED)


def reread_access(user: Any, *, shared: bool = False) -> None:
    """Make the next check read this user's flags and permissions again, fresh or not.

    ``shared``: a fresh reading another object of the user's made in this process will do
    (a new socket's user, read before it listened for permission news).
    """
    if user is not None and getattr(user, "pk", None) is not None:
        setattr(user, RELOAD_ATTRIBUTE, SHARED if shared else True)


_locks_guard = threading.Lock()
_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()


def _reload_lock(user: Any) -> threading.Lock:
    target = getattr(user, "_wrapped", user)  # one lock per user object, lazy or not
    with _locks_guard:
        lock = _locks.get(target)
        if lock is None:
            lock = _locks[target] = threading.Lock()
        return lock


def _reload_flags(user: Any) -> None:
    """Read the user's flags again (a deleted user counts as inactive, and not staff)."""
    model = user._meta.model
    concrete = {f.attname for f in model._meta.concrete_fields}
    flags = [flag for flag in USER_FLAGS if flag in concrete]
    if not flags:
        return
    rows = rows_for(
        "assistant.flags",
        user,
        lambda row: model._default_manager.filter(pk=row.pk).values_list(*flags)[:1],
    )
    for flag, value in zip(flags, rows[0] if rows else [False] * len(flags), strict=True):
        setattr(user, flag, value)


_generation = 0
_credential_generation = 0


def access_generation() -> int:
    """Bumped whenever permissions, groups or users change: every snapshot older is stale."""
    return _generation


def credential_generation() -> int:
    """Bumped whenever users, sessions or tokens change: every credential found holding before
    is read again (``Credential.known_to_hold``)."""
    return _credential_generation


def credentials_changed() -> None:
    """Make every credential found holding in this process stale (a session ended, a token
    revoked), not the access snapshots."""
    global _credential_generation
    _credential_generation += 1


def access_changed() -> None:
    """Make every access snapshot in this process stale (the next reading reloads), and every
    credential found holding (a user's flags or password changed)."""
    global _generation
    _generation += 1
    credentials_changed()
    with _shared_lock:
        _shared.clear()


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


def missing_permissions(reasons: Iterable[str]) -> tuple[str, ...]:
    """The permission strings a tool's denial reasons name (``denials``' own wording)."""
    return tuple(reason.removeprefix(MISSING) for reason in reasons if reason.startswith(MISSING))


def tool_permission_name(resource: str, action: str) -> str:
    """The name of the permission the app creates for an unmapped ``(resource, ACTION)``."""
    return f"Can {action.lower()} {resource} (assistant)"[:255]


def permission_name(perm: str) -> str:
    """A permission in human words (``Permission.name``: "Can change user"), read from the models.

    Derived from the app registry as ``migrate`` derives the stored names (the default and
    ``Meta.permissions`` ones, and the app's own for tool pairs), so it needs no query; a
    permission nothing defines is shown as it is spelt.
    """
    app_label, _, codename = perm.partition(".")
    try:
        config = apps.get_app_config(app_label)
    except LookupError:
        return perm
    for model in config.get_models():
        opts = model._meta
        for action in opts.default_permissions:
            if codename == f"{action}_{opts.model_name}":
                return f"Can {action} {opts.verbose_name_raw}"
        for custom, name in opts.permissions:
            if custom == codename:
                return str(name)
    if app_label == "assistant":
        for tool in registry:
            for check in tool.permission_checks:
                if isinstance(check, tuple) and assistant_codename(*check) == codename:
                    return tool_permission_name(*check)
    return perm


def known_domains(access: UserAccess, site: ToolRegistry = registry) -> set[str]:
    """The domains this user has a part in: those of the tools they may use (public ones aside)."""
    return {tool.domain for tool in site if not tool.public and not denials(access, tool)}


def discloses(access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry) -> bool:
    """Whether a refusal may name ``tool`` and what it needs: its existence is no secret to them.

    The rule: an active user who may use a tool of the same domain (a public tool does not
    count) knows the domain is there; a tool of a domain they have no part in stays unnamed, as
    if it did not exist.
    """
    return access.active and tool.domain in known_domains(access, site)


def refusal(
    access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry
) -> PermissionDenied:
    """What a user refused ``tool`` is told: a deactivated account says so; a tool whose existence
    is no secret to them (``discloses``) names what it needs in human words; any other is
    ``ToolHidden``, which dispatch answers as a missing operation."""
    reasons = denials(access, tool)
    if INACTIVE in reasons:
        return AccountInactive()
    missing = missing_permissions(reasons)
    if not missing or not discloses(access, tool, site):
        return ToolHidden(
            gettext("You do not have permission to use %(operation)s.")
            % {"operation": tool.operation}
        )
    names = [f"“{permission_name(perm)}”" for perm in missing]
    either = gettext(" or ") if tool.permission_mode == "any" else gettext(" and ")
    return PermissionDenied(
        gettext("You can't use %(operation)s: it needs %(permissions)s. Ask an operator for it.")
        % {"operation": tool.operation, "permissions": either.join(names)}
    )


def hidden_from(access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry) -> bool:
    """Whether ``tool`` is one this user is told does not exist (its refusal is ``ToolHidden``)."""
    return bool(denials(access, tool)) and isinstance(refusal(access, tool, site), ToolHidden)


def session_user_is_inactive(session: Any) -> bool:
    """Whether a session that signs no one in any more belongs to a user since deactivated.

    Django's backends give a deactivated user's session an anonymous user; this tells the two
    apart (the session's own hash must still match, as Django checks on every request).
    """
    from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.utils.crypto import constant_time_compare

    pk = session.get(SESSION_KEY) if session is not None else None
    if pk is None:
        return False
    model = get_user_model()
    try:
        user = model._default_manager.filter(pk=model._meta.pk.to_python(pk)).first()
    except (DjangoValidationError, ValueError, TypeError):
        return False
    if user is None or getattr(user, "is_active", True):
        return False
    stored = session.get(HASH_SESSION_KEY)
    return bool(stored) and constant_time_compare(stored, user.get_session_auth_hash())


def can_use_tool(user: Any, tool: AssistantTool, instance: Any = None) -> bool:
    """Whether ``user`` may see and call ``tool`` (on ``instance``, for object-checked tools)."""
    return not denials(access_for(user), tool, instance)


def explain(
    user: Any, tools: Iterable[AssistantTool]
) -> list[tuple[AssistantTool, tuple[str, ...]]]:
    """Each tool with the reasons it is hidden from ``user`` (no reasons: visible)."""
    access = access_for(user)
    return [(tool, denials(access, tool)) for tool in tools]


def permission_map(site: ToolRegistry = registry) -> dict[str, tuple[str, ...]]:
    """Operation → the Django permissions it needs (the ADR's ``INTENT_PERMISSION_CHECKS``)."""
    return {tool.operation: required_permissions(tool) for tool in site}


def create_tool_permissions(using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``: create ``assistant.<resource>_<action>`` for every unmapped pair."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    wanted: dict[str, str] = {}
    for tool in registry:
        for check in tool.permission_checks:
            if isinstance(check, tuple):
                perm = permission_for(check)
                app_label, codename = perm.split(".", 1)
                if app_label == "assistant":
                    wanted[codename] = tool_permission_name(*check)
    if not wanted:
        return
    content_type = ContentType.objects.db_manager(using).get_for_model(
        Tool, for_concrete_model=False
    )
    existing = set(
        Permission.objects.using(using)
        .filter(content_type=content_type, codename__in=wanted)
        .values_list("codename", flat=True)
    )
    Permission.objects.using(using).bulk_create(
        [
            Permission(content_type=content_type, codename=codename, name=name)
            for codename, name in wanted.items()
            if codename not in existing
        ]
    )
