"""News of permission changes: every process's access snapshots and known-good credentials
made stale when permissions change, a session ends or a token is revoked, here and (through the
control group) in every other process."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from ..access.caches import USER_FLAGS, access_changed, credentials_changed
from ..models import AccessToken
from .control import CONTROL_GROUP, process_id
from .lanes import keep

logger = logging.getLogger("assistant.runner")


def broadcast_access_change(kind: str = "assistant.access") -> None:
    """Tell the other server processes that permissions changed (a sync caller's twin), or
    with ``kind="assistant.credentials"`` that a session ended or a token was revoked."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return  # no other process to tell
    message = {"type": kind, "origin": process_id()}
    try:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            async_to_sync(layer.group_send)(CONTROL_GROUP, message)
        else:
            keep(loop.create_task(layer.group_send(CONTROL_GROUP, message)))
    except Exception:
        # Other processes still reload within ASSISTANT["ACCESS_MAX_AGE"] seconds.
        logger.exception("Telling other processes that permissions changed failed")


def permissions_changed(*, broadcast: bool = True) -> None:
    """Make every access snapshot in this process stale, and (by default) in every other one."""
    access_changed()
    if broadcast:
        broadcast_access_change()


def _on_access_change(sender: Any, **kwargs: Any) -> None:
    action = kwargs.get("action")
    if action is not None and not action.startswith("post_"):
        return  # m2m_changed: only once the change is made
    update_fields = kwargs.get("update_fields")
    if update_fields is not None and not set(update_fields) & {*USER_FLAGS, "password"}:
        return  # e.g. a login stamping last_login (a password ends the user's other sessions)
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    if kwargs.get("created") and sender in (get_user_model(), Group, Permission):
        return  # a new user, group or permission: nobody holds anything through it yet
    transaction.on_commit(permissions_changed, using=kwargs.get("using"))


def watch_access_changes() -> None:
    """Connect the receivers that make access snapshots stale when permissions change."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

    user_model = get_user_model()
    for model in (
        user_model,
        Group,
        Permission,
        get_user_obj_perms_model(),
        get_group_obj_perms_model(),
    ):
        post_save.connect(_on_access_change, sender=model, dispatch_uid=f"assistant.{model}.save")
        post_delete.connect(
            _on_access_change, sender=model, dispatch_uid=f"assistant.{model}.delete"
        )
    for relation in (
        getattr(user_model, "groups", None),
        getattr(user_model, "user_permissions", None),
        Group.permissions,
    ):
        through = getattr(relation, "through", None)
        if through is not None:
            m2m_changed.connect(
                _on_access_change, sender=through, dispatch_uid=f"assistant.{through}.m2m"
            )
    watch_credential_changes()


def ended_credentials() -> None:
    """Make every credential found holding stale, in this process and every other one."""
    credentials_changed()
    broadcast_access_change("assistant.credentials")


def _on_credential_change(sender: Any, **kwargs: Any) -> None:
    if kwargs.get("created"):
        return  # a new session or token ends nothing
    transaction.on_commit(ended_credentials, using=kwargs.get("using"))


def watch_credential_changes() -> None:
    """Make every credential found holding (``Credential.known_to_hold``) stale, in every process,
    when a session ends (signing out deletes it) or a token is revoked or deleted."""
    from importlib import import_module

    from django.apps import apps
    from django.conf import settings
    from django.contrib.sessions.backends.db import SessionStore

    models: list[Any] = [AccessToken]
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if issubclass(store, SessionStore):  # (a session in the cache alone ends unseen)
        models.append(store.get_model_class())
    if apps.is_installed("rest_framework.authtoken"):
        models.append(apps.get_model("authtoken", "Token"))
    if apps.is_installed("oauth2_provider"):
        from oauth2_provider.models import get_access_token_model

        models.append(get_access_token_model())
    for model in models:
        post_delete.connect(
            _on_credential_change, sender=model, dispatch_uid=f"assistant.{model}.ends"
        )
    # a token's revocation is a save (a session's saves are every request's: not watched)
    post_save.connect(_on_credential_change, sender=AccessToken, dispatch_uid="assistant.revoked")
    if apps.is_installed("oauth2_provider"):
        model = get_access_token_model()
        post_save.connect(_on_credential_change, sender=model, dispatch_uid="assistant.expires")
