// What the chat page shows of replies and tool results: sanitised Markdown, streamed without
// flicker, and data rows as sortable tables. Loaded after the vendored marked and DOMPurify,
// before chat.js, which calls window.assistantRender.
(function () {
  "use strict";

  const ROW_CAP = 20;           // rows a data table shows before "Show all"
  const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

  // ---- links --------------------------------------------------------------------------------

  // An href the page may follow: http(s), mailto, or relative to the page (which is http(s)).
  function safeHref(href) {
    if (typeof href !== "string" || !href.trim()) return null;
    try {
      const url = new URL(href, location.href);
      return SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
    } catch (error) {
      return null;
    }
  }

  function makeSafeLink(link) {
    const href = safeHref(link.getAttribute("href"));
    if (href === null) {
      link.removeAttribute("href");
      return;
    }
    link.setAttribute("target", "_blank");
    link.setAttribute("rel", "noopener noreferrer");
  }

  // ---- Markdown -----------------------------------------------------------------------------

  const PURIFY = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "form", "button", "textarea", "select", "iframe"],
    FORBID_ATTR: ["style", "id", "name"],
    RETURN_DOM_FRAGMENT: true,
  };
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") makeSafeLink(node);
  });

  // HTML written in a reply is shown as the text it is, not as markup (marked escapes text);
  // an image becomes a link to it, so a reply cannot make the browser fetch anything by itself.
  function htmlAsText(token) {
    if (token.type === "image") {
      token.type = "link";
      token.tokens = [{ type: "text", raw: token.text, text: token.text || token.href, escaped: false }];
      return;
    }
    if (token.type !== "html") return;
    const text = { type: "text", raw: token.raw, text: token.text, escaped: false };
    if (token.block) {
      token.type = "paragraph";
      token.tokens = [text];
    } else {
      token.type = "text";
      token.escaped = false;
      delete token.tokens;
    }
  }
  const markdown = new marked.Marked({ gfm: true, breaks: true, async: false, walkTokens: htmlAsText });

  function toFragment(text) {
    // marked writes HTML from any text; DOMPurify is what makes it safe to show
    return DOMPurify.sanitize(markdown.parse(text), PURIFY);
  }

  const sources = new WeakMap();   // a reply's .text element -> its Markdown so far
  const dirty = new Set();         // elements to repaint on the next animation frame
  let frame = 0;

  function set(target, markdown) {
    sources.set(target, markdown || "");
    schedule(target);
  }

  function append(target, delta) {
    sources.set(target, (sources.get(target) || "") + delta);
    schedule(target);
  }

  function source(target) { return sources.get(target) || ""; }

  function schedule(target) {
    dirty.add(target);
    if (!frame) frame = requestAnimationFrame(flush);
  }

  // Paint now what is waiting (a test or a finished message need not wait for a frame).
  function flush() {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    const targets = [...dirty];
    dirty.clear();
    targets.forEach((target) => keepingScroll(target, () => paint(target)));
  }

  // A reader at the bottom stays there as the reply grows; one who scrolled up stays put.
  function keepingScroll(target, change) {
    const box = target.closest(".messages");
    const atBottom = !box || box.scrollHeight - box.scrollTop - box.clientHeight < 48;
    change();
    if (box && atBottom) box.scrollTop = box.scrollHeight;
  }

  // Re-render the Markdown, keeping every top-level block that did not change (so the copy
  // button of a finished code block is not rebuilt, and selection in earlier text survives).
  function paint(target) {
    const fresh = toFragment(source(target));
    const blocks = [...fresh.childNodes];
    target.classList.add("markdown");
    blocks.forEach((block, index) => {
      const key = keyOf(block);
      const current = target.childNodes[index];
      if (current && current._key === key) return;
      if (current && current._code && block.nodeName === "PRE") {
        updateCode(current, block);
        current._key = key;
        return;
      }
      const shown = decorate(block);
      shown._key = key;
      if (current) target.replaceChild(shown, current);
      else target.appendChild(shown);
    });
    while (target.childNodes.length > blocks.length) target.lastChild.remove();
    hideRepeatedResults(target);
  }

  function keyOf(node) {
    return node.nodeType === Node.ELEMENT_NODE ? node.outerHTML : "#" + node.textContent;
  }

  function decorate(block) {
    if (block.nodeName !== "PRE") return block;
    const wrapper = document.createElement("div");
    wrapper.className = "code-block";
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy ghost";
    copy.textContent = gettext("Copy");
    copy.setAttribute("aria-label", gettext("Copy code"));
    copy.addEventListener("click", () => copyCode(wrapper, copy));
    wrapper.append(copy, block);
    wrapper._code = true;
    return wrapper;
  }

  function updateCode(wrapper, block) {
    wrapper.querySelector("pre").replaceWith(block);
  }

  function copyCode(wrapper, button) {
    const text = wrapper.querySelector("pre").textContent;
    const done = (label) => {
      button.textContent = label;
      setTimeout(() => { button.textContent = gettext("Copy"); }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(() => done(gettext("Copied")), () => fallbackCopy(text, done));
    } else {
      fallbackCopy(text, done);
    }
  }

  // Without the asynchronous clipboard (plain http), a selected textarea and execCommand.
  function fallbackCopy(text, done) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "copy-buffer";
    document.body.append(area);
    area.select();
    let copied = false;
    try { copied = document.execCommand("copy"); } catch (error) { copied = false; }
    area.remove();
    done(copied ? gettext("Copied") : gettext("Press Ctrl+C"));
  }

  // A tool's text that the reply already says (the keyword planner's reply is its tools' text)
  // is not printed a second time in the tool card; nor are its records as a table (a list of
  // objects its text spells out, like the capabilities), while a list of plain values keeps its
  // sortable table.
  function hideRepeatedResults(target) {
    const bubble = target.closest(".bubble");
    if (!bubble) return;
    const said = source(target);
    bubble.querySelectorAll(".tool .result").forEach((result) => {
      const text = result.textContent.trim();
      result.hidden = text !== "" && said.includes(text);
      const card = result.closest(".tool");
      const records = card && document.getElementById("d-" + card.id);
      if (records && records.dataset.records) records.hidden = result.hidden;
    });
  }

  // ---- data tables --------------------------------------------------------------------------

  function isRecord(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // Rows and columns from the shapes tools return: a list of objects, of lists or of values,
  // {columns, rows} (SQL), a page {results: [...]}, or an object holding one such list.
  function tabulate(data) {
    if (Array.isArray(data)) {
      if (!data.length) return null;
      if (data.every(isRecord)) {
        const columns = [];
        data.forEach((row) => Object.keys(row).forEach((key) => {
          if (!columns.includes(key)) columns.push(key);
        }));
        return { columns: columns, rows: data.map((row) => columns.map((key) => row[key])) };
      }
      if (data.every(Array.isArray)) {
        const width = Math.max(...data.map((row) => row.length));
        return { columns: Array.from({ length: width }, (_, i) => String(i + 1)), rows: data };
      }
      return { columns: ["value"], rows: data.map((value) => [value]) };
    }
    if (!isRecord(data)) return null;
    if (Array.isArray(data.rows) && Array.isArray(data.columns)) {
      return data.rows.length ? { columns: data.columns.map(String), rows: data.rows } : null;
    }
    if (Array.isArray(data.results)) return tabulate(data.results);
    const list = Object.keys(data).find((key) => Array.isArray(data[key]) && data[key].length);
    const table = list === undefined ? null : tabulate(data[list]);
    if (table) table.caption = list;
    return table;
  }

  // An object's fields that are URLs the page may open (an object's page, an admin page).
  function links(data) {
    if (!isRecord(data)) return [];
    return Object.entries(data).filter(([, value]) => isUrl(value)).map(([key, value]) => {
      const link = document.createElement("a");
      link.href = safeHref(value);
      link.textContent = key === "url" ? value : key + ": " + value;
      makeSafeLink(link);
      return link;
    });
  }

  function isUrl(value) {
    return typeof value === "string" && /^(https?:\/\/|\/(?!\/))\S*$/i.test(value) && safeHref(value) !== null;
  }

  function cellText(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  // A link for a value that is a URL the page may open (an object's page, an admin page).
  function cell(value) {
    const td = document.createElement("td");
    const text = cellText(value);
    if (isUrl(value)) {
      const link = document.createElement("a");
      link.href = safeHref(value);
      link.textContent = text;
      makeSafeLink(link);
      td.append(link);
    } else {
      td.textContent = text;
    }
    if (typeof value === "number") td.className = "number";
    return td;
  }

  function compare(a, b) {
    if (typeof a === "number" && typeof b === "number") return a - b;
    if (a === null || a === undefined) return b === null || b === undefined ? 0 : 1;
    if (b === null || b === undefined) return -1;
    return cellText(a).localeCompare(cellText(b), undefined, { numeric: true, sensitivity: "base" });
  }

  // A sortable table of a tool's data (a header click sorts; the first ROW_CAP rows until "Show all"),
  // with the links it names.
  function dataTable(data) {
    const table = tabulate(data);
    const found = links(data);
    if (!table && !found.length) return null;
    const box = document.createElement("div");
    box.className = "data-table";
    if (found.length) {
      const line = document.createElement("p");
      line.className = "data-links";
      found.forEach((link) => line.append(link, " "));
      box.append(line);
    }
    if (!table) return box;
    const scroller = document.createElement("div");
    scroller.className = "data-scroll";
    const grid = document.createElement("table");
    if (table.caption) {
      const caption = document.createElement("caption");
      caption.textContent = table.caption;
      grid.append(caption);
    }
    const head = document.createElement("tr");
    const body = document.createElement("tbody");
    const state = { column: -1, direction: 1, all: table.rows.length <= ROW_CAP };
    const more = document.createElement("button");
    more.type = "button";
    more.className = "ghost show-all";
    more.textContent = interpolate(ngettext("Show all %s row", "Show all %s rows", table.rows.length), [table.rows.length]);

    table.columns.forEach((name, index) => {
      const th = document.createElement("th");
      th.scope = "col";
      th.setAttribute("aria-sort", "none");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = name;
      button.addEventListener("click", () => {
        state.direction = state.column === index ? -state.direction : 1;
        state.column = index;
        head.querySelectorAll("th").forEach((other) => other.setAttribute("aria-sort", "none"));
        th.setAttribute("aria-sort", state.direction > 0 ? "ascending" : "descending");
        fill();
      });
      th.append(button);
      head.append(th);
    });

    function fill() {
      let rows = table.rows.slice();
      if (state.column >= 0) {
        rows.sort((a, b) => state.direction * compare(a[state.column], b[state.column]));
      }
      if (!state.all) rows = rows.slice(0, ROW_CAP);
      body.replaceChildren(...rows.map((row) => {
        const tr = document.createElement("tr");
        table.columns.forEach((_, index) => tr.append(cell(row[index])));
        return tr;
      }));
      more.hidden = state.all;
    }

    more.addEventListener("click", () => { state.all = true; fill(); });
    const thead = document.createElement("thead");
    thead.append(head);
    grid.append(thead, body);
    scroller.append(grid);
    box.append(scroller, more);
    fill();
    return box;
  }

  // Show a tool call's data under its card (once: a repeated outcome replaces the table).
  function showData(card, data, omitted) {
    if (!card) return;
    const id = "d-" + card.id;
    const old = document.getElementById(id);
    const table = omitted ? tooBig() : dataTable(data);
    if (!table) {
      if (old) old.remove();
      return;
    }
    table.id = id;
    if (Array.isArray(data) && data.length && data.every(isRecord)) table.dataset.records = "1";
    if (old) old.replaceWith(table);
    else card.after(table);
    recheck(card.closest(".bubble"));
  }

  // A tool card's result arrived: hide it if the reply already says it.
  function recheck(bubble) {
    const text = bubble && bubble.querySelector(".text");
    if (text) hideRepeatedResults(text);
  }

  function tooBig() {
    const note = document.createElement("p");
    note.className = "data-table data-omitted";
    note.textContent = gettext("This result is too big to show as a table.");
    return note;
  }

  window.assistantRender = {
    set: set, append: append, flush: flush, source: source, recheck: recheck,
    showData: showData, dataTable: dataTable, safeHref: safeHref,
  };
})();
