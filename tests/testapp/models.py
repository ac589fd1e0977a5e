from django.conf import settings
from django.db import models
from django.utils import timezone


class Order(models.Model):
    reference = models.CharField(max_length=40, unique=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    amount = models.DecimalField(max_digits=10, decimal_places=2, default=0)
    status = models.CharField(max_length=20, default="open")
    approvals = models.PositiveIntegerField(default=0)

    class Meta:
        permissions = [("approve_order", "Can approve order")]

    def __str__(self) -> str:
        return self.reference


class Environment(models.Model):
    """Where a dashboard lives: a relation a validation task's target filter must not follow."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=50, unique=True)
    database = models.CharField(max_length=100, default="default")

    def __str__(self) -> str:
        return self.name


class Dashboard(models.Model):
    """Text, JSON, boolean, number, date-time and relations: a target for the filter tests."""

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="dashboards"
    )
    title = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100)
    description = models.TextField(blank=True)
    # not "dashboards": the example project's suite installs its own Dashboard beside this one
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_dashboards",
    )
    published = models.BooleanField(default=False)
    charts = models.JSONField(default=list, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    def __str__(self) -> str:
        return self.title
