"""The app's errors: one base class, each with a stable machine-readable ``code``."""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.utils.functional import Promise
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


class AssistantError(Exception):
    """Base of every error the app raises; ``code`` never changes between releases."""

    code = "assistant_error"
    status = 400
    # What people read when nothing more precise is said, in the active language when read.
    default_message: str | Promise | None = None

    def __init__(self, message: str | Promise = "", *, code: str | None = None) -> None:
        if isinstance(message, str) and not message:
            message = self.default_message if self.default_message is not None else ""
            message = message or self.__class__.__doc__ or self.code
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])


class ToolDefinitionError(AssistantError, ImproperlyConfigured):
    """An ``@assistant_tool`` declaration is incomplete or unsafe."""

    code = "tool_definition"


class AlreadyRegistered(ToolDefinitionError):
    """Another tool already uses this operation name."""

    code = "already_registered"


class RegistryFrozen(ToolDefinitionError):
    """The registry is frozen once the app registry is ready; declare tools in ``assistant_tools``."""

    code = "registry_frozen"


class UnknownOperation(AssistantError, LookupError):
    """No tool is registered under this operation name."""

    default_message = _("No tool is registered under this operation name.")

    code = "unknown_operation"
    status = 404

    @classmethod
    def named(cls, operation: str) -> UnknownOperation:
        """The one answer for a name that is no tool of the caller's, missing or hidden alike."""
        return cls(gettext("Unknown operation %(operation)s") % {"operation": repr(operation)})


class InvalidEntities(AssistantError, ValueError):
    """The call's entities do not match the tool's parameters."""

    default_message = _("The call's entities do not match the tool's parameters.")

    code = "invalid_entities"
    status = 400

    def __init__(self, errors: Mapping[str, str], *, operation: str = "") -> None:
        self.errors = dict(errors)
        problems = "; ".join(f"{name}: {problem}" for name, problem in self.errors.items())
        if operation:
            text = gettext("Invalid entities for %(operation)s: %(problems)s")
        else:
            text = gettext("Invalid entities: %(problems)s")
        super().__init__(text % {"operation": operation, "problems": problems})


class PermissionDenied(AssistantError, DjangoPermissionDenied):
    """You do not have permission to use this tool."""

    default_message = _("You do not have permission to use this tool.")

    code = "permission_denied"
    status = 403


class ToolHidden(PermissionDenied):
    """A refusal that would tell its caller a tool exists: callers are told it is unknown."""

    code = "tool_hidden"  # only the audit's error column ever shows it


class AccountInactive(PermissionDenied):
    """Your account has been deactivated. Ask an operator to reactivate it."""

    default_message = _("Your account has been deactivated. Ask an operator to reactivate it.")

    code = "account_inactive"


class OutsideTokenScope(PermissionDenied):
    """The bearer token's ceiling (a risk level, a set of operations) does not cover this tool."""

    default_message = _(
        "The bearer token's ceiling (a risk level, a set of operations) does not cover this tool."
    )

    code = "token_scope"


class SessionRequired(PermissionDenied):
    """Creating a token needs a signed-in browser session: a token cannot mint tokens."""

    default_message = _(
        "Creating a token needs a signed-in browser session: a token cannot mint tokens."
    )

    code = "session_required"


class UnknownTokenOperations(AssistantError, ValueError):
    """A token's ceiling names operations that are not yours to use (or do not exist)."""

    code = "unknown_operation"
    status = 400

    def __init__(self, names: list[str]) -> None:
        listed = ", ".join(names)
        self.errors = {"operations": gettext("unknown operation(s): %(names)s") % {"names": listed}}
        super().__init__(gettext("No such operation(s) of yours: %(names)s.") % {"names": listed})


class InvalidToken(AssistantError):
    """No usable bearer token: missing, unknown, revoked or expired (the code says which)."""

    default_message = _(
        "No usable bearer token: missing, unknown, revoked or expired (the code says which)."
    )

    code = "invalid_token"
    status = 401


class CredentialLapsed(AssistantError):
    """What signed this run in no longer holds; nothing more runs under it: sign in again."""

    default_message = _(
        "What signed this run in no longer holds; nothing more runs under it: sign in again."
    )

    code = "credential_lapsed"  # each cause has its own: token_revoked, session_ended, ...
    status = 401


class NotFound(AssistantError, LookupError):
    """Nothing of yours is there."""

    default_message = _("Nothing of yours is there.")

    code = "not_found"
    status = 404


class ActionNotFound(NotFound):
    """No such pending action is waiting for you."""

    default_message = _("No such pending action is waiting for you.")


class SecretUnreadable(AssistantError):
    """The secret this action was asked with can no longer be read (the server's key changed); ask again."""

    default_message = _(
        "The secret this action was asked with can no longer be read (the server's key changed); ask again."
    )

    code = "secret_unreadable"
    status = 410


class AlreadyDecided(AssistantError):
    """This action has already been confirmed or cancelled."""

    default_message = _("This action has already been confirmed or cancelled.")

    code = "already_decided"
    status = 409


