"""The distribution: what the built wheel declares and contains, read from the installed copy."""

from __future__ import annotations

import email
import json
import re
import zipfile
from pathlib import Path

import pytest

import assistant
from tests.wheel import REPO, InstalledWheel, installed_wheel

DJANGO_VERSIONS = ("5.2", "6.0", "6.1")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    return installed_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def metadata(installed: InstalledWheel) -> email.message.Message:
    with zipfile.ZipFile(installed.wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_distribution_name_is_ours_and_the_version_is_the_packages(
    metadata: email.message.Message,
) -> None:
    assert metadata["Name"] == "django-ops-assistant"
    assert metadata["Version"] == assistant.__version__


def test_the_metadata_names_licence_urls_and_every_supported_django(
    metadata: email.message.Message,
) -> None:
    assert metadata["License-Expression"] == "MIT"
    assert "LICENSE" in metadata.get_all("License-File")
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(urls)
    classifiers = metadata.get_all("Classifier")
    for version in DJANGO_VERSIONS:
        assert f"Framework :: Django :: {version}" in classifiers
    assert "Programming Language :: Python :: 3.12" in classifiers
    assert "Programming Language :: Python :: 3.13" in classifiers


def test_django_is_bounded_and_each_extra_pulls_what_it_names(
    metadata: email.message.Message,
) -> None:
    requires = metadata.get_all("Requires-Dist")
    assert "django<6.2,>=5.2" in [r.lower() for r in requires]
    extras = {
        extra: {
            re.split(r"[<>=\[ ;]", r)[0].lower() for r in requires if f'extra == "{extra}"' in r
        }
        for extra in metadata.get_all("Provides-Extra")
    }
    assert extras["llm"] == {"openai"}
    assert extras["redis"] == {"channels-redis", "hiredis"}
    assert extras["postgres"] == {"psycopg"}
    assert extras["django52"] == {"django-tasks"}
    assert extras["oauth"] == {"django-oauth-toolkit"}


def test_every_app_the_tutorial_installs_comes_with_the_wheel_or_django(
    metadata: email.message.Message,
) -> None:
    # The wheel is tested against this suite's environment (which has everything), so what a
    # fresh `pip install` would lack is found here, from the declared requirements.
    from importlib.metadata import packages_distributions

    from tests.tutorial import tutorial_block

    apps = re.findall(r'^\s*"([\w.]+)",', tutorial_block("settings"), re.MULTILINE)
    declared = {re.split(r"[<>=\[ ;]", r)[0].lower() for r in metadata.get_all("Requires-Dist")}
    wanted = {"django", "django-ops-assistant", *declared}
    providers = packages_distributions()
    missing = {
        app
        for app in apps
        if not {d.lower() for d in providers.get(app.split(".")[0], [])} & wanted
        and app.split(".")[0] != "assistant"
    }
    assert "daphne" in apps
    assert missing == set()


def test_the_wheel_holds_the_app_and_nothing_of_the_example_project(
    installed: InstalledWheel,
) -> None:
    names = installed.names()
    packages = {name.split("/")[0] for name in names if not name.endswith(".dist-info/")}

    assert {p for p in packages if not p.endswith(".dist-info")} == {"assistant"}
    migrations = {
        f"assistant/migrations/{path.name}" for path in (REPO / "assistant/migrations").glob("*.py")
    }
    assert migrations <= names
    assert {
        "assistant/py.typed",
        "assistant/templates/assistant/chat.html",
        "assistant/templates/assistant/login.html",
        "assistant/static/assistant/chat.js",
        "assistant/static/assistant/chat.css",
        "assistant/static/assistant/render.js",
        "assistant/static/assistant/tokens.js",
        "assistant/static/assistant/vendor/marked.umd.js",
        "assistant/static/assistant/vendor/purify.min.js",
        "assistant/static/assistant/vendor/LICENSE-marked",
        "assistant/static/assistant/vendor/LICENSE-dompurify",
        "assistant/locale/fr/LC_MESSAGES/django.mo",
        "assistant/locale/fr/LC_MESSAGES/djangojs.mo",
    } <= names


def test_the_installed_copy_is_imported_and_finds_its_templates_static_files_and_migrations(
    installed: InstalledWheel,
) -> None:
    script = (
        "import json, importlib.metadata, importlib.resources as r, assistant\n"
        "root = r.files('assistant')\n"
        "print(json.dumps({'file': assistant.__file__,"
        " 'version': importlib.metadata.version('django-ops-assistant'),"
        " 'found': [root.joinpath(p).is_file() for p in ('py.typed',"
        " 'templates/assistant/chat.html', 'static/assistant/chat.js',"
        " 'migrations/0001_initial.py')]}))\n"
    )
    found = json.loads(installed.run("-c", script))

    assert Path(found["file"]).is_relative_to(installed.venv)
    assert found["version"] == assistant.__version__
    assert found["found"] == [True, True, True, True]
