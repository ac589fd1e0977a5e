"""Markdown documentation for a dashboard: written by the configured LLM, or a labelled template."""

from __future__ import annotations

from assistant.conf import assistant_settings
from assistant.core.llm_client import llm_configured, make_client

from .models import Dashboard

NO_LLM = "no language model is configured"
TEMPLATE_NOTE = (
    "This page was assembled from the dashboard's fields, not written by an LLM; configure "
    '`ASSISTANT["LLM"]` for real documentation.'
)
PROMPT = (
    "Write concise Markdown documentation for the BI dashboard below, for the analysts who use "
    "it: what it is for, then one section per chart explaining what it shows and how its SQL "
    "computes it. Start with a level-one heading holding the dashboard's title.\n\n{facts}"
)


def facts(dashboard: Dashboard) -> str:
    """The dashboard as plain Markdown facts: the template's body, and what the LLM is shown."""
    owner = dashboard.owner.get_username() if dashboard.owner else "nobody"
    lines = [
        f"# {dashboard.title}",
        "",
        f"*Environment:* {dashboard.environment.name} · *Version:* {dashboard.version} · "
        f"*Owner:* {owner} · *Published:* {'yes' if dashboard.published else 'no'} · "
        f"*Database:* {dashboard.database or dashboard.environment.database}",
        "",
        dashboard.description or "_No description._",
        "",
        f"## Charts ({len(dashboard.charts)})",
    ]
    for index, chart in enumerate(dashboard.charts, 1):
        chart = chart if isinstance(chart, dict) else {}
        lines += [
            "",
            f"### {index}. {chart.get('title') or '(untitled)'} ({chart.get('type') or 'chart'})",
            "",
            "```sql",
            str(chart.get("sql") or "-- no SQL"),
            "```",
        ]
    return "\n".join(lines) + "\n"


def template_summary(dashboard: Dashboard, why: str = NO_LLM) -> str:
    """The dashboard's facts under a label no reader can miss: this is not an LLM's writing."""
    return f"> **Template summary — {why}.** {TEMPLATE_NOTE}\n\n{facts(dashboard)}"


def written_by_llm(dashboard: Dashboard) -> tuple[str, str]:
    """(markdown, model) from the configured OpenAI-compatible endpoint; raises on failure."""
    config = assistant_settings.llm
    client = make_client(config)
    try:
        answer = client.chat.completions.create(
            model=config["MODEL"],
            messages=[{"role": "user", "content": PROMPT.format(facts=facts(dashboard))}],
            temperature=0.2,
        )
    finally:
        client.close()
    markdown = (answer.choices[0].message.content or "").strip()
    if not markdown:
        raise ValueError("the model answered with nothing")
    return markdown + "\n", str(config["MODEL"])


def document(dashboard: Dashboard) -> tuple[str, str]:
    """(markdown, source): ``llm:<model>``, or ``template…`` (labelled as such in the text)."""
    if not llm_configured():
        return template_summary(dashboard), "template"
    import openai

    try:
        markdown, model = written_by_llm(dashboard)
    except (openai.APIError, ValueError, AttributeError, IndexError) as exc:
        reason = f"the language model failed ({type(exc).__name__})"
        return template_summary(dashboard, reason), "template (the LLM failed)"
    return markdown, f"llm:{model}"
