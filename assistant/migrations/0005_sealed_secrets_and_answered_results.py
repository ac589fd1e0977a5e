# Sealed secrets of waiting actions; client-tool results claimed once (issue 33).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("assistant", "0004_llm_turn"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="answered_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pendingaction",
            name="sealed",
            field=models.TextField(blank=True, editable=False),
        ),
    ]
