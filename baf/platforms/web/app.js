// The baf browser UI: a client of the WebSocket protocol documented in baf/platforms/websocket.py.
// No build step: marked and DOMPurify are vendored files (vendor/README.md). Replies are Markdown: marked
// renders them with raw HTML escaped and unsafe links left as text, and DOMPurify sanitizes the result
// before it reaches the page; a reply too long to format quickly, or one marked cannot render, is shown as
// plain text instead, with a note. Everything else (user messages, tool calls and results, task lists) only
// ever reaches the page through textContent / createTextNode.
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
  let tries = 0; // reconnection attempts since the last welcome
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

  // Until a welcome arrives the page cannot send: Send and New chat are disabled, and what the user types
  // stays in the box (never queued: a message sent twice, or lost in a queue, is worse than one not sent).
  function setStatus(state, text) {
    statusEl.dataset.state = state;
    statusEl.textContent = text;
    const online = state === "connected";
    $("composer").dataset.online = String(online);
    $("send").disabled = !online;
    $("new-chat").disabled = !online;
    input.placeholder = online ? ONLINE_PLACEHOLDER
      : "Not connected: what you type stays here, and Send works again once reconnected.";
  }
  const ONLINE_PLACEHOLDER = input.placeholder;

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

  // -- Markdown: marked renders, DOMPurify sanitizes (both vendored, see vendor/README.md) --------------

  // Only web and mail links become links: a javascript:, data: or vbscript: URL stays text.
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  const markdown = new marked.Marked({
    gfm: true,
    breaks: true, // a line break in a reply is a line break, as in a chat
    renderer: {
      // Raw HTML in a reply is shown as the text it is, never interpreted.
      html(token) { return escapeHtml(token.text); },
      link(token) {
        if (!SAFE_URL.test(token.href)) return escapeHtml(token.raw);
        const title = token.title ? ' title="' + escapeHtml(token.title) + '"' : "";
        return '<a href="' + escapeHtml(token.href) + '"' + title + ">" + this.parser.parseInline(token.tokens) + "</a>";
      },
      // No images from Markdown: they would load from anywhere (the page's policy blocks them anyway).
      image(token) { return escapeHtml(token.raw); },
    },
  });

  const PURIFY = {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "img", "svg", "math"],
    FORBID_ATTR: ["style", "class", "id"],
  };

  // The sanitizer is the second line: whatever marked lets through, no script, handler or unsafe link
  // survives it; links then open in a new tab without access to this page.
  function sanitized(html, links) {
    const fragment = DOMPurify.sanitize(html, PURIFY);
    fragment.querySelectorAll("a").forEach((a) => {
      if (!links || !SAFE_URL.test(a.getAttribute("href") || "")) {
        a.replaceWith(document.createTextNode(a.textContent));
        return;
      }
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    });
    return fragment;
  }

  // Longer Markdown is shown as plain text. marked runs on the page's only thread and some texts cost it
  // time quadratic in their length ("*a_" repeated: 10,000 characters take about 1 s in Chromium, 20,000
  // about 4.5 s, 60,000 over 30 s), so one long reply would freeze the tab, live and on every reload.
  // Answers people read are far shorter than this (it is some 2,500 tokens).
  const MARKDOWN_LIMIT = 10000;

  // A text shown as it is, with a note saying why it is not formatted. Only ever through textContent.
  function plainText(text, why) {
    const fragment = document.createDocumentFragment();
    fragment.append(el("div", "plain-text", text), el("div", "plain-note muted", why));
    return fragment;
  }

  // Markdown rendered and sanitized; a text too long, or one marked cannot render (5,000 nested
  // blockquotes overflow its stack), is shown as plain text instead, so the bubble still holds it.
  function renderMarkdown(text) {
    text = String(text);
    if (text.length > MARKDOWN_LIMIT) {
      return plainText(text, "Shown as plain text: too long to format (" + text.length + " characters).");
    }
    try {
      return sanitized(markdown.parse(text), true);
    } catch (e) {
      return plainText(text, "Shown as plain text: it could not be formatted.");
    }
  }

  // For one-line summaries in the trace: emphasis and code, but links stay text (the answer has them).
  // A line that cannot be formatted stays plain text (a note would not fit on one line).
  function renderInline(text) {
    text = String(text);
    if (text.length > MARKDOWN_LIMIT) return document.createTextNode(text);
    try {
      return sanitized(markdown.parseInline(text), false);
    } catch (e) {
      return document.createTextNode(text);
    }
  }

  // -- chat -----------------------------------------------------------------------------------------

  // A message this page sends is shown at once, marked with an id of the page's own making; the server
  // shows every recorded message to all the session's connections (a ``user`` frame, or a history item)
  // with that id, so this page recognizes its own and another tab's message appears live.
  function newMessageId() {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes); // crypto.randomUUID needs a secure context; a LAN address is not one
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function ownMessage(id) {
    return id ? messages.querySelector('.msg.user[data-message-id="' + CSS.escape(String(id)) + '"]') : null;
  }

  function addUser(text, id) {
    const bubble = el("div", "msg user", text);
    if (id) bubble.dataset.messageId = String(id);
    messages.appendChild(bubble);
    scrollDown();
    return bubble;
  }

  // A recorded message (a live ``user`` frame or a history item): this page's own is already shown.
  function showUser(item) {
    const bubble = ownMessage(item.id) || addUser(item.text, item.id);
    bubble.dataset.seq = String(item.seq);
    if (bubble.dataset.state === "not-sent" || bubble.dataset.state === "unconfirmed") { // it was recorded
      delete bubble.dataset.state;
      const note = bubble.nextElementSibling;
      if (note && note.classList.contains("not-sent-note")) note.remove();
    }
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
    placeAnswer(bubble);
    scrollDown();
  }

  function addError(text) {
    messages.appendChild(el("div", "msg error", "⚠ " + text));
    scrollDown();
  }

  // -- streamed answers (reply_delta frames) ------------------------------------------------------------

  // One bubble shows the answer as the model writes it, as plain text. A new run_id (a later model turn,
  // or a retry after the model's stream broke) starts it afresh; the final reply takes its place, rendered,
  // so the answer is never shown twice. Deltas are not records: a history never holds them.
  let streaming = null; // { bubble, runId }

  function showDelta(frame) {
    const runId = String(frame.run_id);
    if (!streaming) {
      const bubble = el("div", "msg assistant streaming");
      bubble.setAttribute("aria-busy", "true");
      messages.appendChild(bubble);
      streaming = { bubble, runId };
    } else if (streaming.runId !== runId) {
      streaming.bubble.textContent = "";
      streaming.runId = runId;
      messages.appendChild(streaming.bubble); // a new answer goes after what was shown since (an approval, ...)
    }
    streaming.bubble.dataset.run = runId;
    streaming.bubble.appendChild(document.createTextNode(String(frame.text)));
    scrollDown();
  }

  function placeAnswer(bubble) {
    if (streaming) {
      streaming.bubble.replaceWith(bubble);
      streaming = null;
    } else messages.appendChild(bubble);
  }

  function dropStreaming() {
    if (streaming) streaming.bubble.remove();
    streaming = null;
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

  // One line for the trace from what the model wrote: its first paragraph, shortened. The step's summary
  // folds the whole text into a line, which turns a table or a list into a run of | and - marks.
  function firstParagraph(text, summary) {
    if (typeof text !== "string" || !text.trim()) return summary || "";
    const first = text.trim().split(/\n\s*\n/)[0].replace(/\s+/g, " ");
    const more = first.length < text.trim().length;
    return first.length > 160 ? first.slice(0, 159) + "…" : first + (more ? " …" : "");
  }

  function addStep(step) {
    if (step.kind === "reasoning_started") {
      openTrace(step);
      showTasks([]); // each run plans afresh: the panel shows this run's tasks, not the previous question's
      return;
    }
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
      row.append(details.final ? "✎ answer: " : "✎ ", renderInline(firstParagraph(details.text, step.summary)));
    } else {
      row.textContent = "• " + step.summary;
    }
    turn.appendChild(row);
    scrollDown();
  }

  // -- approvals: a tool call waiting for a human's decision ------------------------------------------

  // One card per waiting call, found by its call id (a history redraw finds the card a live frame made).
  function approvalCard(callId) {
    return messages.querySelector('.approval[data-call-id="' + CSS.escape(String(callId)) + '"]');
  }

  function addApproval(request) {
    if (approvalCard(request.call_id)) return;
    const card = el("div", "approval");
    card.dataset.callId = String(request.call_id);
    card.dataset.state = "waiting";
    card.appendChild(el("div", "approval-title", "Approval needed: " + request.tool));
    card.appendChild(el("pre", "approval-arguments", pretty(request.arguments)));
    const reason = el("input", "approval-reason");
    reason.type = "text";
    reason.placeholder = "Reason (optional, told to the model when you deny)";
    reason.setAttribute("aria-label", "Reason");
    const row = el("div", "approval-buttons");
    const approve = el("button", "approve", "Approve");
    const deny = el("button", "deny", "Deny");
    [approve, deny].forEach((button) => { button.type = "button"; });
    approve.addEventListener("click", () => decide(card, true, reason.value));
    deny.addEventListener("click", () => decide(card, false, reason.value));
    row.append(approve, deny, reason);
    card.appendChild(row);
    card.appendChild(el("div", "approval-outcome muted"));
    if (currentTrace) currentTrace.dataset.state = "waiting";
    // What the model wrote with the call is not an answer (a history has no bubble for it): drop it, so the
    // answer that follows the decision is streamed into a new bubble below the card, where a reload puts it.
    dropStreaming();
    messages.appendChild(card);
    scrollDown();
  }

  function decide(card, approved, reason) {
    if (card.dataset.state !== "waiting") return;
    if (send({ type: "approval", call_id: card.dataset.callId, approved, reason })) {
      settleApproval(card, approved ? "approved" : "denied", reason);
    }
  }

  // Close a card: ``state`` approved / denied / expired. Until the server's ``approval_decision`` arrives
  // (with who decided and when) a click shows the outcome alone; the frame, live or in a history, completes
  // it, so every tab of the session and a reload read the same "Approved by X" / "Denied by X: reason".
  function settleApproval(card, state, reason, by, at) {
    if (!card) return;
    card.dataset.state = state;
    card.querySelectorAll("button, input").forEach((control) => { control.disabled = true; });
    const words = { approved: "Approved", denied: "Denied", expired: "Expired: a new message was sent first" };
    let text = words[state] || state;
    if (by) text += " by " + by;
    if (reason) text += ": " + reason;
    const outcome = card.querySelector(".approval-outcome");
    outcome.textContent = text;
    if (typeof at === "number" && at > 0) outcome.title = new Date(at * 1000).toLocaleString();
    if (currentTrace && currentTrace.dataset.state === "waiting") currentTrace.dataset.state = "running";
  }

  function expireWaitingApprovals() {
    // A new message expires what still waits (the agent does the same: docs/human_approval.md).
    messages.querySelectorAll('.approval[data-state="waiting"]').forEach((card) => settleApproval(card, "expired"));
  }

  // An ``approval_request``, ``approval_decision`` or ``approval_expired``: a live frame or a history item.
  function showApproval(item) {
    if (item.type === "approval_request") addApproval(item);
    else if (item.type === "approval_decision") {
      const state = item.approved ? "approved" : "denied";
      settleApproval(approvalCard(item.call_id), state, item.reason, item.by, item.at);
    } else if (item.type === "approval_expired") {
      (item.call_ids || []).forEach((id) => settleApproval(approvalCard(id), "expired", "", "", item.at));
    }
  }

  // -- tasks ----------------------------------------------------------------------------------------

  function showTasks(tasks) {
    const list = $("tasks");
    list.replaceChildren();
    // Hidden while the run has no plan: an agent that never plans would show an empty panel for good.
    $("task-panel").toggleAttribute("data-empty", tasks.length === 0);
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
    streaming = null;
    currentTrace = null;
    showTasks([]);
  }

  // The newest record seq this view shows (live frames and histories carry seqs): a live frame at or
  // below it is already shown, and a reconnect asks only for what came after it.
  let lastSeq = 0;
  let viewSession = null; // the session this view shows
  function fresh(frame) {
    if (typeof frame.seq !== "number") return true;
    if (frame.seq <= lastSeq) return false;
    lastSeq = frame.seq;
    return true;
  }

  // Show one record (a history item or a live frame). If showing it fails, the view says so in its place
  // and goes on: lastSeq already covers the record, so a history that stopped at it would lose every
  // later record for good, on every reload.
  function guarded(item, show) {
    try {
      show();
    } catch (e) {
      addError("A " + String(item && item.type) + " record could not be shown (" + String(e && e.message) + ").");
    }
  }

  function handleHistory(frame) {
    const after = typeof frame.after_seq === "number" ? frame.after_seq : 0;
    if (after === 0) clearView(); // a whole history: redraw; otherwise it continues this view
    if (typeof frame.last_seq === "number") lastSeq = Math.max(lastSeq, frame.last_seq);
    (frame.items || []).forEach((item) => guarded(item, () => {
      if (item.type === "user") showUser(item);
      else if (item.type === "reply") addReply(item);
      else if (item.type === "reasoning_step") addStep(item.step);
      else if (item.type === "task_list") showTasks(item.tasks || []);
      else if (item.type === "error") addError(item.message);
      else if (item.type.startsWith("approval_")) showApproval(item);
    }));
    if (frame.truncated && after === 0) messages.prepend(el("p", "muted", "Older history is not shown."));
  }

  function showExamples(examples) {
    const row = $("examples");
    row.replaceChildren();
    (Array.isArray(examples) ? examples : []).forEach((example) => {
      const button = el("button", null, example);
      button.type = "button";
      button.addEventListener("click", () => sendMessage(String(example)));
      row.appendChild(button);
    });
  }

  const handlers = {
    welcome(frame) {
      sessionStorage.setItem(TOKEN_KEY, frame.resume_token);
      maxMessageBytes = typeof frame.max_message_size === "number" ? frame.max_message_size : 0;
      $("agent-name").textContent = frame.agent || "baf agent";
      $("hint-agent").textContent = frame.agent || "the agent";
      document.title = (frame.agent || "baf") + " · baf";
      showExamples(frame.examples);
      if (!frame.resumed || frame.session_id !== viewSession) { clearView(); lastSeq = 0; }
      viewSession = frame.session_id;
      setStatus("connected", "connected");
      tries = 0;
      retryDelay = 500;
    },
    history: handleHistory,
    user(frame) { if (fresh(frame)) showUser(frame); },
    reply(frame) { if (fresh(frame)) addReply(frame); },
    reply_delta: showDelta,
    reasoning_step(frame) { if (fresh(frame)) addStep(frame.step || {}); },
    task_list(frame) { if (fresh(frame)) showTasks(frame.tasks || []); },
    approval_request(frame) { if (fresh(frame)) showApproval(frame); },
    approval_decision(frame) { if (fresh(frame)) showApproval(frame); },
    approval_expired(frame) { if (fresh(frame)) showApproval(frame); },
    error(frame) {
      if (frame.code === "bad_token") {
        // The server no longer knows this token (it expired, or the server's secret changed): start afresh.
        sessionStorage.removeItem(TOKEN_KEY);
        showBanner("Your previous conversation could not be resumed; a new one was started.");
        send({ type: "hello" });
        return;
      }
      const refused = frame.code !== "agent" && (frame.id ? ownMessage(frame.id) : unreadRefusal(frame.code));
      if (refused) notSent(refused, frame.message);
      else if (frame.code === "agent") { if (fresh(frame)) { dropStreaming(); addError(frame.message); } }
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

  // The largest frame the server reads (its welcome says; 0: unknown). A longer message is not sent at all.
  let maxMessageBytes = 0;

  // Send a message and show it; false if it was not sent (the composer then keeps its text).
  function sendMessage(text) {
    if (!text.trim()) return false;
    const id = newMessageId();
    const frame = { type: "message", text, id };
    const size = new TextEncoder().encode(JSON.stringify(frame)).length;
    if (maxMessageBytes && size > maxMessageBytes) {
      showBanner("This message is too long to send (" + size + " bytes; the agent takes at most " +
        maxMessageBytes + "). Shorten it, or send it in parts.");
      return false;
    }
    if (!send(frame)) return false;
    hideBanner();
    expireWaitingApprovals();
    addUser(text, id);
    return true;
  }

  // Refusals the server makes before it reads a frame (or when it failed on it) carry no id; frames are
  // answered in order, so one refuses the newest message this page sent that is not yet shown as recorded.
  const UNREAD_REFUSALS = ["rate_limited", "internal", "too_large"];
  function unreadRefusal(code) {
    if (!UNREAD_REFUSALS.includes(code)) return null;
    const waiting = messages.querySelectorAll('.msg.user[data-message-id]:not([data-seq]):not([data-state="not-sent"])');
    return waiting.length ? waiting[waiting.length - 1] : null;
  }

  // The server refused a message this page sent (an error frame with its id): it was not recorded, and
  // the agent never saw it. Say so under it, and put the text back in the composer to send again.
  function notSent(bubble, why) {
    bubble.dataset.state = "not-sent";
    const note = el("div", "not-sent-note", "Not sent: " + why);
    bubble.after(note);
    if (!input.value) input.value = bubble.textContent;
    scrollDown();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const token = new URLSearchParams(location.search).get("access_token");
    const url = scheme + location.host + "/ws" + (token ? "?access_token=" + encodeURIComponent(token) : "");
    setStatus("connecting", tries ? "reconnecting… (try " + tries + ")" : "connecting…");
    ws = new WebSocket(url);
    ws.addEventListener("open", () => {
      everConnected = true;
      hideBanner();
      const resume = sessionStorage.getItem(TOKEN_KEY);
      // Back after a lost connection: only what came after the last record shown (a reload starts at 0).
      const hello = resume ? { type: "hello", resume, after_seq: viewSession ? lastSeq : 0 } : { type: "hello" };
      ws.send(JSON.stringify(hello));
    });
    ws.addEventListener("message", (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch (e) { showBanner("The server sent a frame that is not JSON."); return; }
      const handler = handlers[frame.type];
      if (handler) guarded(frame, () => handler(frame));
    });
    ws.addEventListener("close", (event) => {
      tries += 1;
      unconfirmed();
      const why = event.code === 1009 ? "the message was too large" : event.reason || "connection lost";
      const what = everConnected ? "Disconnected (" + why + "). " : "Cannot reach the agent. ";
      // Backoff with jitter, so that the pages of a restarted server do not all come back at once.
      const delay = retryDelay * (0.75 + Math.random() / 2);
      retryDelay = Math.min(retryDelay * 2, 10000);
      const due = Date.now() + delay;
      const tick = () => {
        const left = Math.max(0, Math.ceil((due - Date.now()) / 1000));
        setStatus("disconnected", "reconnecting… (try " + tries + ")");
        showBanner(what + "Reconnecting in " + left + " s (try " + tries + ")… Your text stays in the box.");
      };
      tick();
      const countdown = setInterval(tick, 1000);
      setTimeout(() => { clearInterval(countdown); connect(); }, delay);
    });
  }

  // Messages sent just before the connection dropped and not yet shown as recorded: whether the agent got
  // them is not known until it confirms (the resume's history, or a live frame); say so under each.
  function unconfirmed() {
    messages.querySelectorAll('.msg.user[data-message-id]:not([data-seq]):not([data-state])').forEach((bubble) => {
      bubble.dataset.state = "unconfirmed";
      bubble.after(el("div", "not-sent-note", "The connection dropped as this was sent: it shows as sent once the " +
        "agent confirms it. If no answer comes, send it again."));
    });
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    if (sendMessage(input.value)) input.value = ""; // a message not sent stays, to be sent again
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("new-chat").addEventListener("click", () => send({ type: "reset" }));

  // The hint shows while the conversation is empty.
  const hint = $("empty-hint");
  new MutationObserver(() => { hint.hidden = messages.childElementCount > 0; })
    .observe(messages, { childList: true });

  window.bafRenderMarkdown = renderMarkdown; // exposed for tests
  connect();
})();
