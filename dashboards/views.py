from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse

from .references import visible_dashboards


@login_required
def documentation(request: HttpRequest, pk: int) -> HttpResponse:
    """A dashboard's stored Markdown documentation, for those who may view the dashboard."""
    dashboard = visible_dashboards(request.user).filter(pk=pk).first()
    if dashboard is None or not dashboard.documentation:
        raise Http404("No documentation of a dashboard you may view.")
    return HttpResponse(dashboard.documentation, content_type="text/plain; charset=utf-8")
