// The chat page's "Access tokens" dialog: list, create (the secret shown once) and revoke.
(function () {
  "use strict";

  const root = document.getElementById("assistant");
  const $ = (id) => document.getElementById(id);
  const dialog = $("tokens-dialog");
  const opener = $("open-tokens");
  if (!root || !dialog || !opener) return;
  const endpoint = root.dataset.tokens;
  const LOCALE = document.documentElement.lang || undefined;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function request(url, method, body) {
    return fetch(url, {
      method: method || "GET",
      credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrfToken },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then((response) => response.json().catch(() => ({})).then((answer) => {
      if (response.ok) return answer;
      const errors = answer.errors ? Object.entries(answer.errors).map(([field, problem]) => field + ": " + [].concat(problem).join(" ")) : [];
      throw new Error([answer.detail || interpolate(gettext("The server refused (%s)."), [response.status])].concat(errors).join(" "));
    }));
  }

  function showError(message) {
    $("tokens-error").textContent = message || "";
    $("tokens-error").hidden = !message;
  }

  function when(value, none) {
    if (!value) return el("span", "muted", none);
    const date = new Date(value);
    const node = el("time", "", new Intl.DateTimeFormat(LOCALE, { day: "numeric", month: "short", year: "numeric" }).format(date));
    node.dateTime = date.toISOString();
    node.title = new Intl.DateTimeFormat(LOCALE, { dateStyle: "medium", timeStyle: "medium" }).format(date);
    return node;
  }

  function ceiling(token) {
    const parts = [];
    if (token.max_risk) parts.push(interpolate(gettext("up to %s"), [token.max_risk]));
    if (token.operations && token.operations.length) parts.push(token.operations.join(", "));
    return parts.join("; ") || gettext("none");
  }

  function state(token) {
    if (token.revoked_at) return "revoked";
    return token.usable ? "usable" : "expired";
  }

  function stateLabel(token) {
    return { revoked: gettext("revoked"), usable: gettext("usable"), expired: gettext("expired") }[state(token)];
  }

  function row(token) {
    const tr = el("tr");
    tr.dataset.id = token.id;
    const name = el("th", "", token.name);
    name.scope = "row";
    const prefix = el("td");
    prefix.append(el("code", "", token.key_prefix + "…"));
    const status = el("td");
    status.append(el("span", "badge " + state(token), stateLabel(token)));
    const cells = [name, prefix, el("td", "", ceiling(token))];
    for (const [field, none] of [["created_at", ""], ["expires_at", gettext("never")], ["last_used_at", gettext("never")]]) {
      const cell = el("td");
      cell.append(when(token[field], none));
      cells.push(cell);
    }
    cells.push(status);
    const action = el("td");
    if (!token.revoked_at) {
      const revoke = el("button", "ghost revoke", gettext("Revoke"));
      revoke.type = "button";
      revoke.setAttribute("aria-label", interpolate(gettext("Revoke %s"), [token.name]));
      revoke.addEventListener("click", () => revokeToken(token, revoke));
      action.append(revoke);
    }
    cells.push(action);
    tr.append(...cells);
    return tr;
  }

  function load() {
    return request(endpoint + "?page_size=200")
      .then((page) => {
        $("token-rows").replaceChildren(...page.results.map(row));
        $("no-tokens").hidden = page.results.length > 0;
        $("token-table").hidden = page.results.length === 0;
      })
      .catch((error) => showError(error.message));
  }

  function revokeToken(token, button) {
    if (!confirm(interpolate(gettext("Revoke “%s”? Every client using it is refused from now on."), [token.name]))) return;
    button.disabled = true;
    request(endpoint + token.id + "/", "DELETE")
      .then(() => load())
      .then(() => {
        showError("");
        $("token-name").focus();
      })
      .catch((error) => {
        button.disabled = false;
        showError(error.message);
      });
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { name: $("token-name").value.trim() };
    const days = $("token-days").value.trim();
    if (days) body.expires_in_days = Number(days);
    if ($("token-risk").value) body.max_risk = $("token-risk").value;
    $("create-token").disabled = true;
    request(endpoint, "POST", body)
      .then((created) => {
        showError("");
        $("token-form").reset();
        $("token-secret").value = created.token;
        $("token-copied").textContent = "";
        $("token-created").hidden = false;
        $("token-secret").focus();
        $("token-secret").select();
        return load();
      })
      .catch((error) => showError(error.message))
      .finally(() => { $("create-token").disabled = false; });
  });

  $("copy-token").addEventListener("click", () => {
    const secret = $("token-secret");
    const copied = () => { $("token-copied").textContent = gettext("Copied."); };
    const fallback = () => {
      secret.select();
      try {
        if (document.execCommand("copy")) return copied();
      } catch (error) { /* below */ }
      $("token-copied").textContent = gettext("Select the token and copy it yourself.");
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(secret.value).then(copied, fallback);
    else fallback();
  });

  function forget() {
    // the secret leaves the page when the dialog closes: it is shown once
    $("token-secret").value = "";
    $("token-created").hidden = true;
    $("token-copied").textContent = "";
    showError("");
  }

  opener.addEventListener("click", () => {
    forget();
    dialog.showModal();
    $("token-name").focus();
    load();
  });
  $("close-tokens").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    forget();
    opener.focus();
  });
  // Esc inside the dialog closes it (the browser's own), and must not also stop a running turn.
  dialog.addEventListener("keydown", (event) => { if (event.key === "Escape") event.stopPropagation(); });
})();