class ActionExpired(AssistantError):
    """This action expired before it was confirmed; ask again."""

    default_message = _("This action expired before it was confirmed; ask again.")

    code = "expired"
    status = 410


class ReasonRequired(AssistantError, ValueError):
    """This action's policy asks the approver for a reason: give one."""

    default_message = _("This action's policy asks the approver for a reason: give one.")

    code = "reason_required"
    status = 400


class PhraseMismatch(AssistantError, ValueError):
    """Type the phrase the action asks for, exactly, to confirm it."""

    default_message = _("Type the phrase the action asks for, exactly, to confirm it.")

    code = "phrase_mismatch"
    status = 400


class SecondPersonRequired(PermissionDenied):
    """This action needs a second person's approval: someone else must confirm it."""

    default_message = _(
        "This action needs a second person's approval: someone else must confirm it."
    )

    code = "second_person_required"
    status = 403


class ToolUnavailable(AssistantError):
    """This tool is not available right now."""

    default_message = _("This tool is not available right now.")

    code = "unavailable"
    status = 503


class DatabaseUnavailable(AssistantError):
    """The database cannot be reached right now; try again in a moment."""

    default_message = _("The database cannot be reached right now; try again in a moment.")

    code = "database_unavailable"
    status = 503
    retry_after = 5  # seconds: every surface's Retry-After


def outage(exc: BaseException) -> DatabaseUnavailable | None:
    """The ``DatabaseUnavailable`` an error stands for when the database is down or its
    connection lost (``OperationalError``, ``InterfaceError``, or one raised from them); else None."""
    if isinstance(exc, AssistantError) and not isinstance(exc, DatabaseUnavailable):
        return None  # an error of ours says more (reply_not_stored: the message is saved)
    seen: BaseException | None = exc
    for _step in range(10):  # (a chain of causes, bounded)
        if seen is None:
            return None
        if isinstance(seen, DatabaseUnavailable):
            return seen
        if isinstance(seen, OperationalError | InterfaceError):
            return DatabaseUnavailable()
        seen = seen.__cause__ or seen.__context__
    return None


class UnsafeDatabaseRole(AssistantError, ImproperlyConfigured):
    """The SQL inspector's database role could run programs or read files on the server."""

    default_message = _(
        "The SQL inspector's database role could run programs or read files on the server."
    )

    code = "unsafe_database_role"
    status = 503


class ConversationNotFound(NotFound):
    """No such conversation of yours."""

    default_message = _("No such conversation of yours.")


class InvalidTitle(AssistantError, ValueError):
    """The conversation title is empty, too long, or holds characters that cannot be stored."""

    default_message = _(
        "The conversation title is empty, too long, or holds characters that cannot be stored."
    )

    code = "invalid_title"
    status = 400


class InvalidMessage(AssistantError, ValueError):
    """The message is empty or too long."""

    default_message = _("The message is empty or too long.")

    code = "invalid_message"
    status = 400


class InvalidRunInput(AssistantError, ValueError):
    """The body is not a RunAgentInput this endpoint can run (``errors`` says where)."""

    code = "invalid_run_input"
    status = 400

    def __init__(self, message: str = "", *, code: str | None = None, errors: object = None):
        super().__init__(message, code=code)
        self.errors = errors


class InterruptPending(AssistantError):
    """The thread waits for answers to its interrupts: resume them before sending more."""

    default_message = _(
        "The thread waits for answers to its interrupts: resume them before sending more."
    )

    code = "interrupt_pending"
    status = 409


class ToolNotReady(AssistantError):
    """This tool is still starting; try again in a moment."""

    default_message = _("This tool is still starting; try again in a moment.")

    code = "not_ready"
    status = 503


class ToolFailed(AssistantError):
    """The tool failed unexpectedly; the error has been logged."""

    default_message = _("The tool failed unexpectedly; the error has been logged.")

    code = "tool_failed"


class ToolTimeout(AssistantError):
    """The tool took too long and was stopped."""

    default_message = _("The tool took too long and was stopped.")

    code = "timeout"
    status = 504


class BudgetExceeded(AssistantError):
    """The user has used up their language-model budget (tokens per day or turns per minute)."""

    default_message = _(
        "The user has used up their language-model budget (tokens per day or turns per minute)."
    )

    code = "budget_exceeded"
    status = 429


class InvalidTargetFilter(InvalidEntities):
    """A validation task's ``target_filter`` names a field, lookup or value it may not use."""

    code = "invalid_target_filter"

    def __init__(self, key: str, problem: str) -> None:
        """``key`` is the offending filter key, ``""`` when the filter as a whole is wrong."""
        super().__init__({"target_filter": f"{key!r}: {problem}" if key else problem})
        self.key = key


class MessageNotStored(AssistantError):
    """Sorry, your message could not be saved. Please try again."""

    default_message = _("Sorry, your message could not be saved. Please try again.")

    code = "message_not_stored"


class ReplyNotStored(AssistantError):
    """Sorry, the answer could not be saved; your message is saved. Please try again."""

    default_message = _(
        "Sorry, the answer could not be saved; your message is saved. Please try again."
    )

    code = "reply_not_stored"
    status = 503


