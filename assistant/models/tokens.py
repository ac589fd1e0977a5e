"""Personal access tokens: users' hashed bearer credentials for machine clients."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..core.declaration import RiskLevel


class AccessTokenQuerySet(models.QuerySet["AccessToken"]):
    def owned_by(self, user: Any) -> AccessTokenQuerySet:
        return self.filter(user=user)

    def usable(self) -> AccessTokenQuerySet:
        """Neither revoked nor expired."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


class AccessToken(models.Model):
    """A personal access token: a user's bearer credential for machine clients, stored hashed.

    The secret is shown once, at creation; the row keeps its SHA-256 digest (the secret is 32
    random bytes, so a fast digest is as safe as a slow one) and a prefix to tell tokens apart.
    A ceiling narrows what the token may do below its user's permissions: a highest risk level
    and/or a set of operations.
    """

    PREFIX = "dop_"

    id = models.BigAutoField(primary_key=True, verbose_name=_("ID"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="assistant_access_tokens",
        verbose_name=_("user"),
    )
    name = models.CharField(max_length=100, verbose_name=_("name"))
    key_prefix = models.CharField(max_length=16, editable=False, verbose_name=_("key prefix"))
    digest = models.CharField(max_length=64, unique=True, editable=False, verbose_name=_("digest"))
    max_risk = models.CharField(
        max_length=16,
        choices=[(level.value, level.value) for level in RiskLevel],
        blank=True,
        verbose_name=_("maximum risk"),
    )
    operations = models.JSONField(
        default=list, blank=True, verbose_name=_("operations")
    )  # empty: every operation
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("expires at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))

    objects: ClassVar[AccessTokenQuerySet] = AccessTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name_plural = _("personal access tokens")
        ordering = ["-created_at"]
        verbose_name = _("personal access token")

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @staticmethod
    def digest_of(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    def revoke(self) -> bool:
        """Revoke it now (once: a second revoke changes nothing and answers False)."""
        now = timezone.now()
        changed = AccessToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if changed:
            self.revoked_at = now
            # as a save of that field would: runs holding this token learn it (``turns.lanes``)
            models.signals.post_save.send(
                sender=AccessToken,
                instance=self,
                created=False,
                update_fields=frozenset({"revoked_at"}),
                raw=False,
                using=self._state.db or "default",
            )
        return bool(changed)
