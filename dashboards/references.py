"""Natural references: a dashboard by id, slug or part of its title, among those a user may view;
an environment by slug or name; and who may change which environment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from django.db.models import Q, QuerySet
from guardian.shortcuts import get_objects_for_user

from assistant import Length, ToolResult
from assistant.exceptions import InvalidEntities, PermissionDenied

from .models import Dashboard, Environment

MAX_CANDIDATES = 10
ID_RE = re.compile(r"#?([0-9]{1,18})", re.ASCII)

# How the tools declare their references: as long as the model's fields allow.
EnvironmentName = Annotated[str, Length(max=100)]
DashboardReference = Annotated[str, Length(max=200)]


def dashboard_id(text: str) -> int | None:
    """The id in ``12`` or ``#12`` (ASCII digits that fit a database key), else None."""
    match = ID_RE.fullmatch(text.strip())
    return int(match.group(1)) if match else None


def visible_dashboards(user: Any) -> QuerySet[Dashboard]:
    """The dashboards this user may view: globally, or one by one through django-guardian."""
    return get_objects_for_user(
        user, "dashboards.view_dashboard", klass=Dashboard, accept_global_perms=True
    ).select_related("environment", "owner")


def environment_choices() -> str:
    return ", ".join(Environment.objects.values_list("slug", flat=True)) or "none exist yet"


def resolve_environment(reference: str, entity: str = "environment") -> Environment:
    """The environment whose slug or name this is (case-insensitive), or ``InvalidEntities``."""
    text = reference.strip()
    found = Environment.objects.filter(Q(slug__iexact=text) | Q(name__iexact=text)).first()
    if found is None:
        raise InvalidEntities(
            {entity: f"no environment {text!r}; choose one of {environment_choices()}"}
        )
    return found


def may(user: Any, action: str, environment: Environment) -> bool:
    """Whether the user may ``view``/``change`` this environment (globally or on the object)."""
    perm = f"dashboards.{action}_environment"
    return bool(user.has_perm(perm) or user.has_perm(perm, environment))


def require(user: Any, action: str, environment: Environment) -> None:
    """Refuse (audited ``denied``) unless the user may ``view``/``change`` this environment."""
    if not may(user, action, environment):
        raise PermissionDenied(f"You may not {action} the {environment.name} environment.")


@dataclass(frozen=True, slots=True)
class Candidate:
    id: int
    title: str
    slug: str
    environment: str
    version: int

    @classmethod
    def of(cls, dashboard: Dashboard) -> Candidate:
        return cls(
            id=dashboard.pk,
            title=dashboard.title,
            slug=dashboard.slug,
            environment=dashboard.environment.slug,
            version=dashboard.version,
        )

    def line(self) -> str:
        return f"#{self.id} {self.title} ({self.environment}, v{self.version}, slug {self.slug})"


class AmbiguousReference(Exception):
    """A reference that matches several dashboards: the tool asks which one instead of guessing."""

    def __init__(self, entity: str, reference: str, candidates: list[Candidate], more: bool):
        super().__init__(f"{reference!r} matches several dashboards")
        self.entity = entity
        self.reference = reference
        self.candidates = candidates
        self.more = more

    def reply(self) -> ToolResult:
        """Nothing was done: the candidates, and a question."""
        lines = [f"“{self.reference}” matches several dashboards you may view — which one?"]
        lines += [f"  • {candidate.line()}" for candidate in self.candidates]
        if self.more:
            lines.append(f"  … and more; be more specific (the first {MAX_CANDIDATES} are shown).")
        lines.append(f"Ask again with its id, e.g. {self.entity}={self.candidates[0].id}.")
        return ToolResult(
            text="\n".join(lines),
            data={
                "ambiguous": self.entity,
                "reference": self.reference,
                "candidates": [vars_of(candidate) for candidate in self.candidates],
            },
        )


def vars_of(candidate: Candidate) -> dict[str, Any]:
    return {
        "id": candidate.id,
        "title": candidate.title,
        "slug": candidate.slug,
        "environment": candidate.environment,
        "version": candidate.version,
    }


def resolve_dashboard(
    user: Any,
    reference: str,
    *,
    environment: Environment | None = None,
    entity: str = "dashboard",
) -> Dashboard:
    """One dashboard the user may view: by id, then exact slug or title, then part of the title.

    Several matches raise ``AmbiguousReference``; none (or only ones the user may not view) raise
    ``InvalidEntities`` — a forbidden dashboard and a missing one look the same.
    """
    text = reference.strip()
    where = f" in {environment.slug}" if environment is not None else ""
    if not text:
        raise InvalidEntities({entity: "name a dashboard by its id, slug or title"})
    candidates = visible_dashboards(user)
    if environment is not None:
        candidates = candidates.filter(environment=environment)
    pk = dashboard_id(text)
    if pk is not None:
        found = candidates.filter(pk=pk).first()
        if found is not None:
            return found
    for lookup in (
        Q(slug__iexact=text) | Q(title__iexact=text),
        Q(title__icontains=text) | Q(slug__icontains=text),
    ):
        matches = list(
            candidates.filter(lookup).order_by("environment__position", "title", "pk")[
                : MAX_CANDIDATES + 1
            ]
        )
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise AmbiguousReference(
                entity,
                text,
                [Candidate.of(match) for match in matches[:MAX_CANDIDATES]],
                more=len(matches) > MAX_CANDIDATES,
            )
    raise InvalidEntities({entity: f"no dashboard{where} you may view matches {text!r}"})
