"""Token budgets that hold under concurrency: each model call reserves before it starts and
settles with what it spent, on every surface at once."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
import requests
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from assistant.checks import check_settings
from assistant.core.cancellation import CancellationToken
from assistant.models import AuditEntry, BudgetReservation, BudgetUsage, Conversation, Message
from assistant.stream.broadcast import group_name
from assistant.turns.budgets import estimate_prompt_tokens, estimate_tokens
from assistant.turns.runs import arun_turn, run_turn
from tests.live_sockets import session_cookie, ws_connect, ws_receive_run, ws_send
from tests.openai_peer import USAGE, Reply, call, error, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.turns.reading import next_frame

WAIT = 30.0
PER_SURFACE = 6
DAILY = 1_000
# What the issue measured: a reply spending 900 tokens, 18 of them at once.
SPENT = {"prompt_tokens": 800, "completion_tokens": 100, "total_tokens": 900}


def limit(settings: Any, **budgets: Any) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "BUDGETS": budgets}


def slow_reply(words: str = "Done.", seconds: float = 1.0) -> Reply:
    """A reply that takes a while (so parallel turns overlap) and reports ``SPENT``."""
    return Reply(stall_before=seconds, deltas=(words,), usage=SPENT)


def one_reservation(request: dict[str, Any]) -> int:
    """The most a call sent like this reserves: its prompt's estimate and its reply's cap."""
    return estimate_prompt_tokens(request["messages"], request.get("tools") or []) + int(
        request.get("max_tokens") or 0
    )


def rest_turn(server: str, token: str) -> str:
    response = requests.post(
        f"{server}/assistant/api/messages/",
        json={"message": "hello"},
        headers={"Authorization": f"Token {token}"},
        timeout=WAIT,
    )
    reply = response.json()["assistant_message"]  # a refused turn is stored, failed, saying why
    refused = reply["status"] == "failed" and "today's budget of" in reply["text"]
    return "budget_exceeded" if refused else reply["status"]


def agui_turn(server: str, token: str) -> str:
    body = {
        "threadId": str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "state": {},
        "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {token}"}
    with requests.post(
        f"{server}/assistant/agui/", json=body, headers=headers, timeout=WAIT, stream=True
    ) as response:
        last = [line for line in response.iter_lines(decode_unicode=True) if line][-1]
    event = json.loads(last.removeprefix("data: "))
    return event.get("code") or event["type"]


def socket_turns(server: str, cookie: str, count: int) -> list[str]:
    url = server.replace("http://", "ws://") + "/ws/assistant/"

    async def one() -> str:
        async with ws_connect(url, cookie, open_timeout=WAIT) as ws:
            await ws_send(ws, type="message", text="hello")
            frames = await ws_receive_run(ws)
        return frames[-1].get("code") or frames[-1]["type"]

    async def all_() -> list[str]:
        return list(await asyncio.gather(*(one() for _ in range(count))))

    return asyncio.run(all_())


@pytest.mark.django_db(transaction=True)
def test_parallel_turns_on_every_surface_stay_within_the_budget_plus_one_reservation(
    use_llm, asgi_live_server, make_user, settings
):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=DAILY)
    peer.script(*(slow_reply() for _ in range(3 * PER_SURFACE)))
    user = make_user("spender")
    token = Token.objects.create(user=user).key
    cookie = session_cookie("spender")
    start = threading.Barrier(2 * PER_SURFACE + 1)

    def at_once(work: Any, *args: Any) -> Any:
        start.wait(timeout=WAIT)
        return work(*args)

    with ThreadPoolExecutor(max_workers=2 * PER_SURFACE + 1) as pool:
        rest = [pool.submit(at_once, rest_turn, asgi_live_server, token) for _ in range(6)]
        agui = [pool.submit(at_once, agui_turn, asgi_live_server, token) for _ in range(6)]
        sockets = pool.submit(at_once, socket_turns, asgi_live_server, cookie, PER_SURFACE)
        endings = [f.result() for f in rest + agui] + sockets.result()

    spent = sum(m.total_tokens or 0 for m in Message.objects.filter(role="assistant"))
    assert peer.requests, "no turn asked the model"
    assert spent <= DAILY + max(one_reservation(r) for r in peer.requests), endings
    assert len(peer.requests) < 3 * PER_SURFACE
    # every turn ended: answered, or refused with the budget's code (each refusal audited once)
    assert set(endings) <= {"complete", "RUN_FINISHED", "budget_exceeded"}, endings
    refused = endings.count("budget_exceeded")
    assert refused == 3 * PER_SURFACE - len(peer.requests)
    assert AuditEntry.objects.filter(decision="over_budget").count() == refused
    usage = BudgetUsage.objects.get(user=user)
    assert (usage.spent_tokens, usage.held(), usage.calls) == (spent, 0, len(peer.requests))


# -- reserve, settle ---------------------------------------------------------------------------


def usage_of(user: Any) -> BudgetUsage:
    return BudgetUsage.objects.get(user=user)


@pytest.mark.django_db(transaction=True)
def test_each_model_call_reserves_its_prompt_and_capped_reply_and_settles_what_it_spent(
    use_llm, plain_user, settings
):
    peer = use_llm(RESERVE_REPLY_TOKENS=300)
    limit(settings, TOKENS_PER_DAY=100_000)
    peer.script(tool_calls(call("ping")), text("Pinged."))

    turn = run_turn(plain_user, "ping")

    assert turn.assistant_message.status == "complete"
    assert [r["max_tokens"] for r in peer.requests] == [300, 300]
    usage = usage_of(plain_user)
    reserved = sum(one_reservation(r) for r in peer.requests)
    assert (usage.spent_tokens, usage.calls, usage.reserved_tokens) == (240, 2, reserved)
    assert usage.held() == 0
    assert not BudgetReservation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_without_a_token_budget_nothing_is_reserved_and_the_reply_is_not_capped(
    use_llm, plain_user
):
    peer = use_llm()
    peer.script(text("Hi."))

    run_turn(plain_user, "hello")

    assert "max_tokens" not in peer.requests[0]
    assert not BudgetUsage.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_call_cut_off_mid_stream_counts_what_it_streamed(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=100_000)
    peer.script(text("Half an ans", then="drop"))  # no usage ever reported

    turn = run_turn(plain_user, "hello")

    assert turn.assistant_message.status == "failed"
    prompt = estimate_prompt_tokens(peer.requests[0]["messages"], peer.requests[0]["tools"])
    usage = usage_of(plain_user)
    assert usage.spent_tokens == prompt + estimate_tokens("Half an ans")
    assert usage.held() == 0


@pytest.mark.django_db(transaction=True)
def test_a_call_the_server_refused_spends_nothing_and_holds_nothing(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=100_000)
    peer.script(error(500, "overloaded"))

    run_turn(plain_user, "hello")

    usage = usage_of(plain_user)
    assert (usage.spent_tokens, usage.held(), usage.calls) == (0, 0, 1)


@pytest.mark.django_db(transaction=True)
async def test_a_stopped_call_counts_what_it_streamed_and_lets_the_rest_go(
    use_llm, plain_user, settings
):
    peer = use_llm(TIMEOUT=10)
    limit(settings, TOKENS_PER_DAY=100_000)
    peer.script(text("Thinking", then="stall"))
    conversation = await Conversation.objects.acreate(user=plain_user, title="stop me")
    layer = get_channel_layer()
    watcher = await layer.new_channel()
    await layer.group_add(group_name(conversation.pk), watcher)
    cancel = CancellationToken()
    running = asyncio.ensure_future(
        arun_turn(plain_user, "think", conversation_id=conversation.pk, cancel=cancel)
    )

    await next_frame(layer, watcher, lambda frame: frame.get("delta") == "Thinking")
    cancel.cancel()
    async with asyncio.timeout(5):
        turn = await running

    assert turn.assistant_message.status == "cancelled"
    usage = await BudgetUsage.objects.aget(user=plain_user)
    prompt = estimate_prompt_tokens(peer.requests[0]["messages"], peer.requests[0]["tools"])
    assert usage.spent_tokens == prompt + estimate_tokens("Thinking")
    assert await sync_to_async(usage.held)() == 0
    await layer.group_discard(group_name(conversation.pk), watcher)


async def waiting_for_a_lock(within: float) -> bool:
    """Whether a PostgreSQL session of this test database waits for a lock (within a while)."""

    def waiting() -> bool:  # on a thread and connection of its own: the turn's sync one waits
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
                return bool(cursor.fetchone()[0])
        finally:
            connection.close()

    for _ in range(int(within / 0.05)):
        if await asyncio.to_thread(waiting):
            return True
        await asyncio.sleep(0.05)
    return False


# PostgreSQL: a row lock holds the reservation alone (SQLite's write lock holds the whole turn)
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
async def test_a_turn_stopped_while_it_reserves_leaves_nothing_held(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=100_000)
    peer.script(text("never asked"))
    usage = await BudgetUsage.objects.acreate(user=plain_user, day=timezone.localdate())
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:  # another process deciding a reservation of this user's
        try:
            with transaction.atomic():
                BudgetUsage.objects.filter(pk=usage.pk).update(calls=0)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    await asyncio.to_thread(locked.wait, 5)
    cancel = CancellationToken()
    running = asyncio.ensure_future(arun_turn(plain_user, "hello", cancel=cancel))
    assert await waiting_for_a_lock(within=10), "the turn never reached its reservation"

    cancel.cancel()
    await asyncio.sleep(0.2)
    release.set()
    async with asyncio.timeout(10):
        turn = await running
    await asyncio.to_thread(holder.join, 5)

    assert turn.assistant_message.status == "cancelled"
    assert not peer.requests
    for _ in range(100):  # released in the background, once the reservation is made
        if not await BudgetReservation.objects.aexists():
            break
        await asyncio.sleep(0.05)
    assert not await BudgetReservation.objects.aexists()
    await usage.arefresh_from_db()
    assert (usage.spent_tokens, usage.calls) == (0, 1)


@pytest.mark.django_db(transaction=True)
def test_a_refused_reservation_asks_no_model_and_is_audited_once(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=100)
    peer.script(tool_calls(call("ping")), text("never asked"))

    first = run_turn(plain_user, "ping")  # its first call spends 120: the second is refused
    refused = run_turn(plain_user, "again")

    assert first.assistant_message.status == "failed"
    assert [o.operation for o in first.outcomes] == ["ping"]
    for turn in (first, refused):
        (failure,) = [f for f in turn.frames if f["type"] == "RUN_ERROR"]
        assert failure["code"] == "budget_exceeded"
        assert "today's budget of 100 language-model tokens" in failure["message"]
    assert len(peer.requests) == 1
    assert AuditEntry.objects.filter(decision="over_budget", operation="llm_call").count() == 2
    usage = usage_of(plain_user)
    assert (usage.spent_tokens, usage.calls, usage.refusals) == (USAGE["total_tokens"], 1, 2)


# -- a crashed process's reservation -----------------------------------------------------------


def left_behind(user: Any, tokens: int, *, expired: bool) -> BudgetReservation:
    """A reservation as a process killed mid-call leaves it: never settled."""
    usage = BudgetUsage.objects.create(user=user, day=timezone.localdate())
    now = timezone.now()
    return BudgetReservation.objects.create(
        usage=usage,
        tokens=tokens,
        created_at=now - timedelta(hours=1),
        expires_at=now + timedelta(seconds=-1 if expired else 600),
    )


@pytest.mark.django_db(transaction=True)
def test_a_reservation_a_crashed_process_left_lapses(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=1_000)
    stale = left_behind(plain_user, 5_000, expired=True)
    peer.script(text("Hi."))

    turn = run_turn(plain_user, "hello")

    assert turn.assistant_message.status == "complete"
    assert not BudgetReservation.objects.filter(pk=stale.pk).exists()  # cleared on the way
    assert usage_of(plain_user).spent_tokens == USAGE["total_tokens"]


@pytest.mark.django_db(transaction=True)
def test_a_live_reservation_holds_its_tokens(use_llm, plain_user, settings):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=1_000)
    left_behind(plain_user, 1_000, expired=False)
    peer.script(text("never asked"))

    turn = run_turn(plain_user, "hello")

    assert turn.assistant_message.status == "failed"
    assert not peer.requests


@pytest.mark.django_db(transaction=True)
def test_a_reservation_expires_after_the_ttl(use_llm, plain_user, settings):
    use_llm(RESERVATION_TTL=30)
    limit(settings, TOKENS_PER_DAY=1_000)
    usage = BudgetUsage.objects.create(user=plain_user, day=timezone.localdate())

    reservation = usage.reserve(400, limit=1_000, ttl_seconds=30)

    assert reservation is not None
    assert 29 <= (reservation.expires_at - reservation.created_at).total_seconds() <= 30
    assert usage.held(reservation.expires_at - timedelta(seconds=1)) == 400
    assert usage.held(reservation.expires_at) == 0


# -- the reply's cap, as the endpoint names it ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_wanting_max_completion_tokens_is_asked_so(use_llm, plain_user, settings):
    peer = use_llm(RESERVE_REPLY_TOKENS=500)
    limit(settings, TOKENS_PER_DAY=100_000)
    refusal = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    peer.script(error(400, refusal, "invalid_request_error"), text("One."), text("Two."))

    first = run_turn(plain_user, "hello")
    second = run_turn(plain_user, "again")

    assert [first.assistant_message.text, second.assistant_message.text] == ["One.", "Two."]
    capped = [(r.get("max_tokens"), r.get("max_completion_tokens")) for r in peer.requests]
    assert capped == [(500, None), (None, 500), (None, 500)]


# -- concurrency on PostgreSQL -------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_reservations_overspend_by_at_most_one(plain_user):
    usage = BudgetUsage.objects.create(user=plain_user, day=timezone.localdate())
    racers = 12
    barrier = threading.Barrier(racers)

    def reserve() -> bool:
        try:
            mine = BudgetUsage.objects.get(pk=usage.pk)
            barrier.wait(timeout=10)
            return mine.reserve(300, limit=1_000, ttl_seconds=60) is not None
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=racers) as pool:
        granted = list(pool.map(lambda _: reserve(), range(racers)))

    # 0, 300, 600 and 900 held are each below 1,000: four calls, 1,200 held (1,000 + one)
    assert granted.count(True) == 4
    usage.refresh_from_db()
    assert (usage.calls, usage.refusals, usage.held()) == (4, 8, 1_200)


# -- the admin and the settings ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_usage_page_shows_each_budget_reserved_and_spent_today(
    use_llm, superuser, plain_user, settings
):
    peer = use_llm()
    limit(settings, TOKENS_PER_DAY=1_000)
    peer.script(text("Hi."))
    run_turn(plain_user, "hello")
    left = BudgetUsage.objects.get(user=plain_user).reserve(700, limit=1_000, ttl_seconds=60)
    client = Client()
    client.force_login(superuser)

    page = client.get("/admin/assistant/conversation/usage/").content.decode()

    assert 'id="usage-budgets"' in page
    assert left is not None
    reserved = 700 + one_reservation(peer.requests[0])
    row = f"<td>plain</td><td>1,000</td><td>120</td><td>700</td><td>{reserved:,}</td><td>2</td><td>0</td>"
    assert row in page


@pytest.mark.parametrize(
    "llm",
    [{"RESERVE_REPLY_TOKENS": 0}, {"RESERVE_REPLY_TOKENS": "512"}, {"RESERVATION_TTL": -1}],
)
def test_malformed_reservation_settings_are_a_check_error(llm, settings):
    settings.ASSISTANT = {"LLM": llm}

    assert [m.id for m in check_settings()] == ["assistant.E002"]
