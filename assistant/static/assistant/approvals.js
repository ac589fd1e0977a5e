// Approval cards: a pending action (as PendingAction.shown() gives it) as a card to answer.
// Shared by the chat page and the approvals inbox; data only ever reaches the page as text.
(function () {
  "use strict";

  const HOLD_MS = 1000;  // how long a dangerous action's Approve must be held
  const live = new Set();  // cards whose countdown is running

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A preview value as text: strings as they are, nothing as a dash, anything else as JSON.
  function shownValue(value) {
    if (value === null || value === undefined || value === "") return "—";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function table(head, rows) {
    const node = el("table", "preview-table");
    const top = el("tr");
    head.forEach((name) => {
      const th = el("th", "", shownValue(name));
      th.scope = "col";
      top.append(th);
    });
    const thead = el("thead");
    thead.append(top);
    const body = el("tbody");
    rows.forEach((cells) => {
      const tr = el("tr");
      cells.forEach((value) => tr.append(el("td", "", shownValue(value))));
      body.append(tr);
    });
    node.append(thead, body);
    return node;
  }

  // What will change: a before/after table, rows, a list or text (APPROVALS-SPEC's four kinds).
  function preview(data) {
    if (!data || typeof data !== "object") return null;
    const box = el("div", "preview preview-" + data.kind);
    const rows = Array.isArray(data.rows) ? data.rows : [];
    if (data.kind === "changes") {
      // a value that stays as it is is said once, not struck through and written again
      const same = rows.map((row) => shownValue(row.before) === shownValue(row.after));
      const node = table([gettext("Field"), gettext("Before"), gettext("After")], rows.map((row, i) => [row.field, row.before, same[i] ? gettext("unchanged") : row.after]));
      node.querySelectorAll("tbody tr").forEach((tr, i) => {
        if (same[i]) {
          tr.className = "unchanged";
          return;
        }
        tr.cells[1].className = "before";
        tr.cells[2].className = "after";
      });
      box.append(node);
    } else if (data.kind === "rows") {
      box.append(table(Array.isArray(data.columns) ? data.columns : [], rows.map((row) => (Array.isArray(row) ? row : [row]))));
    } else if (data.kind === "list") {
      const list = el("ul");
      (Array.isArray(data.items) ? data.items : []).forEach((item) => list.append(el("li", "", shownValue(item))));
      box.append(list);
    } else if (data.kind === "text") {
      box.append(el("p", "", shownValue(data.text)));
    } else {
      return null;
    }
    return box;
  }

  // "expires in 9 minutes", "expires in 40 seconds" in the page's language; "expired" once the time is up.
  const RELATIVE = new Intl.RelativeTimeFormat(document.documentElement.lang || undefined);
  function remaining(ms) {
    if (ms <= 0) return gettext("expired");
    const [count, unit] = ms >= 3600000 ? [Math.ceil(ms / 3600000), "hour"]
      : ms >= 60000 ? [Math.ceil(ms / 60000), "minute"] : [Math.ceil(ms / 1000), "second"];
    return interpolate(gettext("expires %(when)s"), { when: RELATIVE.format(count, unit) }, true);
  }

  // A decision or job status as people read it ("confirmation_requested": "confirmation requested").
  function decisionLabel(code) {
    const labels = {
      executed: gettext("executed"), failed: gettext("failed"), denied: gettext("denied"),
      invalid: gettext("invalid"), unknown: gettext("unknown"),
      confirmation_requested: gettext("confirmation requested"), clarify: gettext("clarify"),
      confirmed: gettext("confirmed"), cancelled: gettext("cancelled"), expired: gettext("expired"),
      timeout: gettext("timeout"), unavailable: gettext("unavailable"), not_ready: gettext("not ready"),
      over_budget: gettext("over budget"), client_tool: gettext("client tool"), over_limit: gettext("over limit"),
      rejected: gettext("rejected"), done: gettext("done"), running: gettext("running"),
      queued: gettext("queued"), succeeded: gettext("succeeded"),
    };
    const text = String(code || "");
    return Object.prototype.hasOwnProperty.call(labels, text) ? labels[text] : text.replace(/_/g, " ");
  }

  function riskLabel(risk) {
    const labels = { safe: pgettext("risk level", "safe"), guarded: pgettext("risk level", "guarded"), dangerous: pgettext("risk level", "dangerous") };
    return Object.prototype.hasOwnProperty.call(labels, risk) ? labels[risk] : risk;
  }

  function tick() {
    live.forEach((update) => update());
    if (!live.size) {
      clearInterval(tick.timer);
      tick.timer = null;
    }
  }

  function countdown(update) {
    live.add(update);
    update();
    if (!tick.timer) tick.timer = setInterval(tick, 1000);
  }

  // Whether a reason shows something, as the server reads it (storable.shows_something): NFKC,
  // then a letter, digit, punctuation or symbol that is not one of the characters drawn as nothing.
  const INVISIBLE = /[\p{C}\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5\ufe00-\ufe0f\u{e0100}-\u{e01ef}]/gu;
  function showsSomething(text) {
    return /[\p{L}\p{N}\p{P}\p{S}]/u.test(text.normalize("NFKC").replace(INVISIBLE, ""));
  }

  // A card for one action. options.decide(action, {confirm, phrase, reason}) sends the answer and
  // says whether it went out; options.expired(action) hears of a card that timed out and left;
  // options.user is who is looking (a two-person action waits for someone other than its requester).
  function card(action, options) {
    options = options || {};
    const node = el("article", "approval");
    node.dataset.action = action.id;
    if (action.risk) node.dataset.risk = action.risk;
    const summary = el("p", "approval-summary", action.summary || interpolate(gettext("Confirm %s?"), [action.operation]));
    summary.id = "approval-" + action.id + "-summary";
    node.setAttribute("aria-labelledby", summary.id);

    const meta = el("p", "approval-meta");
    if (action.risk) meta.append(el("span", "risk " + action.risk, riskLabel(action.risk)));
    if (action.requested_by) meta.append(el("span", "requester", interpolate(gettext("requested by %s"), [action.requested_by])));
    const expiry = el("time", "expiry");
    expiry.setAttribute("aria-live", "off");  // (the chat's approvals region must not read every tick)
    const expiresAt = Date.parse(action.expires_at);
    if (action.expires_at) expiry.dateTime = action.expires_at;
    meta.append(expiry);
    node.append(summary, meta);
    const shown = preview(action.preview);
    if (shown) node.append(shown);

    const form = el("div", "approval-form");
    let reason = null;
    if (action.policy === "confirm_with_reason") {
      const label = el("label", "reason", gettext("Reason (required)"));
      reason = el("textarea");
      reason.rows = 2;
      reason.required = true;
      label.append(reason);
      form.append(label);
    }
    let phrase = null;
    if (action.confirm === "type" && action.confirm_phrase) {
      const label = el("label", "phrase");
      // "Type <code>phrase</code> to approve", the phrase where the language puts it
      const [before, after] = gettext("Type %s to approve").split("%s");
      const text = el("span", "", before);
      text.append(el("code", "", action.confirm_phrase), after || "");
      label.append(text);
      phrase = el("input");
      phrase.type = "text";
      phrase.autocomplete = "off";
      phrase.spellcheck = false;
      label.append(phrase);
      form.append(label);
    }
    const secondPerson = action.policy === "two_person" && options.user && action.requested_by === options.user;
    const buttons = el("div", "buttons");
    const hold = action.confirm === "hold";
    const approve = el("button", hold ? "primary hold" : "primary", hold ? gettext("Hold to approve") : gettext("Approve"));
    const reject = el("button", "ghost", gettext("Reject"));
    approve.type = reject.type = "button";
    if (hold) approve.setAttribute("aria-description", gettext("press and hold for a second (Space or Enter)"));
    if (secondPerson) {
      approve.hidden = true;
      form.append(el("p", "approval-note", gettext("Waiting for a second person to approve.")));
    }
    buttons.append(approve, reject);
    const result = el("p", "approval-result");
    result.setAttribute("role", "status");
    result.hidden = true;
    node.append(form, buttons, result);

    let answered = false;
    function ready() {
      if (answered) return false;
      if (phrase && phrase.value !== action.confirm_phrase) return false;
      if (reason && !showsSomething(reason.value)) return false;
      return true;
    }
    function refresh() { approve.disabled = !ready(); }

    function answer(confirm) {
      if (answered || (confirm && !ready())) return;
      const given = { confirm: confirm };
      if (confirm && phrase) given.phrase = phrase.value;
      if (confirm && reason) given.reason = reason.value.trim();
      if (options.decide && !options.decide(action, given)) return;
      answered = true;
      node.querySelectorAll("button, input, textarea").forEach((control) => { control.disabled = true; });
      settle(confirm ? gettext("Approving…") : gettext("Rejecting…"), "working");
    }

    function settle(text, decision) {
      result.hidden = false;
      result.textContent = text;
      result.dataset.decision = decision || "";
    }

    // Hold to approve: pointer or Space/Enter held for HOLD_MS, let go earlier and nothing happens.
    let holding = null;
    function startHold() {
      if (holding || !ready()) return;
      approve.classList.add("holding");
      holding = setTimeout(() => { holding = null; approve.classList.remove("holding"); answer(true); }, HOLD_MS);
    }
    function stopHold() {
      if (!holding) return;
      clearTimeout(holding);
      holding = null;
      approve.classList.remove("holding");
    }
    if (hold) {
      approve.addEventListener("pointerdown", (event) => { event.preventDefault(); startHold(); });
      ["pointerup", "pointerleave", "pointercancel"].forEach((name) => approve.addEventListener(name, stopHold));
      approve.addEventListener("keydown", (event) => {
        if (event.key !== " " && event.key !== "Enter") return;
        event.preventDefault();
        if (!event.repeat) startHold();
      });
      approve.addEventListener("keyup", (event) => {
        if (event.key === " " || event.key === "Enter") { event.preventDefault(); stopHold(); }
      });
      approve.addEventListener("blur", stopHold);
      approve.addEventListener("contextmenu", (event) => event.preventDefault());  // a long touch
    } else {
      approve.onclick = () => answer(true);
    }
    reject.onclick = () => answer(false);
    [phrase, reason].forEach((input) => { if (input) input.addEventListener("input", refresh); });
    refresh();

    let gone = false;
    function update() {
      if (!node.isConnected && node.dataset.mounted) { live.delete(update); return; }  // taken off
      const left = expiresAt - Date.now();
      const text = remaining(left);
      if (expiry.textContent !== text) expiry.textContent = text;
      if (left <= 0 && !answered) {
        gone = true;
        live.delete(update);
        node.remove();
        if (options.expired) options.expired(action);
      }
    }
    if (!isNaN(expiresAt)) countdown(update);

    node.approval = { settle: settle, action: action, gone: () => gone };
    return node;
  }

  // Put a card on the page, unless it expired already (its countdown takes it off at expiry).
  function mount(parent, node) {
    if (node.approval.gone()) return false;
    node.dataset.mounted = "1";
    parent.append(node);
    return true;
  }

  // The websocket frame answering an action: confirm (with the phrase and reason given) or reject.
  function frame(action, answer) {
    const sent = { type: answer.confirm ? "confirm" : "reject", action: action.id };
    if (answer.phrase !== undefined) sent.phrase = answer.phrase;
    if (answer.reason !== undefined) sent.reason = answer.reason;
    return sent;
  }

  window.AssistantApprovals = {
    card: card, mount: mount, frame: frame, preview: preview, remaining: remaining, decisionLabel: decisionLabel,
  };
})();
