"""Sphinx configuration: Markdown pages (MyST), the furo theme, reference tables from the code."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

from assistant import __version__  # noqa: E402

project = "django-ops-assistant"
author = "django-ops-assistant contributors"
copyright = "django-ops-assistant contributors"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.intersphinx",
    "assistant_reference",  # docs/_ext: settings and system checks, rendered from the code
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"django-ops-assistant {release}"
html_static_path: list[str] = []

# Django's own docs, linked from ours. The inventory is fetched at build time; offline (CI here has
# no internet) the mapping is left out so the -W build still passes, and references to Django's
# objects render as plain text. DJANGO_DOCS_INVENTORY may name a local objects.inv instead.
DJANGO_DOCS = "https://docs.djangoproject.com/en/6.1/"


def _online(host: str = "docs.djangoproject.com") -> bool:
    if os.environ.get("ASSISTANT_DOCS_OFFLINE"):
        return False
    try:
        socket.create_connection((host, 443), timeout=2).close()
    except OSError:
        return False
    return True


_inventory = os.environ.get("DJANGO_DOCS_INVENTORY")
if _inventory:
    intersphinx_mapping = {"django": (DJANGO_DOCS, _inventory)}
elif _online():
    intersphinx_mapping = {"django": (DJANGO_DOCS, f"{DJANGO_DOCS}_objects/")}
else:
    intersphinx_mapping = {}
intersphinx_timeout = 10
