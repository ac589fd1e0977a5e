"""The table-less model the app's own ``(resource, ACTION)`` permissions hang on."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Tool(models.Model):
    """No table: the anchor for the permissions the app creates for ``(resource, ACTION)`` pairs."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = _("assistant tool")
        verbose_name_plural = _("assistant tools")

    def __str__(self) -> str:
        return "assistant tool"
