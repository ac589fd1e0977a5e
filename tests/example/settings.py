"""Settings for the example project's suite: the app's test settings plus the dashboards domain."""

from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "dashboards"]
ASSISTANT = {
    **ASSISTANT,
    "RESOURCES": {**ASSISTANT["RESOURCES"], "dashboards": "dashboards.Dashboard"},
}
