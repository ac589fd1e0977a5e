"""The app's own validation rules: ``llm_review`` and ``tool_access_matrix``."""

from __future__ import annotations

import json
from string import Formatter
from typing import Any

from django.db import models, transaction
from django.utils.translation import gettext, ngettext

from ..conf import assistant_settings
from ..core.llm_client import llm_configured, make_client
from ..core.registry import registry
from ..dispatch.catalog import visible_tools
from .registry import Outcome, Verdict, validation_rule
from .targets import filterable_fields

DEFAULT_PROMPT = (
    "You review records of a Django application. Judge the record below against this "
    "requirement: {requirement}\n\nRecord:\n{text}\n\n"
    'Answer with JSON only: {{"verdict": "PASS" | "FAIL" | "WARN", "reason": "<one sentence>"}}'
)


def llm_review_options(model: type[models.Model], options: dict[str, Any]) -> str:
    """``fields`` names only what a target filter may name; the prompt fills in two plain names."""
    fields = options.get("fields")
    if fields is not None:
        allowed = filterable_fields(model)
        if not isinstance(fields, list) or not all(isinstance(name, str) for name in fields):
            return "fields: expected a list of field names"
        refused = [name for name in fields if name not in allowed]
        if refused:
            return (
                f"fields: {refused[0]!r}: {model.__name__} may be read only by its own fields "
                f"{', '.join(sorted(allowed))}"
            )
    for name in ("prompt", "requirement"):
        if options.get(name) is not None and not isinstance(options[name], str):
            return f"{name}: expected a text"
    try:
        parsed = list(Formatter().parse(options.get("prompt") or ""))
    except ValueError as exc:
        return f"prompt: {exc}"
    for _, field_name, spec, _ in parsed:
        if field_name not in (None, "requirement", "text") or "{" in (spec or ""):
            return "prompt: only the plain placeholders {requirement} and {text} are filled in"
    return ""


@validation_rule(
    name="llm_review",
    description="A language model judges each target's text against a requirement",
    check_options=llm_review_options,
)
def llm_review(target: Any, options: dict[str, Any], run: Any) -> Verdict:
    """PASS/FAIL/WARN with a reason from the configured LLM; never a pass without one."""
    problem = llm_review_options(type(target), options)  # a task stored before these rules
    if problem:
        return Verdict(
            outcome=Outcome.WARN,
            message=gettext("the rule's options are refused: %(problem)s") % {"problem": problem},
        )
    if not llm_configured():
        return Verdict(outcome=Outcome.WARN, message=gettext("no LLM configured"))
    import openai

    config = assistant_settings.llm
    fields = options.get("fields")
    if fields:
        text = "\n".join(f"{name}: {getattr(target, name, '')}" for name in fields)
    else:
        text = str(target)
    prompt = (options.get("prompt") or DEFAULT_PROMPT).format(
        requirement=options.get("requirement", "it is complete, consistent and clearly written"),
        text=text,
    )
    client = make_client(config)
    try:
        answer = client.chat.completions.create(
            model=config["MODEL"],
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
        )
        content = answer.choices[0].message.content or ""
        parsed = json.loads(content[content.find("{") : content.rfind("}") + 1])
        verdict = str(parsed.get("verdict", "")).upper()
        reason = str(parsed.get("reason", ""))
    except (openai.APIError, ValueError, AttributeError, IndexError) as exc:
        return Verdict(
            outcome=Outcome.WARN,
            message=gettext("the LLM gave no verdict: %(error)s") % {"error": exc},
        )
    finally:
        client.close()
    outcome = {"PASS": Outcome.PASS, "FAIL": Outcome.FAIL, "WARN": Outcome.WARN}.get(verdict)
    if outcome is None:
        answered = gettext("the LLM answered %(verdict)s: %(reason)s")
        return Verdict(
            outcome=Outcome.WARN, message=answered % {"verdict": repr(verdict), "reason": reason}
        )
    return Verdict(outcome=outcome, message=reason, details={"model": config["MODEL"]})


@validation_rule(
    name="tool_access_matrix",
    description="Each role (group) sees exactly its expected tools; dangerous ones always ask first",
    needs_target=False,
)
def tool_access_matrix(target: Any, options: dict[str, Any], run: Any) -> list[Verdict]:
    """``options["roles"] = {"group name": ["operation", ...]}``: compare each role's catalog."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    verdicts = []
    for tool in registry:
        if tool.risk_level == "dangerous" and not tool.requires_confirmation:
            verdicts.append(
                Verdict(
                    outcome=Outcome.FAIL,
                    message=gettext("%(operation)s runs without confirmation")
                    % {"operation": tool.operation},
                )
            )
    for role, expected in (options.get("roles") or {}).items():
        group = Group.objects.filter(name=role).first()
        if group is None:
            missing_role = gettext("role %(role)s does not exist") % {"role": repr(role)}
            verdicts.append(Verdict(outcome=Outcome.FAIL, message=missing_role))
            continue
        with transaction.atomic():
            # A throwaway member of the role, rolled back with everything it touched.
            user = get_user_model()._default_manager.create(
                **{get_user_model().USERNAME_FIELD: f"__validation_{role}"[:150]}
            )
            user.groups.add(group)
            user = get_user_model()._default_manager.get(pk=user.pk)
            visible = {tool.operation for tool in visible_tools(user, site=registry)}
            transaction.set_rollback(True)
        missing, extra = set(expected) - visible, visible - set(expected)
        if missing or extra:
            verdicts.append(
                Verdict(
                    outcome=Outcome.FAIL,
                    message=gettext("role %(role)s: catalog differs from what is expected")
                    % {"role": repr(role)},
                    details={"missing": sorted(missing), "unexpected": sorted(extra)},
                )
            )
        else:
            verdicts.append(Verdict(outcome=Outcome.PASS, message=_sees(role, len(visible))))
    return verdicts


def _sees(role: str, count: int) -> str:
    """The passing finding of a role: how many tools its catalog shows."""
    sees = ngettext(
        "role %(role)s sees %(count)d tool", "role %(role)s sees %(count)d tools", count
    )
    return sees % {"role": repr(role), "count": count}
