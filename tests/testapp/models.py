from django.conf import settings
from django.db import models


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
