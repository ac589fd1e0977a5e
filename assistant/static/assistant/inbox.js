// The approvals inbox: every waiting action as a card (approvals.js), answered over the chat
// websocket, so the decision runs, and is stored, in the conversation that asked for it.
(function () {
  "use strict";

  const root = document.getElementById("inbox");
  const status = document.getElementById("inbox-status");
  const data = document.getElementById("approvals-data");
  const actions = data ? JSON.parse(data.textContent) : [];
  const answered = [];  // ids answered here, oldest first, waiting for their outcome
  let socket = null;
  let retry = 0;

  function say(text) {
    status.textContent = text;
    status.hidden = !text;
  }

  function item(id) { return document.getElementById("action-" + id); }

  function leftOver() {
    const list = document.getElementById("inbox-items");
    const empty = !list || !list.querySelector(".inbox-item");
    document.getElementById("inbox-empty").hidden = !empty;
  }

  function decide(action, answer) {
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      say(gettext("Not connected yet; try again in a moment."));
      return false;
    }
    socket.send(JSON.stringify(AssistantApprovals.frame(action, answer)));
    answered.push(action.id);
    return true;
  }

  function settle(id, text, decision) {
    const node = item(id);
    const card = node && node.querySelector(".approval");
    if (card) card.approval.settle(text, decision);
    const at = answered.indexOf(id);
    if (at >= 0) answered.splice(at, 1);
  }

  function handle(frame) {
    const value = frame.value || {};
    if (frame.type !== "CUSTOM") return;
    if (frame.name === "assistant.outcome" && value.pending_action && answered.includes(value.pending_action)) {
      const decision = String(value.decision || "");
      settle(value.pending_action, AssistantApprovals.decisionLabel(decision) + (value.text ? ": " + value.text : ""), decision);
    } else if (frame.name === "assistant.error") {
      // a refused answer names no action: it is the oldest one still waiting for its outcome
      if (answered.length) settle(answered[0], value.message || gettext("Something went wrong."), "error");
      else say(value.message || gettext("Something went wrong."));
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + root.dataset.websocket, ["assistant.bursts"]);
    socket.onopen = () => { retry = 0; say(""); };
    socket.onmessage = (message) => {
      const data = JSON.parse(message.data);
      for (const frame of Array.isArray(data) ? data : [data]) handle(frame);
    };
    socket.onclose = (event) => {
      if (event.code === 4401) { location.reload(); return; }
      say(gettext("Reconnecting…"));
      setTimeout(connect, Math.min(1000 * 2 ** retry++, 10000));
    };
  }

  actions.forEach((action) => {
    const node = item(action.id);
    if (!node) return;
    const card = AssistantApprovals.card(action, {
      user: root.dataset.user,
      decide: decide,
      expired: () => { node.remove(); leftOver(); },
    });
    if (!AssistantApprovals.mount(node, card)) node.remove();
  });
  leftOver();
  const focused = root.dataset.focused && item(root.dataset.focused);
  if (focused) focused.scrollIntoView({ block: "center" });
  connect();
})();
