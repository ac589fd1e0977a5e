"""Request validation and response shapes of the REST API."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.utils import html

from ...core.declaration import RiskLevel
from ...dispatch.calls import Outcome
from ...models import (
    AccessToken,
    AuditEntry,
    Conversation,
    Job,
    Message,
    PendingAction,
    ValidationFinding,
    ValidationRun,
    ValidationTask,
)


class FormInput(serializers.Serializer[Any]):
    """An input a browser form may send: a field given twice is refused, not the last one kept."""

    def to_internal_value(self, data: Any) -> Any:
        if html.is_html_input(data):
            repeated = {
                name: [gettext("Given more than once: send it once.")]
                for name, field in self.fields.items()
                if not isinstance(field, serializers.ListField) and len(data.getlist(name)) > 1
            }
            if repeated:
                raise serializers.ValidationError(repeated)
        return super().to_internal_value(data)


class MessageInput(FormInput):
    message = serializers.CharField(trim_whitespace=True)
    conversation = serializers.UUIDField(required=False, allow_null=True)


class ConversationInput(FormInput):
    title = serializers.CharField(help_text="at most 200 characters (else invalid_title)")


class DispatchInput(serializers.Serializer[Any]):
    operation = serializers.CharField(max_length=64)
    entities = serializers.DictField(required=False, default=dict)
    conversation = serializers.UUIDField(required=False, allow_null=True)


class CancelInput(FormInput):
    reason = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=2000,
        help_text="why you decide so (confirming under confirm_with_reason needs one)",
    )


class ConfirmInput(CancelInput):
    phrase = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=200,
        help_text="the action's confirm phrase, typed (required when it has one)",
    )


class ToolSerializer(serializers.Serializer[Any]):
    operation = serializers.CharField()
    domain = serializers.CharField()
    description = serializers.CharField()
    risk_level = serializers.CharField()
    requires_confirmation = serializers.BooleanField()
    parameters = serializers.DictField()


class OpenAIFunctionSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()


class OpenAIToolSerializer(serializers.Serializer[Any]):
    """One tool as OpenAI's function calling takes it (``?style=openai``)."""

    type = serializers.ChoiceField(choices=["function"])
    function = OpenAIFunctionSerializer()


class AnthropicToolSerializer(serializers.Serializer[Any]):
    """One tool as Anthropic's tool use takes it (``?style=anthropic``)."""

    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.DictField()


class ToolCatalogSerializer(serializers.Serializer[Any]):
    tools = serializers.ListField(
        child=PolymorphicProxySerializer(
            component_name="CatalogTool",
            serializers=[ToolSerializer, OpenAIToolSerializer, AnthropicToolSerializer],
            resource_type_field_name=None,
        ),
        help_text="inventory rows, or the LLM tool format ?style= asks for",
    )


class PendingActionSerializer(serializers.ModelSerializer[PendingAction]):
    """A pending action as every surface shows it (``PendingAction.shown``), with its state."""

    entities = serializers.SerializerMethodField(help_text="sensitive values redacted")
    preview = serializers.JSONField(
        read_only=True, allow_null=True, help_text='{"kind": "changes"|"rows"|"list"|"text", ...}'
    )
    risk = serializers.CharField(read_only=True, help_text="safe, guarded or dangerous")
    confirm = serializers.ChoiceField(
        choices=["type", "hold", "click"],
        source="confirm_mode",
        read_only=True,
        help_text="type the confirm phrase, hold the button, or click",
    )
    confirm_phrase = serializers.CharField(read_only=True)
    requested_by = serializers.CharField(read_only=True, help_text="the requester's username")

    class Meta:
        model = PendingAction
        fields = [
            "id",
            "operation",
            "entities",
            "summary",
            "preview",
            "risk",
            "policy",
            "confirm",
            "confirm_phrase",
            "requested_by",
            "status",
            "conversation",
            "created_at",
            "expires_at",
            "decided_at",
        ]

    def get_entities(self, action: PendingAction) -> dict[str, Any]:
        return action.shown_entities()


class MessageSerializer(serializers.ModelSerializer[Message]):
    class Meta:
        model = Message
        fields = [
            "id",
            "role",
            "text",
            "status",
            "tool_calls",
            "actions",
            "created_at",
            "model",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
        ]


class ConversationSerializer(serializers.ModelSerializer[Conversation]):
    message_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "created_at", "updated_at", "message_count"]


class StaffConversationSerializer(ConversationSerializer):
    username = serializers.CharField(source="user.get_username", read_only=True)

    class Meta(ConversationSerializer.Meta):
        fields = [*ConversationSerializer.Meta.fields, "user", "username"]


class DeletedSerializer(serializers.Serializer[Any]):
    deleted = serializers.IntegerField(help_text="how many conversations were deleted")


class StaffConversationHistorySerializer(serializers.Serializer[Any]):
    conversation = StaffConversationSerializer()
    messages = MessageSerializer(many=True)


class ConversationDetailSerializer(ConversationSerializer):
    messages = MessageSerializer(many=True, read_only=True)

    class Meta(ConversationSerializer.Meta):
        fields = [*ConversationSerializer.Meta.fields, "messages"]


class AuditEntrySerializer(serializers.ModelSerializer[AuditEntry]):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "user",
            "username",
            "operation",
            "domain",
            "risk_level",
            "decision",
            "entities",
            "duration_ms",
            "error",
            "source",
            "client",
            "arrival",
            "request_ip",
            "conversation",
            "pending_action",
        ]


