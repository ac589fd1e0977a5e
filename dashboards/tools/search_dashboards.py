"""``search_dashboards``: the dashboards this user may view, by id, slug or title, per environment."""

from __future__ import annotations

from typing import Annotated

from django.db.models import Q

from assistant import Length, Range, ToolCall, ToolResult, assistant_tool

from ..references import dashboard_id, resolve_environment, visible_dashboards


@assistant_tool(
    operation="search_dashboards",
    domain="dashboards",
    description=(
        "Search and list the dashboards you may view by title, slug or id, optionally in one "
        "environment, a page at a time"
    ),
    risk_level="safe",
    permission_checks=[("dashboards", "SEARCH")],
    keywords=[
        "search dashboards",
        "search dashboard",
        "find dashboards",
        "find dashboard",
        "list dashboards",
        "show dashboards",
    ],
)
def search_dashboards(
    call: ToolCall,
    search: Annotated[
        str | None, "part of a title or slug, or a dashboard id", Length(max=200)
    ] = None,
    environment: Annotated[
        str | None, "an environment's slug or name (dev, staging, prod)", Length(max=100)
    ] = None,
    page: Annotated[int, "page number, from 1", Range(1, 100_000)] = 1,
    page_size: Annotated[int, "dashboards per page (1-100)", Range(1, 100)] = 20,
) -> ToolResult:
    dashboards = visible_dashboards(call.user)
    where = ""
    if environment:
        env = resolve_environment(environment)
        dashboards = dashboards.filter(environment=env)
        where = f" in {env.name}"
    term = (search or "").strip()
    if term:
        matches = Q(title__icontains=term) | Q(slug__icontains=term)
        pk = dashboard_id(term)
        if pk is not None:
            matches |= Q(pk=pk)
        dashboards = dashboards.filter(matches)
    total = dashboards.count()
    pages = max(1, -(-total // page_size))
    start = (page - 1) * page_size
    rows = [
        {
            "id": dashboard.pk,
            "title": dashboard.title,
            "slug": dashboard.slug,
            "environment": dashboard.environment.slug,
            "version": dashboard.version,
            "published": dashboard.published,
            "owner": dashboard.owner.get_username() if dashboard.owner else None,
            "charts": len(dashboard.charts) if isinstance(dashboard.charts, list) else 0,
            "documented": bool(dashboard.documentation),
        }
        for dashboard in dashboards.order_by("environment__position", "title", "pk")[
            start : start + page_size
        ]
    ]
    matching = f" matching “{term}”" if term else ""
    data = {"count": total, "page": page, "pages": pages, "page_size": page_size, "results": rows}
    if not rows:
        text = (
            f"No dashboards you may view{where}{matching}."
            if page == 1
            else f"Page {page} is past the last page ({pages})."
        )
        return ToolResult(text=text, data=data)
    lines = [
        f"#{row['id']} {row['title']} — {row['environment']}, v{row['version']}"
        + ("" if row["published"] else ", draft")
        for row in rows
    ]
    paging = f" (page {page} of {pages})" if pages > 1 else ""
    return ToolResult(
        text=f"{total} dashboards{where}{matching}{paging}:\n" + "\n".join(lines), data=data
    )
