"""A second language covers every string of the app: pages, API errors and scripts speak French
when the client asks for it, and a string added without its translation fails here, by name."""

from __future__ import annotations

import gettext
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from assistant.models import Conversation
from tests.asgi import application
from tests.browsing import ARTIFACTS, signed_in_context
from tests.clients import API, client_for, start_conversation
from tests.conftest import REQUIRE_SERVICES
from tests.sockets import ORIGIN, PATH, WAIT, receive, receive_run, send

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "assistant"
MESSAGES = APP / "locale" / "fr" / "LC_MESSAGES"
DOMAINS = ["django", "djangojs"]
FRENCH = {"HTTP_ACCEPT_LANGUAGE": "fr"}
GETTEXT_TOOLS = ["xgettext", "msgmerge", "msgfmt", "msgattrib"]
# as `make messages` runs it (the Makefile)
MAKEMESSAGES = [sys.executable, "-m", "django", "makemessages", "--locale", "fr", "--no-location"]
MAKEMESSAGES += ["--ignore", "static/assistant/vendor/*"]


@pytest.fixture(scope="module")
def gettext_tools() -> None:
    missing = [tool for tool in GETTEXT_TOOLS if shutil.which(tool) is None]
    if missing:
        reason = f"needs GNU gettext ({', '.join(missing)}: apt-get install gettext)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def fresh_catalogs(gettext_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the app whose French catalogs ``makemessages`` brought up to date with its
    sources, as a translator's ``make messages`` would: the committed ones are not touched."""
    copy = tmp_path_factory.mktemp("app") / "assistant"
    shutil.copytree(APP, copy, ignore=shutil.ignore_patterns("__pycache__", "vendor"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    for domain in DOMAINS:
        subprocess.run(
            [*MAKEMESSAGES, "--domain", domain],
            cwd=copy,
            env=env,
            check=True,
            capture_output=True,
        )
    return copy / "locale" / "fr" / "LC_MESSAGES"


def msgids(po: Path, *selection: str) -> list[str]:
    """The msgids of the entries ``msgattrib`` selects (e.g. ``--untranslated``) in a catalog."""
    found = subprocess.run(
        ["msgattrib", "--no-obsolete", "--no-wrap", *selection, str(po)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [
        line.removeprefix("msgid ").strip('"')
        for line in found.splitlines()
        if line.startswith("msgid ") and line != 'msgid ""'
    ]


@pytest.mark.slow  # makemessages: ~10 s
@pytest.mark.parametrize("domain", DOMAINS)
def test_every_string_of_the_sources_has_a_french_translation(
    fresh_catalogs: Path, domain: str
) -> None:
    po = fresh_catalogs / f"{domain}.po"

    assert msgids(po, "--untranslated") == [], "untranslated: run `make messages`, translate"
    assert msgids(po, "--only-fuzzy") == [], "fuzzy: check the translation, drop the flag"
    assert len(msgids(po, "--translated")) > 50


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_committed_mo_files_are_compiled_from_the_committed_po_files(
    gettext_tools: None, tmp_path: Path, domain: str
) -> None:
    compiled = tmp_path / f"{domain}.mo"
    subprocess.run(
        ["msgfmt", "--check", "-o", str(compiled), str(MESSAGES / f"{domain}.po")], check=True
    )

    with compiled.open("rb") as fresh, (MESSAGES / f"{domain}.mo").open("rb") as committed:
        fresh_catalog = gettext.GNUTranslations(fresh)._catalog  # type: ignore[attr-defined]
        committed_catalog = gettext.GNUTranslations(committed)._catalog  # type: ignore[attr-defined]
    assert committed_catalog == fresh_catalog, "stale .mo: run `make messages`"


def page_for(user: Any, path: str, language: str) -> str:
    """A page as ``user``'s browser, asking for ``language``, receives it."""
    client = Client()
    client.force_login(user)
    return client.get(path, HTTP_ACCEPT_LANGUAGE=language).content.decode()


@pytest.mark.django_db
def test_the_chat_page_speaks_french_and_says_so(plain_user: Any) -> None:
    page = page_for(plain_user, "/assistant/", "fr")

    assert '<html lang="fr" dir="ltr">' in page
    for words in ["Nouvelle conversation", "Envoyer", "Jetons d’accès", "Écrire à l’assistant…"]:
        assert words in page
    assert "Message the assistant…" not in page


@pytest.mark.django_db
def test_the_chat_page_stays_english_for_an_english_browser(plain_user: Any) -> None:
    page = page_for(plain_user, "/assistant/", "en")

    assert '<html lang="en" dir="ltr">' in page
    assert "Message the assistant…" in page


@pytest.mark.django_db
def test_the_approvals_page_speaks_french(plain_user: Any) -> None:
    page = page_for(plain_user, "/assistant/approvals/", "fr")

    assert '<html lang="fr" dir="ltr">' in page
    assert "Approbations en attente" in page
    assert "Rien n’attend votre approbation." in page


@pytest.mark.django_db
def test_the_sign_in_page_and_its_refusal_speak_french(plain_user: Any) -> None:
    client = Client()

    page = client.get("/assistant/login/", **FRENCH).content.decode()
    refused = client.post(
        "/assistant/login/", {"username": "plain", "password": "wrong"}, **FRENCH
    ).content.decode()

    assert '<html lang="fr" dir="ltr">' in page
    assert "Se connecter" in page
    assert "Mot de passe" in page
    assert "Nom d’utilisateur ou mot de passe incorrect." in refused


@pytest.mark.django_db
def test_an_api_error_is_explained_in_french_under_its_unchanged_code(plain_user: Any) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping")

    response = client.patch(
        f"{API}/conversations/{conversation}/",
        {"title": "x" * 201},
        format="json",
        **FRENCH,
    )

    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_title",
        "detail": "Le titre dépasse 200 caractères.",
    }


@pytest.mark.django_db
def test_a_refused_bearer_token_is_explained_in_french() -> None:
    response = Client().get(f"{API}/tools/", HTTP_AUTHORIZATION="Bearer not-a-token", **FRENCH)

    assert response.status_code == 401
    assert response.json() == {"code": "invalid_token", "detail": "Ce jeton n’est pas valide."}


@pytest.mark.django_db
def test_the_javascript_catalog_is_served_in_the_asked_language() -> None:
    french = Client().get("/assistant/jsi18n/", **FRENCH)
    english = Client().get("/assistant/jsi18n/", HTTP_ACCEPT_LANGUAGE="en")

    assert french.status_code == 200
    assert french["Content-Type"].startswith("text/javascript")
    assert '"Not connected yet; try again in a moment.": "Pas encore connect' in (
        french.content.decode()
    )
    assert "Pas encore connect" not in english.content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_french_browser_the_chat_speaks_french_and_tells_times_with_intl(
    browser: Any, asgi_live_server: str, plain_user: Any
) -> None:
    from playwright.sync_api import expect

    Conversation.objects.create(user=plain_user, title="Rapport du jour")
    context = signed_in_context(browser, asgi_live_server, plain_user, locale="fr-FR")
    page = context.new_page()
    try:
        page.goto(f"{asgi_live_server}/assistant/")

        expect(page.locator("#status")).to_have_text("connecté")  # a string of the JS catalog
        expect(page.locator("html")).to_have_attribute("lang", "fr")
        expect(page.locator("#send")).to_have_text("Envoyer")
        # the sidebar's time, from Intl.RelativeTimeFormat in the page's language
        expect(page.locator("#conversations time").first).to_have_text("maintenant")
        page.get_by_placeholder("Écrire à l’assistant…").fill("ping")
        page.get_by_role("button", name="Envoyer").click()
        expect(page.locator("#messages .bubble.assistant .text")).to_have_text("pong for plain")
        page.screenshot(path=str(ARTIFACTS / "chat-in-french.png"))
    finally:
        context.close()


async def socket_in(language: bytes, user: Any) -> WebsocketCommunicator:
    """A chat socket whose browser asks for ``language`` (its Accept-Language header)."""
    headers = [ORIGIN, (b"accept-language", language)]
    socket = WebsocketCommunicator(application, PATH, headers=headers)
    socket.scope["user"] = user
    connected, _ = await socket.connect(timeout=WAIT)
    assert connected
    return socket


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_answers_in_the_language_its_browser_asks_for(plain_user: Any) -> None:
    french, english = (
        await socket_in(b"fr-FR,fr;q=0.9", plain_user),
        await socket_in(b"en", plain_user),
    )
    try:
        await send(french, type="message", text="  ")
        await send(english, type="message", text="  ")
        refused_in_french, refused_in_english = await receive(french), await receive(english)
        await send(french, type="message", text="what can you do")
        reply = "".join(frame.get("delta", "") for frame in await receive_run(french))
    finally:
        await french.disconnect()
        await english.disconnect()

    assert refused_in_french["value"] == {
        "code": "invalid_message",
        "message": "Le message est vide.",
    }
    assert refused_in_english["value"]["message"] == "The message is empty."
    assert "Voici ce que je peux faire pour vous :" in reply
