# A waiting action's sensitive entities, sealed (encrypted) until it is decided.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("assistant", "0004_llm_turn"),
    ]

    operations = [
        migrations.AddField(
            model_name="pendingaction",
            name="sealed",
            field=models.TextField(blank=True, editable=False),
        ),
    ]