class TurnInterrupted(AssistantError):
    """Sorry, this answer was interrupted: the server running it stopped. Your message is saved; please send it again."""

    default_message = _(
        "Sorry, this answer was interrupted: the server running it stopped. Your message is saved; please send it again."
    )

    code = "turn_interrupted"
    status = 503


class InvalidIdempotencyKey(AssistantError, ValueError):
    """An Idempotency-Key is 1 to 200 printable ASCII characters."""

    default_message = _("An Idempotency-Key is 1 to 200 printable ASCII characters.")

    code = "invalid_idempotency_key"
    status = 400


class TurnInProgress(AssistantError):
    """A request with this Idempotency-Key has no stored answer yet; retry later or use a new key."""

    default_message = _(
        "A request with this Idempotency-Key has no stored answer yet; retry later or use a new key."
    )

    code = "idempotency_key_in_use"
    status = 409


class Throttled(AssistantError):
    """Too many turns in a short time; try again shortly."""

    default_message = _("Too many turns in a short time; try again shortly.")

    code = "throttled"
    status = 429

    def __init__(self, retry_after: float | None) -> None:
        self.retry_after = None if retry_after is None else max(1, round(retry_after))
        if self.retry_after:
            text = gettext("Too many messages; try again in %(seconds)s s.")
        else:
            text = gettext("Too many messages; try again shortly.")
        super().__init__(text % {"seconds": self.retry_after})


class TooManyToolCalls(AssistantError):
    """The model asked for more tool calls than a reply or a turn may run; the rest were not run."""

    default_message = _(
        "The model asked for more tool calls than a reply or a turn may run; the rest were not run."
    )

    code = "too_many_tool_calls"


class ArgumentsTooLarge(InvalidEntities):
    """A tool call's arguments are larger than a call may bring; it was not run."""

    code = "arguments_too_large"

    def __init__(self, size: int, limit: int, *, operation: str = "") -> None:
        problem = gettext("%(size)s bytes, more than the %(limit)s bytes a call may bring") % {
            "size": f"{size:,}",
            "limit": f"{limit:,}",
        }
        self.errors = {"arguments": problem}
        if operation:
            text = gettext("Not run: the arguments of %(operation)s are %(problem)s.")
        else:
            text = gettext("Not run: the arguments are %(problem)s.")
        AssistantError.__init__(self, text % {"operation": operation, "problem": problem})


class CutShort(AssistantError):
    """The turn reached one of its bounds and was ended; its reply is stored as cut short."""

    default_message = _(
        "The turn reached one of its bounds and was ended; its reply is stored as cut short."
    )

    code = "cut_short"


class TurnDeadline(CutShort):
    """The turn took longer than it may and was stopped."""

    default_message = _("The turn took longer than it may and was stopped.")

    code = "turn_deadline"
    status = 504


class ReplyTooLong(CutShort):
    """The reply grew longer than a reply may be and was stopped."""

    default_message = _("The reply grew longer than a reply may be and was stopped.")

    code = "reply_too_long"


class LLMUnavailable(AssistantError):
    """The language model could not be reached or refused the request."""

    default_message = _("The language model could not be reached or refused the request.")

    code = "llm_unavailable"
    status = 503


class LLMError(LLMUnavailable):
    """The language model answered the request with an error status."""

    default_message = _("The language model answered the request with an error status.")

    code = "llm_error"


class Cancelled(AssistantError):
    """The run was stopped."""

    default_message = _("The run was stopped.")

    code = "cancelled"
    status = 409


class FrameError(AssistantError):
    """A websocket frame the server cannot act on."""

    default_message = _("A websocket frame the server cannot act on.")

    code = "bad_frame"


class FrameTooLarge(FrameError):
    """The frame is too large."""

    default_message = _("The frame is too large.")

    code = "frame_too_large"


class FrameNotJSON(FrameError):
    """The frame is not valid JSON."""

    default_message = _("The frame is not valid JSON.")

    code = "bad_json"


class UnknownFrameType(FrameError):
    """No frame has this type."""

    default_message = _("No frame has this type.")

    code = "unknown_type"


class MissingField(FrameError):
    """The frame lacks a field its type needs."""

    default_message = _("The frame lacks a field its type needs.")

    code = "missing_field"


class NothingToCancel(FrameError):
    """Nothing to cancel on this connection."""

    default_message = _("Nothing to cancel on this connection.")

    code = "nothing_to_cancel"


class JobDefinitionError(AssistantError, TypeError):
    """A job function must be importable by its dotted path (module-level, not a lambda)."""

    code = "job_definition"


class JobNotFound(NotFound):
    """No such job of yours."""

    default_message = _("No such job of yours.")


class WorkerLost(AssistantError, RuntimeError):
    """How a reaped job's task row names its end: the worker went silent."""

    code = "worker_lost"


class EvalError(AssistantError):
    """A golden case is malformed or names a user or role that does not exist."""

    code = "invalid_eval_case"
