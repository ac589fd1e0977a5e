"""``manage.py assistant_call``: the command-line door into a tool, through dispatch like any other.

manage.py assistant_call list_users search=op --user operator
manage.py assistant_call deactivate_user user_id=4 --user admin        # asks for confirmation
manage.py assistant_call --confirm <action id> --user admin            # … and runs it
manage.py assistant_call --confirm <id> --reason "release 4.2" --phrase "Sales" --user lead
manage.py assistant_call --message "back up staging" --user operator    # a whole chat turn

With telemetry on, its spans continue the trace in ``TRACEPARENT`` (and ``TRACESTATE``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import telemetry
from ...core.registry import registry
from ...dispatch.calls import Outcome
from ...dispatch.confirmation import cancel_action, confirm_action
from ...dispatch.door import dispatch
from ...exceptions import AssistantError
from ...models import AuditEntry
from ...turns.planners.keywords import PAIR_RE, _parse, _unquote
from ...turns.runs import run_turn


class Command(BaseCommand):
    help = "Call an assistant tool (or send a chat message) as a user, audited with source 'cli'."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("operation", nargs="?", help="the tool's operation")
        parser.add_argument("entities", nargs="*", metavar="key=value", help="the tool's entities")
        parser.add_argument("--user", required=True, help="act as this user (username)")
        parser.add_argument("--confirm", metavar="ACTION_ID", help="confirm a pending action")
        parser.add_argument("--reject", metavar="ACTION_ID", help="refuse a pending action")
        parser.add_argument("--reason", default="", help="why you confirm or refuse")
        parser.add_argument("--phrase", default="", help="the action's confirm phrase, typed")
        parser.add_argument("--message", help="send a chat message (one turn) instead")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        # OpenTelemetry's environment variables as context propagation carriers: the trace of
        # whoever runs the command (a CI job, a cron wrapper) in TRACEPARENT and TRACESTATE
        with telemetry.flushed(), telemetry.incoming(telemetry.carrier_of(os.environ)):
            self.call(options)

    def call(self, options: dict[str, Any]) -> None:
        User = get_user_model()
        user = User._default_manager.filter(**{User.USERNAME_FIELD: options["user"]}).first()
        if user is None:
            raise CommandError(f"No user named {options['user']!r}.")
        try:
            if options["message"]:
                turn = run_turn(user, options["message"], source="cli")
                self.report([*turn.outcomes], options["as_json"], reply=turn.assistant_message.text)
                return
            if options["confirm"]:
                outcome = confirm_action(
                    options["confirm"],
                    reason=options["reason"],
                    phrase=options["phrase"],
                    user=user,
                    source="cli",
                )
            elif options["reject"]:
                outcome = cancel_action(
                    options["reject"], reason=options["reason"], user=user, source="cli"
                )
            elif options["operation"]:
                outcome = dispatch(
                    options["operation"],
                    self.entities(options["operation"], options["entities"]),
                    user=user,
                    source="cli",
                )
            else:
                raise CommandError("Name an operation, or use --confirm, --reject or --message.")
        except AssistantError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.report([outcome], options["as_json"])
        if outcome.status >= 400:
            raise CommandError(f"{outcome.code}: {outcome.text}")

    def entities(self, operation: str, pairs: list[str]) -> dict[str, Any]:
        tool = registry.find(operation)
        values: dict[str, Any] = {}
        for pair in pairs:
            match = PAIR_RE.fullmatch(pair.strip())
            if match is None:
                raise CommandError(f"{pair!r} is not key=value")
            entity = tool.entity_map.get(match["key"]) if tool is not None else None
            raw = _unquote(match["value"])
            values[match["key"]] = _parse(entity, raw) if entity is not None else raw
        return values

    def report(self, outcomes: list[Outcome], as_json: bool, reply: str | None = None) -> None:
        if as_json:
            rows = [
                {
                    "operation": o.operation,
                    "decision": o.decision,
                    "code": o.code,
                    "text": o.text,
                    "task_id": o.result.task_id if o.result else None,
                    "pending_action": str(o.pending_action.pk) if o.pending_action else None,
                    "audit_id": o.audit_id,
                }
                for o in outcomes
            ]
            self.stdout.write(json.dumps({"outcomes": rows, "reply": reply}, indent=2))
            return
        for outcome in outcomes:
            self.stdout.write(f"[{outcome.operation}: {outcome.decision}] {outcome.text}")
            if (
                outcome.decision == AuditEntry.Decision.CONFIRMATION_REQUESTED
                and outcome.pending_action
            ):
                action = outcome.pending_action
                typed = f' --phrase "{action.confirm_phrase}"' if action.confirm_phrase else ""
                self.stdout.write(
                    f"  confirm with: --confirm {action.pk}{typed} (or refuse with --reject)"
                )
        if reply is not None and not outcomes:
            self.stdout.write(reply)