class OutcomeSerializer(serializers.Serializer[Outcome]):
    """One dispatch as the API reports it."""

    operation = serializers.CharField()
    decision = serializers.ChoiceField(choices=AuditEntry.Decision.choices)
    code = serializers.CharField(allow_null=True)
    text = serializers.CharField()
    entities = serializers.DictField()
    task_id = serializers.CharField(allow_null=True, source="result.task_id", default=None)
    actions = serializers.ListField(source="result.actions", default=list)
    data = serializers.JSONField(source="result.data", default=None)  # type: ignore[assignment]
    errors = serializers.DictField(source="error.errors", default=None, allow_null=True)  # type: ignore[assignment]
    pending_action = PendingActionSerializer(allow_null=True)
    audit_id = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.FloatField()


class TurnSerializer(serializers.Serializer[Any]):
    conversation = serializers.UUIDField(source="conversation.pk")
    user_message = MessageSerializer()
    assistant_message = MessageSerializer()
    outcomes = OutcomeSerializer(many=True)
    actions = serializers.ListField(source="assistant_message.actions")
    pending_actions = PendingActionSerializer(many=True)


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error body: a stable ``code``, a sentence, and per-field ``errors`` when known."""

    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.JSONField(required=False, allow_null=True)  # type: ignore[assignment]


class OutcomeErrorSerializer(OutcomeSerializer):
    """A refused or failed tool call: the outcome, with the error's ``code`` and ``detail``."""

    detail = serializers.CharField()


class JobSerializer(serializers.ModelSerializer[Job]):
    username = serializers.SerializerMethodField()
    failures = serializers.IntegerField(
        read_only=True, help_text="failures a job that ran to its end found (0: none)"
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "operation",
            "status",
            "progress",
            "progress_message",
            "result",
            "result_data",
            "failures",
            "error",
            "cancel_requested",
            "conversation",
            "username",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
        ]

    def get_username(self, job: Job) -> str:
        return job.user.get_username() if job.user is not None else ""


class ValidationTaskInput(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    target = serializers.CharField(help_text="'app_label.Model' or 'app_label.Model:<pk>'")
    rules = serializers.ListField(child=serializers.JSONField(), required=False, allow_null=True)
    target_filter = serializers.DictField(required=False)
    schedule = serializers.JSONField(
        required=False, allow_null=True, help_text="seconds between runs, or a cron expression"
    )
    enabled = serializers.BooleanField(required=False, default=True)


class ValidationTaskSerializer(serializers.ModelSerializer[ValidationTask]):
    target = serializers.CharField(source="target_label", read_only=True)
    owner = serializers.SerializerMethodField()

    class Meta:
        model = ValidationTask
        fields = [
            "id",
            "name",
            "target",
            "target_filter",
            "rules",
            "schedule",
            "interval_seconds",
            "cron",
            "enabled",
            "next_run_at",
            "last_run_at",
            "owner",
            "created_at",
        ]

    def get_owner(self, task: ValidationTask) -> str:
        return task.owner.get_username() if task.owner is not None else ""


class ValidationFindingSerializer(serializers.ModelSerializer[ValidationFinding]):
    class Meta:
        model = ValidationFinding
        fields = ["rule", "target_id", "target_repr", "outcome", "message", "details"]


class ValidationRunSerializer(serializers.ModelSerializer[ValidationRun]):
    findings = ValidationFindingSerializer(many=True, read_only=True)

    class Meta:
        model = ValidationRun
        fields = [
            "id",
            "task",
            "status",
            "passed",
            "failed",
            "warned",
            "triggered_by",
            "job",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "findings",
        ]


RISK_CHOICES = [level.value for level in RiskLevel]
MAX_TOKEN_DAYS = 366


class AccessTokenInput(FormInput):
    name = serializers.CharField(max_length=100, help_text="what the token is for")
    expires_in_days = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_TOKEN_DAYS,
        help_text="days until it stops working (or expires_at; neither: it never expires)",
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    max_risk = serializers.ChoiceField(
        choices=RISK_CHOICES,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="the riskiest tools it may call (none: every risk level)",
    )
    operations = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=500,
        help_text="the only operations it may call (empty: every one you may use)",
    )

    def validate_expires_at(self, value: datetime | None) -> datetime | None:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("must be in the future")
        if value is not None and value > timezone.now() + timedelta(days=MAX_TOKEN_DAYS):
            raise serializers.ValidationError(f"at most {MAX_TOKEN_DAYS} days from now")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        days = attrs.pop("expires_in_days", None)
        if days is not None and attrs.get("expires_at") is not None:
            raise serializers.ValidationError(
                {"expires_at": "give expires_in_days or expires_at, not both"}
            )
        if days is not None:
            attrs["expires_at"] = timezone.now() + timedelta(days=days)
        attrs["max_risk"] = attrs.get("max_risk") or ""
        return attrs


class AccessTokenSerializer(serializers.ModelSerializer[AccessToken]):
    max_risk = serializers.ChoiceField(choices=RISK_CHOICES, allow_null=True)
    operations = serializers.ListField(child=serializers.CharField())
    usable = serializers.BooleanField(source="is_usable", help_text="neither revoked nor expired")

    class Meta:
        model = AccessToken
        fields = [
            "id",
            "name",
            "key_prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "max_risk",
            "operations",
            "usable",
        ]
        read_only_fields = fields

    def to_representation(self, instance: AccessToken) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        data["max_risk"] = data["max_risk"] or None
        return data


class AccessTokenCreatedSerializer(AccessTokenSerializer):
    token = serializers.CharField(
        help_text="the secret, for `Authorization: Bearer`: shown this once, never again"
    )

    class Meta(AccessTokenSerializer.Meta):
        fields = [*AccessTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
