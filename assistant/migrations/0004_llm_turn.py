# The LLM turn under load (budgets reserved per model call, turns a dead process left, bounds).

import django.core.serializers.json
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('assistant', '0003_validation_task_owner_cascade'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='BudgetUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('spent_tokens', models.PositiveBigIntegerField(default=0)),
                ('reserved_tokens', models.PositiveBigIntegerField(default=0)),
                ('calls', models.PositiveIntegerField(default=0)),
                ('refusals', models.PositiveIntegerField(default=0)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='assistant_budget_usage', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'budget usage',
                'verbose_name_plural': 'budget usage',
                'ordering': ['-day', 'user_id'],
            },
        ),
        migrations.CreateModel(
            name='BudgetReservation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('tokens', models.PositiveIntegerField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('expires_at', models.DateTimeField()),
                ('usage', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='reservations', to='assistant.budgetusage')),
            ],
            options={
                'ordering': ['created_at'],
            },
        ),
        migrations.AddConstraint(
            model_name='budgetusage',
            constraint=models.UniqueConstraint(fields=('user', 'day'), name='assistant_budget_user_day'),
        ),
        migrations.CreateModel(
            name='ServerProcess',
            fields=[
                ('name', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('host', models.CharField(blank=True, max_length=255)),
                ('pid', models.PositiveIntegerField(default=0)),
                ('started_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('beat_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('oldest_turn_at', models.DateTimeField(blank=True, null=True)),
                ('runs', models.JSONField(blank=True, default=list, encoder=django.core.serializers.json.DjangoJSONEncoder)),
            ],
            options={
                'ordering': ['-beat_at'],
            },
        ),
        migrations.AddField(
            model_name='message',
            name='process',
            field=models.CharField(blank=True, default='', editable=False, max_length=64),
        ),
        migrations.AlterField(
            model_name='message',
            name='status',
            field=models.CharField(choices=[('in_progress', 'In Progress'), ('complete', 'Complete'), ('cancelled', 'Cancelled'), ('failed', 'Failed'), ('interrupted', 'Interrupted')], default='complete', max_length=16),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('process', ''), _negated=True), fields=['process', 'created_at'], name='assistant_msg_process_time'),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='decision',
            field=models.CharField(choices=[('executed', 'Executed'), ('failed', 'Failed'), ('denied', 'Denied'), ('invalid', 'Invalid'), ('unknown', 'Unknown'), ('confirmation_requested', 'Confirmation Requested'), ('clarify', 'Clarify'), ('confirmed', 'Confirmed'), ('cancelled', 'Cancelled'), ('expired', 'Expired'), ('timeout', 'Timeout'), ('unavailable', 'Unavailable'), ('not_ready', 'Not Ready'), ('over_budget', 'Over Budget'), ('client_tool', 'Client Tool'), ('over_limit', 'Over Limit')], max_length=32),
        ),
    ]
