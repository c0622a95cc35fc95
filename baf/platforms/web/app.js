// The baf browser UI: a client of the WebSocket protocol documented in baf/platforms/websocket.py.
// No build step, no dependencies. Text from the model, tools or users only ever reaches the page
// through textContent / createTextNode: the Markdown renderer builds DOM nodes and never assigns
// innerHTML, so markup in a reply is shown as text, not interpreted.
"use strict";

(function () {
  const TOKEN_KEY = "baf.resume_token";
  const MARKS = { pending: "○", in_progress: "◐", completed: "✓", skipped: "–" };

  const $ = (id) => document.getElementById(id);
  const messages = $("messages");
  const input = $("input");
  const statusEl = $("status");
  const banner = $("error-banner");

  let ws = null;
  let retryDelay = 500;
  let currentTrace = null; // the open trace group of the running reasoning invocation
  let everConnected = false;

  // -- helpers ------------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function scrollDown() {
    messages.scrollTop = messages.scrollHeight;
  }

  function setStatus(state, text) {
    statusEl.dataset.state = state;
    statusEl.textContent = text;
  }

  function showBanner(text) {
    banner.textContent = text;
    banner.hidden = false;
  }

  function hideBanner() {
    banner.hidden = true;
    banner.textContent = "";
  }

  function pretty(value) {
    if (typeof value === "string") {
      try { return JSON.stringify(JSON.parse(value), null, 2); } catch (e) { return value; }
    }
    return JSON.stringify(value, null, 2);
  }

  // -- Markdown (a small, safe subset) --------------------------------------------------------------

  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(__[^_\n]+__)|(\*[^*\s][^*\n]*\*)|(\[[^\]\n]+\]\([^)\s]+\))/;

  function renderInline(parent, text) {
    let rest = text;
    while (rest) {
      const m = INLINE.exec(rest);
      if (!m) { parent.appendChild(document.createTextNode(rest)); return; }
      if (m.index > 0) parent.appendChild(document.createTextNode(rest.slice(0, m.index)));
      const token = m[0];
      if (m[1]) {
        parent.appendChild(el("code", null, token.slice(1, -1)));
      } else if (m[2] || m[3]) {
        const strong = el("strong");
        renderInline(strong, token.slice(2, -2));
        parent.appendChild(strong);
      } else if (m[4]) {
        const em = el("em");
        renderInline(em, token.slice(1, -1));
        parent.appendChild(em);
      } else {
        const link = /^\[([^\]]+)\]\(([^)\s]+)\)$/.exec(token);
        // Only plain web links: a javascript: or data: URL stays text.
        if (link && /^(https?:\/\/|mailto:)/i.test(link[2])) {
          const a = el("a", null, link[1]);
          a.href = link[2];
          a.target = "_blank";
          a.rel = "noopener noreferrer";
          parent.appendChild(a);
        } else {
          parent.appendChild(document.createTextNode(token));
        }
      }
      rest = rest.slice(m.index + token.length);
    }
  }

  function renderMarkdown(text) {
    const root = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    let paragraph = [];
    const flush = () => {
      if (!paragraph.length) return;
      const p = el("p");
      paragraph.forEach((line, n) => {
        if (n) p.appendChild(el("br"));
        renderInline(p, line);
      });
      root.appendChild(p);
      paragraph = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      if (/^```/.test(line)) {
        flush();
        const code = [];
        i += 1;
        while (i < lines.length && !/^```/.test(lines[i])) { code.push(lines[i]); i += 1; }
        i += 1; // the closing fence (or the end)
        const pre = el("pre");
        pre.appendChild(el("code", null, code.join("\n")));
        root.appendChild(pre);
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) {
        flush();
        const h = el("h" + Math.min(6, heading[1].length + 2));
        renderInline(h, heading[2]);
        root.appendChild(h);
        i += 1;
        continue;
      }
      const listItem = /^\s*([-*+]|\d+[.)])\s+/;
      if (listItem.test(line)) {
        flush();
        const ordered = /^\s*\d/.test(line);
        const list = el(ordered ? "ol" : "ul");
        while (i < lines.length && listItem.test(lines[i]) && /^\s*\d/.test(lines[i]) === ordered) {
          const li = el("li");
          renderInline(li, lines[i].replace(listItem, ""));
          list.appendChild(li);
          i += 1;
        }
        root.appendChild(list);
        continue;
      }
      if (/^>\s?/.test(line)) {
        flush();
        const quote = el("blockquote");
        const quoted = [];
        while (i < lines.length && /^>\s?/.test(lines[i])) { quoted.push(lines[i].replace(/^>\s?/, "")); i += 1; }
        renderInline(quote, quoted.join(" "));
        root.appendChild(quote);
        continue;
      }
      if (!line.trim()) flush(); else paragraph.push(line);
      i += 1;
    }
    flush();
    return root;
  }

  // -- chat -----------------------------------------------------------------------------------------

  function addUser(text) {
    messages.appendChild(el("div", "msg user", text));
    scrollDown();
  }

  function addReply(frame) {
    const bubble = el("div", "msg assistant");
    const format = frame.format || "markdown";
    if (frame.text) bubble.appendChild(renderMarkdown(frame.text));
    if (format === "options" && Array.isArray(frame.options)) {
      const row = el("div", "options");
      frame.options.forEach((option) => {
        const button = el("button", null, option);
        button.type = "button";
        button.addEventListener("click", () => sendMessage(String(option)));
        row.appendChild(button);
      });
      bubble.appendChild(row);
    } else if (format === "image" && /^image\/(png|jpeg|gif|webp)$/.test(frame.mime_type || "")) {
      const img = el("img");
      img.alt = frame.text || "image";
      img.src = "data:" + frame.mime_type + ";base64," + frame.data;
      bubble.appendChild(img);
    } else if (format === "file" || format === "image") {
      const a = el("a", null, "⬇ " + (frame.name || "file"));
      a.href = "data:application/octet-stream;base64," + frame.data; // never rendered inline
      a.download = frame.name || "file";
      bubble.appendChild(a);
    }
    messages.appendChild(bubble);
    scrollDown();
  }

  function addError(text) {
    messages.appendChild(el("div", "msg error", "⚠ " + text));
    scrollDown();
  }

  // -- the reasoning trace --------------------------------------------------------------------------

  function openTrace(step) {
    const group = el("details", "trace");
    group.open = true;
    group.dataset.state = "running";
    const summary = el("summary", null, "Thinking: " + ((step.details && step.details.request) || step.summary || ""));
    group.appendChild(summary);
    group.appendChild(el("div", "turns"));
    messages.appendChild(group);
    currentTrace = group;
    scrollDown();
    return group;
  }

  function turnOf(group, number) {
    const turns = group.querySelector(".turns");
    let turn = turns.querySelector('.turn[data-step="' + number + '"]');
    if (!turn) {
      turn = el("div", "turn");
      turn.dataset.step = String(number);
      turn.appendChild(el("div", "turn-title", "Turn " + (number + 1)));
      turns.appendChild(turn);
    }
    return turn;
  }

  function expandable(className, title, body) {
    const box = el("details", className);
    box.appendChild(el("summary", null, title));
    box.appendChild(el("pre", null, body));
    return box;
  }

  function addStep(step) {
    if (step.kind === "reasoning_started") { openTrace(step); return; }
    const group = currentTrace || openTrace({ summary: "(continued)" });
    if (step.kind === "reasoning_finished") {
      const outcome = (step.details && step.details.outcome) || "done";
      const count = (step.details && step.details.steps) || step.step + 1;
      group.dataset.state = "finished";
      group.classList.add("outcome-" + outcome);
      group.querySelector("summary").textContent =
        "Reasoning " + outcome.replace(/_/g, " ") + " · " + count + (count === 1 ? " turn" : " turns");
      group.open = false; // the group closes: the answer below is what matters now
      currentTrace = null;
      return;
    }
    const turn = turnOf(group, step.step || 0);
    const row = el("div", "step " + step.kind);
    const details = step.details || {};
    if (step.kind === "llm_tool_calls") {
      if (details.text) row.appendChild(el("div", "muted", details.text));
      (details.tool_calls || []).forEach((call) => {
        row.appendChild(expandable("tool-call", "call " + call.name, pretty(call.arguments)));
      });
    } else if (step.kind === "tool_result") {
      const box = expandable("tool-result" + (details.is_error ? " is-error" : ""),
        "↳ " + step.summary, String(details.result === undefined ? "" : details.result));
      row.appendChild(box);
    } else if (step.kind === "llm_text") {
      row.textContent = details.final ? "✎ answer: " + step.summary : "✎ " + step.summary;
    } else {
      row.textContent = "• " + step.summary;
    }
    turn.appendChild(row);
    scrollDown();
  }

  // -- tasks ----------------------------------------------------------------------------------------

  function showTasks(tasks) {
    const list = $("tasks");
    list.replaceChildren();
    $("no-tasks").hidden = tasks.length > 0;
    tasks.forEach((task) => {
      const status = String(task.status || "pending");
      const li = el("li", "task status-" + status);
      li.dataset.status = status;
      li.title = status.replace("_", " ");
      li.appendChild(el("span", "mark", MARKS[status] || "?"));
      li.appendChild(el("span", "desc", task.id + ". " + task.description));
      if (task.result) li.appendChild(el("span", "result", task.result));
      list.appendChild(li);
    });
  }

  // -- the protocol ---------------------------------------------------------------------------------

  function clearView() {
    messages.replaceChildren();
    currentTrace = null;
    showTasks([]);
  }

  // The seq the last history frame covered: a live frame that carries a seq at or below it is already shown.
  let historySeq = 0;
  function fresh(frame) {
    return typeof frame.seq !== "number" || frame.seq > historySeq;
  }

  function handleHistory(frame) {
    clearView();
    historySeq = typeof frame.last_seq === "number" ? frame.last_seq : 0;
    (frame.items || []).forEach((item) => {
      if (item.type === "user") addUser(item.text);
      else if (item.type === "reply") addReply(item);
      else if (item.type === "reasoning_step") addStep(item.step);
      else if (item.type === "task_list") showTasks(item.tasks || []);
      else if (item.type === "error") addError(item.message);
    });
    if (frame.truncated) messages.prepend(el("p", "muted", "Older history is not shown."));
  }

  const handlers = {
    welcome(frame) {
      sessionStorage.setItem(TOKEN_KEY, frame.resume_token);
      $("agent-name").textContent = frame.agent || "baf agent";
      document.title = (frame.agent || "baf") + " · baf";
      if (!frame.resumed) { clearView(); historySeq = 0; }
      setStatus("connected", "connected");
    },
    history: handleHistory,
    reply(frame) { if (fresh(frame)) addReply(frame); },
    reasoning_step(frame) { if (fresh(frame)) addStep(frame.step || {}); },
    task_list(frame) { if (fresh(frame)) showTasks(frame.tasks || []); },
    error(frame) {
      if (frame.code === "bad_token") {
        // The server no longer knows this token (e.g. it restarted without a fixed secret): start afresh.
        sessionStorage.removeItem(TOKEN_KEY);
        showBanner("Your previous conversation could not be resumed; a new one was started.");
        send({ type: "hello" });
        return;
      }
      if (frame.code === "agent") addError(frame.message);
      else showBanner("Error (" + frame.code + "): " + frame.message);
    },
  };

  function send(frame) {
    if (!ws || ws.readyState !== WebSocket.OPEN) {
      showBanner("Not connected; the message was not sent. Reconnecting…");
      return false;
    }
    ws.send(JSON.stringify(frame));
    return true;
  }

  function sendMessage(text) {
    if (!text.trim()) return;
    if (send({ type: "message", text })) {
      hideBanner();
      addUser(text);
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const token = new URLSearchParams(location.search).get("access_token");
    const url = scheme + location.host + "/ws" + (token ? "?access_token=" + encodeURIComponent(token) : "");
    setStatus("connecting", "connecting…");
    ws = new WebSocket(url);
    ws.addEventListener("open", () => {
      retryDelay = 500;
      everConnected = true;
      hideBanner();
      const resume = sessionStorage.getItem(TOKEN_KEY);
      ws.send(JSON.stringify(resume ? { type: "hello", resume } : { type: "hello" }));
    });
    ws.addEventListener("message", (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch (e) { showBanner("The server sent a frame that is not JSON."); return; }
      const handler = handlers[frame.type];
      if (handler) handler(frame);
    });
    ws.addEventListener("close", (event) => {
      setStatus("disconnected", "disconnected");
      const why = event.code === 1009 ? "the message was too large" : event.reason || "connection lost";
      showBanner((everConnected ? "Disconnected (" + why + "). " : "Cannot reach the agent. ") +
        "Reconnecting in " + Math.round(retryDelay / 1000) + " s…");
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 10000);
    });
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    input.value = "";
    sendMessage(text);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("new-chat").addEventListener("click", () => send({ type: "reset" }));

  window.bafRenderMarkdown = renderMarkdown; // exposed for tests
  connect();
})();
