// The chat page: one websocket speaking AG-UI events, replay after reconnect, approvals, stop.
(function () {
  "use strict";

  const root = document.getElementById("assistant");
  const render = window.assistantRender;  // render.js: Markdown replies, data tables
  const $ = (id) => document.getElementById(id);
  const ui = {
    messages: $("messages"), empty: $("empty"), approvals: $("approvals"), notice: $("notice"),
    input: $("input"), send: $("send"), stop: $("stop"), status: $("status"), title: $("title"),
    conversations: $("conversations"), sidebar: $("sidebar"),
    elsewhere: $("approvals-elsewhere"),
  };
  const state = {
    socket: null,
    conversation: new URLSearchParams(location.search).get("c"),
    awaitingNew: false,
    lastSeq: {},          // conversation id -> last event number applied
    running: null,        // run id of the run in progress on the current conversation
    retry: 0,
    unanswered: 0,        // connects since the page loaded, none of which ever opened
    pending: new Map(),   // action id -> approval element
    sending: null,        // the bubble of a message sent but not yet echoed by the server
    waiting: {},          // conversation id ("" for none) -> how many approvals wait there
    approvalsTold: false, // this resume brought its conversation's approvals
    inbox: [],            // frames received, not yet handled (a burst waits after a reply's start)
    paused: false,
  };

  // The names people read for the tools (the server's, from each tool's declaration); a tool not
  // in this user's catalog any more is named the same way from its operation.
  const titles = JSON.parse(($("assistant-tool-titles") || {}).textContent || "{}");
  function toolTitle(operation) {
    if (!operation) return "";
    if (Object.prototype.hasOwnProperty.call(titles, operation)) return titles[operation];
    const words = operation.replace(/[_.]/g, " ").trim();
    return words.charAt(0).toUpperCase() + words.slice(1);
  }

  // Times and dates in the page's language (its <html lang>, the server's active language).
  const LOCALE = document.documentElement.lang || undefined;
  const RELATIVE = new Intl.RelativeTimeFormat(LOCALE, { numeric: "auto" });

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ---- connection ---------------------------------------------------------------------------

  const NOT_SERVED_AFTER = 3;  // failed connects, none ever open, before the page says so

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    // "assistant.bursts": the server sends a run's events a burst at a time, as JSON arrays
    const socket = new WebSocket(scheme + location.host + root.dataset.websocket, ["assistant.bursts"]);
    state.socket = socket;
    setStatus("connecting", gettext("connecting…"));
    socket.onopen = () => {
      state.retry = 0;
      if (state.unanswered >= NOT_SERVED_AFTER) ui.notice.hidden = true;  // it is served after all
      state.unanswered = -1;  // it was served: a later outage is a reconnect, not a misconfiguration
      setStatus("open", gettext("connected"));
      if (state.conversation) resume(state.conversation);
    };
    socket.onmessage = (message) => {
      const data = JSON.parse(message.data);
      state.inbox.push(...(Array.isArray(data) ? data : [data]));
      if (!state.paused) play();
    };
    socket.onclose = (event) => {
      play(true);  // what this socket sent shows before its closing is judged
      if (event.code === 4401) {
        setStatus("closed", gettext("signed out"));
        location.reload();
        return;
      }
      // a deactivated account: the server said so (assistant.error); retrying cannot help
      if (event.code === 4403) return setStatus("closed", gettext("account deactivated"));
      unconfirmed();
      if (event.code === 4008) showNotice(gettext("The connection fell behind and was closed; reconnecting."), true);
      // (an error the server sent before closing stays on screen)
      if (event.code === 1011 && ui.notice.hidden) showNotice(gettext("The server closed the connection after an error; reconnecting."), true);
      if (state.unanswered >= 0 && ++state.unanswered >= NOT_SERVED_AFTER) {
        // never a handshake since the page loaded: nothing serves the websocket here (WSGI
        // runserver, a fresh project's plain asgi.py)
        showNotice(interpolate(gettext("The chat's websocket is not served at %(path)s: is an ASGI server (daphne) running this project?"),
          { path: root.dataset.websocket }, true), true);
        setStatus("closed", gettext("not served"));
      } else {
        setStatus("closed", gettext("reconnecting…"));
      }
      const delay = Math.min(1000 * 2 ** state.retry++, 10000);
      setTimeout(connect, delay);
    };
  }

  function send(frame) {
    if (state.socket && state.socket.readyState === WebSocket.OPEN) {
      state.socket.send(JSON.stringify(frame));
      return true;
    }
    showNotice(gettext("Not connected yet; try again in a moment."), true);
    return false;
  }

  function resume(conversation) {
    send({ type: "resume", conversation: conversation, after: state.lastSeq[conversation] || 0 });
  }

  function setStatus(kind, text) {
    ui.status.dataset.state = kind;
    ui.status.textContent = text;
  }

  // ---- events -------------------------------------------------------------------------------

  // Frames in order, each on its own: one that fails to render costs only itself. A burst may
  // hold a whole reply, and a screen reader reads it only if its bubble is a live region before
  // the text comes and still is once the text is painted: so the rest of a burst waits a moment
  // after a reply's start, and again, its text painted, before its end. ``drain`` waits for none.
  function play(drain) {
    state.paused = false;
    let handled = 0;
    while (state.inbox.length) {
      const frame = state.inbox[0];
      if (!drain && handled && endsReply(frame)) {
        render.flush();
        return pause();
      }
      state.inbox.shift();
      handled++;
      try {
        handle(frame);
      } catch (error) {
        console.error("Showing an event failed", frame.type, error);
      }
      if (!drain && startsReply(frame) && state.inbox.length) return pause();
    }
  }

  function pause() {
    state.paused = true;
    setTimeout(play, 50);
  }

  function startsReply(frame) {
    return frame.type === "TEXT_MESSAGE_START" && frame.role === "assistant" && frame.threadId === state.conversation;
  }

  function endsReply(frame) {
    if (frame.type !== "TEXT_MESSAGE_END" || frame.threadId !== state.conversation) return false;
    const node = document.getElementById("m-" + frame.messageId);
    return !!node && node.classList.contains("assistant") && !node.dataset.complete;
  }

  function handle(frame) {
    // An error is shown whatever conversation it names (a refused first message names none yet).
    if (frame.type === "CUSTOM" && frame.name === "assistant.error") return showError(frame.value || {});
    if (frame.type === "CUSTOM" && !frame.threadId) return handleGlobal(frame);
    if (state.awaitingNew && frame.type === "RUN_STARTED") {
      state.awaitingNew = false;
      openConversation(frame.threadId, { keep: true });
    }
    if (frame.threadId !== state.conversation) return;
    if (frame.type === "MESSAGES_SNAPSHOT") return renderSnapshot(frame);
    if (frame.seq > 0) {
      if (frame.seq <= (state.lastSeq[frame.threadId] || 0)) return;
      state.lastSeq[frame.threadId] = frame.seq;
    }
    const handler = handlers[frame.type];
    if (handler) handler(frame);
  }

  const handlers = {
    RUN_STARTED(frame) { stored(); setRunning(frame.runId); },
    TEXT_MESSAGE_START(frame) {
      if (frame.role === "user") sent();
      announce(bubble(frame.messageId, frame.role || "assistant"), frame.role !== "user");
      stamp(bubble(frame.messageId), frame.timestamp);
    },
    TEXT_MESSAGE_CONTENT(frame) {
      const node = bubble(frame.messageId, "assistant");
      if (node.dataset.complete) return;
      if (node.classList.contains("assistant")) return render.append(node.querySelector(".text"), frame.delta);
      node.querySelector(".text").textContent += frame.delta;
      scrollDown();
    },
    TEXT_MESSAGE_END(frame) {
      const node = bubble(frame.messageId, "assistant");
      announce(node, false);
      node.dataset.complete = "1";
    },
    TOOL_CALL_START(frame) { toolCard(frame.toolCallId, frame.toolCallName, frame.parentMessageId); },
    TOOL_CALL_ARGS(frame) {
      const card = toolCard(frame.toolCallId);
      card.querySelector(".args").textContent += frame.delta;
    },
    TOOL_CALL_RESULT(frame) {
      const card = toolCard(frame.toolCallId);
      card.querySelector(".result").textContent = frame.content;
      render.recheck(card.closest(".bubble"));
    },
    RUN_FINISHED(frame) {
      const outcome = frame.outcome || {};
      if (outcome.type === "interrupt") outcome.interrupts.forEach((interrupt) => addApproval(fromInterrupt(interrupt)));
      if (outcome.type === "cancelled") {
        if (frame.result) markMessage(frame.result.message, gettext("stopped"));
        settleCards("cancelled");
      }
      setRunning(null);
      loadConversations();
    },
    RUN_ERROR(frame) {
      notSent();
      showNotice(frame.message, true);
      settleCards("failed");
      setRunning(null);
      loadConversations();
    },
    CUSTOM(frame) {
      const value = frame.value || {};
      if (frame.name === "assistant.outcome") {
        const card = toolCard(value.tool_call_id, value.operation);
        const badge = card.querySelector(".badge");
        badge.textContent = AssistantApprovals.decisionLabel(value.decision);
        badge.className = "badge " + value.decision;
        render.showData(card, value.data, value.data_omitted);
        if (value.decision !== "confirmation_requested") removeApproval(value.pending_action);
      } else if (frame.name === "assistant.notice") {
        showNotice(value.message, false);
      } else if (frame.name === "assistant.queued") {
        showNotice(gettext("Your message waits for a free slot on the server; it will be answered shortly."), false);
      } else if (frame.name === "assistant.snapshot" && value.more) {
        const note = el("p", "older", interpolate(ngettext("Only the last %s message is shown.",
          "Only the last %s messages are shown.", value.messages), [value.messages]));
        note.id = "older";
        ui.messages.prepend(note);
      } else if (frame.name === "assistant.pending_actions") {
        showApprovals(value);
      } else if (frame.name === "assistant.resumed") {
        if (!state.approvalsTold) showApprovals({ actions: [], waiting: {} });  // none waits anywhere
        state.approvalsTold = false;
        state.lastSeq[frame.threadId] = value.last;
      } else if (frame.name === "assistant.job") {
        jobCard(value);
      }
    },
  };

  function handleGlobal(frame) {
    const value = frame.value || {};
    if (frame.name === "assistant.pending_actions") setWaiting(value.waiting);
  }

  // Errors that mean the message being sent was refused before it was stored.
  const NOT_STORED = new Set([
    "message_not_stored", "database_unavailable", "throttled", "invalid_message", "frame_too_large", "bad_json",
    "bad_frame", "missing_field", "unknown_type", "not_found", "channel_layer_missing",
    "channel_layer_unavailable",
  ]);

  function showError(value) {
    if (NOT_STORED.has(value.code)) notSent();
    showNotice(value.message || gettext("Something went wrong."), true);
  }

  // The run of the message being sent has started: the server has stored it.
  function stored() {
    const node = state.sending;
    if (!node || node.dataset.stored) return;
    node.dataset.stored = "1";
    node.querySelector(".state").textContent = gettext("saved");
  }

  // The connection dropped before the server said anything: the message may or may not be stored.
  function unconfirmed() {
    const node = state.sending;
    if (!node || node.dataset.stored) return;
    state.sending = null;
    node.id = "";
    node.classList.replace("sending", "failed");
    node.querySelector(".state").textContent = gettext("connection lost: it may not have been sent (reload to check)");
  }

  // ---- the message being sent: shown as sending, then as the server's echo or as not sent ----

  function sending(text) {
    sent();
    ui.empty.hidden = true;
    const node = el("div", "bubble user sending");
    node.id = "m-sending";
    node.append(el("div", "tools"), el("div", "text", text), el("span", "state", gettext("sending…")));
    ui.messages.append(node);
    state.sending = node;
    scrollDown();
  }

  function sent() {
    if (state.sending) state.sending.remove();
    state.sending = null;
  }

  // The server refused or could not store it: it stays on the page as not sent, text back in the box.
  function notSent() {
    const node = state.sending;
    if (!node) return;
    state.sending = null;
    state.awaitingNew = false;
    node.id = "";
    node.classList.replace("sending", "failed");
    node.querySelector(".state").textContent = "not sent";
    if (!ui.input.value) ui.input.value = node.querySelector(".text").textContent;
  }

  // ---- rendering ----------------------------------------------------------------------------

  function bubble(id, role) {
    let node = document.getElementById("m-" + id);
    if (!node) {
      ui.empty.hidden = true;
      node = el("div", "bubble " + role);
      node.id = "m-" + id;
      node.append(el("div", "tools"), el("div", "text"));
      ui.messages.append(node);
      scrollDown();
    }
    return node;
  }

  // The bubble being streamed is the page's one live region: screen readers read the reply as it comes.
  function announce(node, on) {
    node.classList.toggle("streaming", on);
    if (on) node.setAttribute("aria-live", "polite");
    else node.removeAttribute("aria-live");
  }

  function toolCard(id, name, parentId) {
    let card = document.getElementById("t-" + id);
    if (!card) {
      const host = bubble(parentId || "tools-" + id, "assistant");
      card = el("details", "tool");
      card.id = "t-" + id;
      const summary = el("summary");
      const label = el("span", "tool-name", toolTitle(name) || gettext("Tool"));
      if (name) {
        card.dataset.operation = name;
        label.title = name;  // the operation's own name, for whoever needs it
      }
      summary.append(el("span", "", "⚙"), label, el("span", "badge running", AssistantApprovals.decisionLabel("running")));
      card.append(summary, el("pre", "args"), el("pre", "result"));
      host.querySelector(".tools").append(card);
      scrollDown();
    }
    return card;
  }

  // Cards a finished run left without a decision (its events were cut short) get one.
  function settleCards(decision) {
    ui.messages.querySelectorAll(".badge.running").forEach((badge) => {
      badge.textContent = AssistantApprovals.decisionLabel(decision);
      badge.className = "badge " + decision;
    });
  }

  // A background job: a progress bar, a Cancel button while it runs, its outcome when done.
  function jobCard(job) {
    let card = document.getElementById("j-" + job.id);
    if (!card) {
      ui.empty.hidden = true;
      card = el("div", "job");
      card.id = "j-" + job.id;
      const head = el("div", "job-head");
      const cancel = el("button", "ghost", gettext("Cancel"));
      cancel.type = "button";
      cancel.onclick = () => { if (send({ type: "cancel_job", job: job.id })) cancel.disabled = true; };
      if (job.operation) card.dataset.operation = job.operation;
      head.append(el("span", "job-title", job.title || toolTitle(job.operation) || gettext("Background job")), el("span", "badge", AssistantApprovals.decisionLabel(job.status)), cancel);
      const bar = el("progress");
      bar.max = 100;
      card.append(head, bar, el("div", "job-message"));
      ui.messages.append(card);
    }
    const finished = ["succeeded", "failed", "cancelled"].includes(job.status);
    const badge = card.querySelector(".badge");
    badge.textContent = AssistantApprovals.decisionLabel(job.status);
    badge.className = "badge " + ({ succeeded: "executed", failed: "failed", cancelled: "cancelled" }[job.status] || "running");
    if (job.status === "succeeded" && job.failures > 0) withFailures(badge, job.failures);
    card.querySelector("progress").value = job.progress;
    card.querySelector(".job-message").textContent = finished ? (job.error || job.result || "") : (job.message || "");
    card.querySelector("button").hidden = finished;
    scrollDown();
  }

  // A job that ran to its end but found failures (a validation run's): not a green success.
  function withFailures(badge, count) {
    badge.textContent = interpolate(ngettext("finished with %s failure", "finished with %s failures", count), [count]);
    badge.className = "badge with_failures";
  }

  function markMessage(id, label) {
    const node = document.getElementById("m-" + id);
    if (node && !node.querySelector(".state")) node.append(el("span", "state", label));
  }

  function renderSnapshot(frame) {
    ui.messages.querySelectorAll(".bubble, #older").forEach((node) => node.remove());
    state.lastSeq[frame.threadId] = 0;
    frame.messages.forEach((message) => {
      const node = bubble(message.id, message.role);
      const meta = message.metadata || {};
      (message.toolCalls || []).forEach((call) => {
        const card = toolCard(call.id, call.function.name, message.id);
        const decision = (meta.decisions || {})[call.id] || "done";
        card.querySelector(".args").textContent = call.function.arguments;
        card.querySelector(".badge").textContent = AssistantApprovals.decisionLabel(decision);
        card.querySelector(".badge").className = "badge " + decision;
        const result = (meta.results || {})[call.id] || {};
        card.querySelector(".result").textContent = result.text || "";
        render.showData(card, result.data, result.data_omitted);
      });
      if (message.role === "assistant") render.set(node.querySelector(".text"), message.content);
      else node.querySelector(".text").textContent = message.content || "";
      stamp(node, meta.createdAt);
      node.dataset.complete = "1";
      if (meta.status === "cancelled") markMessage(message.id, gettext("stopped"));
      if (meta.status === "failed" || meta.status === "interrupted") node.classList.add("failed");
    });
    ui.empty.hidden = frame.messages.length > 0;
    render.flush();
    scrollDown();
  }

  // ---- approvals: the current conversation's cards (approvals.js), a count of the others' ----

  function fromInterrupt(interrupt) {
    return Object.assign({}, interrupt.metadata, {
      id: interrupt.id, summary: interrupt.message, expires_at: interrupt.expiresAt,
    });
  }

  function addApproval(action) {
    if (state.pending.has(action.id)) return;
    const card = AssistantApprovals.card(action, {
      user: root.dataset.user,
      decide: decide,
      expired: () => { state.pending.delete(action.id); countHere(); },
    });
    if (AssistantApprovals.mount(ui.approvals, card)) state.pending.set(action.id, card);
    countHere();
  }

  // The count of this conversation follows its cards (it is shown once another one is open).
  function countHere() {
    if (state.conversation) state.waiting[state.conversation] = state.pending.size;
    showElsewhere();
  }

  // The server's list for this conversation replaces the cards shown (others answered them).
  function showApprovals(value) {
    state.approvalsTold = true;
    const waiting = new Set(value.actions.map((action) => action.id));
    Array.from(state.pending.keys()).forEach((id) => { if (!waiting.has(id)) removeApproval(id); });
    value.actions.forEach(addApproval);
    setWaiting(value.waiting);
  }

  function setWaiting(waiting) {
    state.waiting = waiting || {};
    showElsewhere();
  }

  function showElsewhere() {
    let count = 0;
    Object.keys(state.waiting).forEach((id) => { if (id !== state.conversation) count += state.waiting[id]; });
    const link = ui.elsewhere.querySelector("a");  // (the status region stays, so changes are read out)
    link.hidden = !count;
    link.textContent = count ? interpolate(ngettext("%s approval waiting", "%s approvals waiting", count), [count]) : "";
  }

  function decide(action, answer) {
    if (!send(AssistantApprovals.frame(action, answer))) return false;
    removeApproval(action.id);
    return true;
  }

  function removeApproval(actionId) {
    const card = actionId && state.pending.get(actionId);
    if (card) {
      card.remove();
      state.pending.delete(actionId);
      countHere();
    }
  }

  function setRunning(runId) {
    state.running = runId;
    ui.stop.hidden = !runId;
    ui.send.hidden = !!runId;
    root.classList.toggle("running", !!runId);
  }

  function showNotice(text, isError) {
    ui.notice.textContent = text;
    ui.notice.classList.toggle("error", !!isError);
    ui.notice.hidden = false;
    clearTimeout(showNotice.timer);
    // an error stays until the next notice; information fades
    if (!isError) showNotice.timer = setTimeout(() => { ui.notice.hidden = true; }, 8000);
  }

  function scrollDown() { ui.messages.scrollTop = ui.messages.scrollHeight; }

  // ---- conversations ------------------------------------------------------------------------

  function openConversation(id, options) {
    state.conversation = id;
    const url = new URL(location.href);
    if (id) url.searchParams.set("c", id); else url.searchParams.delete("c");
    history.replaceState(null, "", url);
    if (!(options && options.keep)) {
      state.sending = null;
      ui.messages.querySelectorAll(".bubble, #older").forEach((node) => node.remove());
      ui.empty.hidden = false;
      setRunning(null);
      state.pending.forEach((card, actionId) => removeApproval(actionId));
      if (id) delete state.lastSeq[id];  // its messages were cleared: ask for them all again
      if (id) resume(id);
    }
    highlight();
    showElsewhere();
  }

  function loadConversations() {
    const url = new URL(root.dataset.conversations, location.href);
    const search = $("search-input").value.trim();
    if (search) url.searchParams.set("search", search);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((response) => (response.ok ? response.json() : { results: [] }))
      .then((page) => {
        if (search !== $("search-input").value.trim()) return;  // an answer to an older search
        ui.conversations.replaceChildren(...page.results.map((conversation) => {
          const item = el("div", "conversation");
          const link = el("a", "", conversation.title || gettext("Untitled"));
          link.href = "?c=" + conversation.id;
          link.dataset.id = conversation.id;
          link.onclick = (event) => {
            event.preventDefault();
            closeSidebar();
            openConversation(conversation.id);
          };
          item.append(link, timeElement(conversation.updated_at));
          return item;
        }));
        $("no-match").hidden = !search || page.results.length > 0;
        highlight();
      })
      .catch(() => {});
  }

  function highlight() {
    ui.conversations.querySelectorAll("a").forEach((link) => {
      link.setAttribute("aria-current", String(link.dataset.id === state.conversation));
      if (link.dataset.id === state.conversation) ui.title.textContent = link.textContent;
    });
    if (!state.conversation) ui.title.textContent = gettext("New conversation");
    titleTab();
  }

  // ---- conversation basics: timestamps, the tab's title, rename, delete, search -------------

  // A time as people read it in a list, in the page's language (Intl): "now", "5 minutes ago",
  // "14:05" today, else a date;
  // the exact local time is in its title (a tooltip), the ISO instant in its datetime.
  function timeElement(when) {
    const date = when === undefined || when === null ? null : new Date(when);
    const node = el("time");
    if (!date || isNaN(date)) return node;
    node.dateTime = date.toISOString();
    node.title = new Intl.DateTimeFormat(LOCALE, { dateStyle: "medium", timeStyle: "medium" }).format(date);
    relabel(node);
    return node;
  }

  function relabel(node) {
    const date = new Date(node.dateTime);
    const seconds = (Date.now() - date.getTime()) / 1000;
    const now = new Date();
    if (seconds < 60) node.textContent = RELATIVE.format(0, "second");
    else if (seconds < 3600) node.textContent = RELATIVE.format(-Math.floor(seconds / 60), "minute");
    else if (now.toDateString() === date.toDateString()) node.textContent = new Intl.DateTimeFormat(LOCALE, { hour: "2-digit", minute: "2-digit" }).format(date);
    else node.textContent = new Intl.DateTimeFormat(LOCALE, { day: "numeric", month: "short", year: date.getFullYear() === now.getFullYear() ? undefined : "numeric" }).format(date);
  }

  // "now" does not stay true: the labels follow the clock.
  setInterval(() => root.querySelectorAll("time[datetime]").forEach(relabel), 30000);

  // A message's time, once (replays and streaming deltas do not move it).
  function stamp(node, when) {
    if (!node || node.querySelector(":scope > time")) return;
    const time = timeElement(when === undefined || when === null ? Date.now() : when);
    time.className = "when";
    node.append(time);
  }

  function titleTab() {
    const named = state.conversation && ui.title.textContent;
    document.title = named ? interpolate(gettext("%s · Assistant"), [ui.title.textContent]) : gettext("Assistant");
    $("conversation-actions").hidden = !state.conversation;
    if (!state.conversation) $("rename-form").hidden = true;
  }

  function conversationRequest(method, body) {
    return fetch(root.dataset.conversations + state.conversation + "/", {
      method: method,
      credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrfToken },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then((response) => {
      if (response.ok) return response;
      return response.json().catch(() => ({})).then((error) => {
        throw new Error(error.detail || interpolate(gettext("The server refused (%s)."), [response.status]));
      });
    });
  }

  function renaming(on) {
    $("rename-form").hidden = !on;
    ui.title.hidden = on;
    $("conversation-actions").hidden = on || !state.conversation;
    if (on) {
      $("rename-input").value = ui.title.textContent;
      $("rename-input").select();
    } else if (state.conversation) {
      $("rename").focus();
    }
  }

  $("rename").addEventListener("click", () => renaming(true));
  $("rename-cancel").addEventListener("click", () => renaming(false));
  $("rename-input").addEventListener("keydown", (event) => { if (event.key === "Escape") renaming(false); });
  $("rename-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const title = $("rename-input").value.trim();
    if (!title) return;
    conversationRequest("PATCH", { title: title })
      .then((response) => response.json())
      .then((conversation) => {
        ui.title.textContent = conversation.title;
        renaming(false);
        loadConversations();
      })
      .catch((error) => showNotice(error.message, true));
  });
  $("delete").addEventListener("click", () => {
    if (!state.conversation || !confirm(interpolate(gettext("Delete “%s” and its messages? The audit trail keeps its record of the tool calls; waiting approvals are cancelled."), [ui.title.textContent]))) return;
    conversationRequest("DELETE")
      .then(() => {
        openConversation(null);
        loadConversations();
        showNotice(gettext("Conversation deleted."), false);
      })
      .catch((error) => showNotice(error.message, true));
  });
  $("search").addEventListener("submit", (event) => { event.preventDefault(); loadConversations(); });
  $("search-input").addEventListener("input", () => {
    clearTimeout(loadConversations.timer);
    loadConversations.timer = setTimeout(loadConversations, 250);
  });

  // ---- composer -----------------------------------------------------------------------------

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = ui.input.value.trim();
    if (!text || state.running) return;
    const frame = { type: "message", text: text };
    if (state.conversation) frame.conversation = state.conversation;
    else state.awaitingNew = true;
    if (send(frame)) {
      ui.input.value = "";
      sending(text);
    }
  });
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  ui.stop.addEventListener("click", () => send({ type: "cancel", conversation: state.conversation, run: state.running }));
  $("new-conversation").addEventListener("click", () => {
    closeSidebar();
    openConversation(null);
    ui.input.focus();
  });
  $("toggle-sidebar").addEventListener("click", () => ui.sidebar.classList.toggle("open"));
  $("backdrop").addEventListener("click", closeSidebar);
  document.addEventListener("keydown", shortcut);

  function closeSidebar() { ui.sidebar.classList.remove("open"); }

  // Esc closes the open sidebar, else stops the running turn; Ctrl/Cmd+Shift+O starts a new conversation.
  function shortcut(event) {
    if (event.key === "Escape") {
      if (ui.sidebar.classList.contains("open")) closeSidebar();
      else if (state.running) ui.stop.click();
    } else if ((event.ctrlKey || event.metaKey) && event.shiftKey && event.key.toLowerCase() === "o") {
      event.preventDefault();
      $("new-conversation").click();
    }
  }

  loadConversations();
  connect();
})();
