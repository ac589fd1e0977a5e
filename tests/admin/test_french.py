"""The admin pages of the app, in French when the staff member's browser asks for French."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.admin.pages import (
    AUDIT,
    CHANGE_PAGES,
    CONVERSATIONS,
    INVENTORY,
    JOBS,
    RUNS,
    TASKS,
    TOKENS,
    page_text,
)

pytestmark = pytest.mark.django_db

FRENCH = {"HTTP_ACCEPT_LANGUAGE": "fr"}


def french_page(client: Client, path: str) -> str:
    response = client.get(path, **FRENCH)
    assert response.status_code == 200, path
    text = page_text(response)
    assert re.search(r'<html lang="fr"', text), path
    return text


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (AUDIT, ["Exporter en CSV", "Exporter en JSON Lines", "Décision"]),
        (CONVERSATIONS, ["Utilisation du modèle de langage", "Jetons LLM"]),
        (JOBS, ["Annuler les tâches sélectionnées", "Progression"]),
        (TOKENS, ["Révoquer les jetons sélectionnés", "Plafond", "utilisable"]),
        (TASKS, ["Dernière exécution", "Exécuter maintenant"]),
        (RUNS, ["échoué"]),
        (INVENTORY, ["Inventaire des outils", "Expliquer pour l’utilisateur :", "opération"]),
        (
            CONVERSATIONS + "usage/",
            ["Aucun tour de modèle de langage", "Utilisation du modèle de langage"],
        ),
    ],
)
def test_the_changelists_and_pages_speak_french(
    admin_client: Client, world: dict[str, Any], path: str, said: list[str]
) -> None:
    text = french_page(admin_client, path)

    for words in said:
        assert words in text, (path, words)


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ("action", "Entrées d’audit"),  # (the navigation's names of the app's models)
        ("conversation", "Appels d’outils"),
        ("entry", "Entités (masquées)"),
        ("job", "Progression"),
        ("run", "Résultat"),
        ("task", "Taux de réussite des dernières exécutions"),
        ("token", "Plafond"),
    ],
)
def test_each_records_change_form_speaks_french(
    admin_client: Client, world: dict[str, Any], record: str, said: str
) -> None:
    row = world[record]

    text = french_page(admin_client, f"{CHANGE_PAGES[record]}{row.pk}/change/")

    assert said in text
    assert "Home" not in text


def test_the_validation_run_page_filters_findings_in_french(
    admin_client: Client, world: dict[str, Any]
) -> None:
    text = french_page(admin_client, f"{RUNS}{world['run'].pk}/change/")

    assert "Constats, échecs d’abord :" in text
    assert "échoués (1)" in text


def test_a_validation_task_runs_now_in_french(admin_client: Client, world: dict[str, Any]) -> None:
    task = world["task"]

    response = admin_client.post(
        f"{TASKS}", {"action": "run_now", "_selected_action": [task.pk]}, follow=True, **FRENCH
    )

    assert "1 exécution lancée." in page_text(response)


COLUMN = re.compile(
    r'<th scope="col" class="[^"]*column-(\w+)[^"]*">.*?(?:<a [^>]*>|<span>)([^<]+)<', re.S
)
LABEL = re.compile(r'<div class="[^"]*field-(\w+)[^"]*">.*?<label[^>]*>([^<]+)</label>', re.S)


def columns(text: str) -> dict[str, str]:
    """A changelist's column headers, by the field or callable each shows."""
    return {name: header.strip() for name, header in COLUMN.findall(text)}


def labels(text: str) -> dict[str, str]:
    """A change form's field labels, by field name (the label suffix dropped)."""
    return {name: label.strip().removesuffix(":").strip() for name, label in LABEL.findall(text)}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (AUDIT, {"username": "Nom d’utilisateur", "operation": "Opération"}),
        (JOBS, {"created_at": "Créé le", "operation": "Opération", "user": "Utilisateur"}),
        (CONVERSATIONS, {"title": "Titre", "user": "Utilisateur", "updated_at": "Mis à jour le"}),
    ],
)
def test_a_changelists_column_headers_are_french(
    admin_client: Client, world: dict[str, Any], path: str, expected: dict[str, str]
) -> None:
    shown = columns(french_page(admin_client, path))

    assert {name: shown.get(name) for name in expected} == expected


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            "entry",
            {"username": "Nom d’utilisateur", "risk_level": "Niveau de risque", "source": "Source"},
        ),
        ("job", {"function": "Fonction", "progress_message": "Message de progression"}),
        ("conversation", {"title": "Titre", "updated_at": "Mis à jour le"}),
    ],
)
def test_a_change_forms_field_labels_are_french(
    admin_client: Client, world: dict[str, Any], record: str, expected: dict[str, str]
) -> None:
    path = f"{CHANGE_PAGES[record]}{world[record].pk}/change/"

    shown = labels(french_page(admin_client, path))

    assert {name: shown.get(name) for name in expected} == expected


def test_the_model_names_are_french_in_the_navigation(
    admin_client: Client, world: dict[str, Any]
) -> None:
    text = french_page(admin_client, JOBS)

    for name in [
        "Tâches de fond",
        "Conversations",
        "Tâches de validation",
        "Exécutions de validation",
    ]:
        assert f">{name}<" in text, name
