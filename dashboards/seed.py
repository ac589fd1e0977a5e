"""The demo's dashboards: three environments, a few dozen dashboards (some deliberately broken)."""

from __future__ import annotations

from typing import Any

ENVIRONMENTS = [
    # slug, name, is_production, database, position
    ("dev", "Development", False, "dev_warehouse", 0),
    ("staging", "Staging", False, "staging_warehouse", 1),
    ("prod", "Production", True, "prod_warehouse", 2),
]


def chart(title: str, kind: str, sql: str) -> dict[str, str]:
    return {"title": title, "type": kind, "sql": sql}


# slug → (title, owner username or None, description, charts, environments it is in)
DASHBOARDS: dict[str, tuple[str, str | None, str, list[dict[str, str]], tuple[str, ...]]] = {
    "sales-overview": (
        "Sales overview",
        "admin",
        "Revenue, orders and average basket, month by month.",
        [
            chart(
                "Revenue by month",
                "line",
                "SELECT date_trunc('month', ordered_at) AS month, sum(total) FROM orders GROUP BY 1 ORDER BY 1",
            ),
            chart(
                "Orders by month",
                "bar",
                "SELECT date_trunc('month', ordered_at) AS month, count(*) FROM orders GROUP BY 1",
            ),
            chart("Average basket", "number", "SELECT avg(total) FROM orders"),
        ],
        ("dev", "staging", "prod"),
    ),
    "sales-pipeline": (
        "Sales pipeline",
        "operator",
        "Open opportunities by stage and owner.",
        [
            chart(
                "Open deals by stage",
                "funnel",
                "SELECT stage, count(*) FROM deals WHERE closed_at IS NULL GROUP BY stage",
            ),
            chart(
                "Pipeline value by owner",
                "bar",
                "SELECT owner, sum(amount) FROM deals WHERE closed_at IS NULL GROUP BY owner",
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "revenue-by-region": (
        "Revenue by region",
        "admin",
        "Where the money comes from.",
        [
            chart(
                "Revenue by region",
                "map",
                "SELECT region, sum(total) FROM orders JOIN customers USING (customer_id) GROUP BY region",
            ),
            chart(
                "Top regions",
                "table",
                "SELECT region, sum(total) AS revenue FROM orders JOIN customers USING (customer_id) GROUP BY region ORDER BY revenue DESC LIMIT 10",
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "customer-churn": (
        "Customer churn",
        "operator",
        "Customers who stopped ordering, by cohort.",
        [
            chart(
                "Churn rate by cohort",
                "line",
                "SELECT cohort, avg(churned::int) FROM customer_cohorts GROUP BY cohort",
            ),
            # deliberate defect: a chart without a title
            chart(
                "",
                "table",
                "SELECT customer_id, last_order_at FROM customers WHERE last_order_at < now() - interval '90 days'",
            ),
        ],
        ("dev", "staging"),
    ),
    "marketing-funnel": (
        "Marketing funnel",
        "operator",
        "Visits to sign-ups to first orders.",
        [
            chart(
                "Funnel",
                "funnel",
                "SELECT step, count(*) FROM funnel_events GROUP BY step ORDER BY min(step_order)",
            ),
            # deliberate defect: SQL that does not parse
            chart(
                "Conversion by campaign",
                "bar",
                "SELEC campaign, count(*) FORM signups GROUP BY campaign",
            ),
        ],
        ("dev", "staging"),
    ),
    "inventory-levels": (
        "Inventory levels",
        "admin",
        "Stock on hand and items to reorder.",
        [
            chart("Stock on hand", "table", "SELECT sku, quantity FROM stock ORDER BY quantity"),
            chart(
                "Items to reorder", "table", "SELECT sku FROM stock WHERE quantity < reorder_level"
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "support-tickets": (
        "Support tickets",
        "operator",
        "Open tickets and how fast they are answered.",
        [
            chart("Open tickets", "number", "SELECT count(*) FROM tickets WHERE closed_at IS NULL"),
            # deliberate defect: unbalanced parentheses
            chart(
                "Median first response",
                "line",
                "SELECT date_trunc('day', opened_at), percentile_cont(0.5) WITHIN GROUP (ORDER BY first_response_minutes FROM tickets GROUP BY 1",
            ),
        ],
        ("dev",),
    ),
    "web-traffic": (
        "Web traffic",
        "admin",
        "Visits, visitors and top pages.",
        [
            chart("Visits per day", "line", "SELECT day, sum(visits) FROM web_daily GROUP BY day"),
            chart(
                "Top pages",
                "table",
                "SELECT path, sum(views) AS views FROM page_views GROUP BY path ORDER BY views DESC LIMIT 20",
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "finance-kpis": (
        "Finance KPIs",
        "admin",
        "Margin, cash and receivables.",
        [
            chart(
                "Gross margin",
                "number",
                "SELECT sum(total - cost) / nullif(sum(total), 0) FROM orders",
            ),
            chart(
                "Receivables",
                "table",
                "SELECT customer_id, sum(amount) FROM invoices WHERE paid_at IS NULL GROUP BY customer_id",
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "product-usage": (
        "Product usage",
        "operator",
        "Daily and monthly active users.",
        [
            chart(
                "Daily active users",
                "line",
                "SELECT day, count(DISTINCT user_id) FROM events GROUP BY day",
            ),
            # deliberate defect: two statements, one of them a write
            chart(
                "Monthly active users",
                "line",
                "SELECT month, count(DISTINCT user_id) FROM events GROUP BY month; DELETE FROM events",
            ),
        ],
        ("dev", "staging"),
    ),
    "hiring-pipeline": (
        "Hiring pipeline",
        None,  # deliberate defect: nobody owns it
        "Candidates by stage.",
        [
            chart(
                "Candidates by stage",
                "funnel",
                "SELECT stage, count(*) FROM candidates GROUP BY stage",
            )
        ],
        ("dev", "staging"),
    ),
    "executive-summary": (
        "Executive summary",
        "admin",
        "The five numbers the board asks for.",
        [
            chart(
                "Revenue this quarter",
                "number",
                "SELECT sum(total) FROM orders WHERE ordered_at >= date_trunc('quarter', now())",
            ),
            chart(
                "New customers",
                "number",
                "SELECT count(*) FROM customers WHERE created_at >= date_trunc('quarter', now())",
            ),
            chart(
                "Churned customers", "number", "SELECT count(*) FROM customer_cohorts WHERE churned"
            ),
        ],
        ("dev", "staging", "prod"),
    ),
    "data-quality": (
        "Data quality",
        "operator",
        "Late loads and empty columns (a draft).",
        [
            chart(
                "Late loads",
                "table",
                "SELECT table_name, loaded_at FROM load_log WHERE loaded_at < now() - interval '1 day'",
            ),
            # deliberate defect: untitled and with dangling SQL
            chart("", "table", "SELECT table_name, column_name FROM column_stats WHERE"),
        ],
        ("dev",),
    ),
}
# Dashboards the viewer may read (in every environment they are in), through guardian.
VIEWER_READS = ("sales-overview", "web-traffic", "executive-summary")
# Version in each environment: dev is ahead of staging, staging of prod.
VERSIONS = {"dev": 3, "staging": 2, "prod": 1}
PUBLISHED = {"dev": False, "staging": True, "prod": True}


def seed_rows() -> list[dict[str, Any]]:
    """One row per (environment, dashboard): what the seed command creates."""
    rows = []
    for environment, _, _, database, _ in ENVIRONMENTS:
        for slug, (title, owner, description, charts, where) in DASHBOARDS.items():
            if environment not in where:
                continue
            rows.append(
                {
                    "environment": environment,
                    "slug": slug,
                    "title": title,
                    "owner": owner,
                    "description": description,
                    "charts": charts,
                    "database": database,
                    "version": VERSIONS[environment],
                    "published": PUBLISHED[environment],
                }
            )
    return rows
