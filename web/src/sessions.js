// The Sessions tab: pick an agent, open a session, and chat. The session's
// event stream is read from its start, so its history comes back from the
// durable events whenever the tab opens; streamed deltas fill the agent's
// reply as it comes, tool calls show with their status, and permission
// requests become one button per option the agent offers.
import { call, describe, followSession, q, vmPath } from "./api.js";
import { field, h, parsePairs, replace } from "./dom.js";

const lastSession = (vm) => "agentos-gateway.session." + vm;

const textOf = (content) => (content && content.type === "text" ? content.text : content ? `[${content.type}]` : "");

export function sessionsTab(panel, vm) {
  const id = vm.id;
  const error = h("p", { class: "error", role: "alert" });
  const agent = h("select", {});
  const policy = h("select", {}, ["ask", "allow_all", "reject_all"].map((p) => h("option", { value: p }, p)));
  const cwd = h("input", { value: "/workspace", spellcheck: false });
  const env = h("textarea", { rows: 2, spellcheck: false, placeholder: "ANTHROPIC_API_KEY=...\nANTHROPIC_BASE_URL=..." });
  const sessionList = h("ul", { class: "sessions", "aria-label": "Sessions" });
  const chat = h("div", { class: "chat", role: "log", "aria-label": "Conversation", "aria-live": "polite" });
  const state = h("span", { class: "muted", role: "status", "data-testid": "session-state" });
  const message = h("textarea", { rows: 2, placeholder: "Ask the agent…" });
  const send = h("button", { type: "submit", class: "primary", disabled: true }, "Send");
  const cancel = h("button", { type: "button", disabled: true, onclick: async () => {
    try { const r = await call("POST", vmPath(id, `/sessions/${current}/cancel`)); state.textContent = r.status === "cancelled" ? "Cancelled" : "Nothing to cancel"; } catch (err) { error.textContent = describe(err); }
  } }, "Cancel");
  let current = null;
  let feed = null;
  let streaming = null;
  const tools = new Map();
  const perms = new Map();

  const say = (who, text) => {
    const b = h("div", { class: "msg " + who }, h("span", { class: "who" }, who === "user" ? "You" : "Agent"), h("div", { class: "text" }, text));
    chat.append(b);
    chat.scrollTop = chat.scrollHeight;
    return b.querySelector(".text");
  };
  const toolRow = (u) => {
    let row = tools.get(u.toolCallId);
    if (!row) {
      row = { title: h("span", {}, u.title || u.toolCallId), status: h("span", { class: "status" }) };
      tools.set(u.toolCallId, row);
      chat.append(h("div", { class: "tool", "data-tool-call": u.toolCallId }, "Tool ", row.title, " — ", row.status));
    }
    if (u.title) row.title.textContent = u.title;
    if (u.status) { row.status.textContent = u.status; row.status.className = "status " + u.status; }
  };
  const permission = (ev) => {
    const tc = ev.toolCall || {};
    const buttons = (ev.options || []).map((o) => h("button", { type: "button", onclick: async () => {
      try {
        const r = await call("POST", vmPath(id, `/sessions/${current}/permissions/${encodeURIComponent(ev.requestId)}`), { json: { optionId: o.optionId } });
        if (r.status !== "accepted") error.textContent = `The request was already settled (${r.reason || r.status}).`;
      } catch (err) { error.textContent = describe(err); }
    } }, o.name || o.optionId));
    const outcome = h("span", { class: "muted" });
    const card = h("div", { class: "perm", role: "group", "aria-label": "Permission request" },
      h("p", {}, "The agent asks permission: ", h("strong", {}, tc.title || "a tool call"),
        tc.rawInput && tc.rawInput.command ? h("code", {}, " " + tc.rawInput.command) : null),
      h("div", { class: "row" }, buttons), outcome);
    perms.set(ev.requestId, { buttons, outcome });
    chat.append(card);
  };
  const settle = (ev) => {
    const p = perms.get(ev.requestId);
    if (!p) return;
    for (const b of p.buttons) b.disabled = true;
    const d = ev.decision || {};
    p.outcome.textContent = ev.status === "accepted" ? `Answered: ${d.optionId || ""}${d.by && d.by !== "api" ? " (" + d.by + ")" : ""}` : `Settled: ${ev.reason || ev.status}`;
  };
  const onEvent = (name, data) => {
    if (name === "ephemeral") {
      if (data.type === "agent_message_chunk" && data.update) {
        if (!streaming) streaming = say("agent", "");
        streaming.textContent += textOf(data.update.content);
      }
      return;
    }
    if (name === "end" || name === "error") { state.textContent = name === "end" ? `Session ${data.state}` : `${data.detail} (${data.code})`; send.disabled = cancel.disabled = true; return; }
    if (name !== "durable") return;
    const u = data.update || {};
    switch (data.type) {
      case "user_message_chunk": say("user", textOf(u.content)); break;
      case "agent_message_chunk":
        if (streaming) { streaming.textContent = textOf(u.content); streaming = null; } else say("agent", textOf(u.content));
        break;
      case "tool_call": case "tool_call_update": streaming = null; toolRow(u); break;
      case "permission_request": streaming = null; permission(data); break;
      case "permission_response": settle(data); break;
      default: break;
    }
  };
  const select = (sid) => {
    if (feed) feed.stop();
    current = sid;
    sessionStorage.setItem(lastSession(id), sid);
    replace(chat);
    tools.clear(); perms.clear(); streaming = null;
    send.disabled = cancel.disabled = false;
    state.textContent = `Session ${sid}`;
    feed = followSession(id, sid, { onEvent,
      onState: (s, err) => { if (err) error.textContent = describe(err); if (s === "retrying") state.textContent = "Reconnecting…"; if (s === "open") state.textContent = `Session ${sid}`; } });
    loadSessions();
  };
  const loadSessions = async () => {
    try {
      const res = await call("GET", vmPath(id, "/sessions") + q({ limit: 100 }));
      if (!res.items.length) { replace(sessionList, h("li", { class: "muted" }, "No sessions yet.")); return; }
      replace(sessionList, res.items.map((s) => h("li", {}, h("button", { type: "button", "aria-current": s.id === current ? "true" : null, onclick: () => select(s.id) },
        `${s.id} · ${s.agent} · ${s.state}`))));
    } catch (err) { error.textContent = describe(err); }
  };

  const openForm = h("form", { class: "card", "aria-label": "Open a session", onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = "";
    try {
      const req = { agent: agent.value, cwd: cwd.value.trim() || undefined, permissionPolicy: policy.value, env: parsePairs(env.value, "Environment") };
      const btn = openForm.querySelector("button[type=submit]");
      btn.disabled = true;
      state.textContent = "Opening the session…";
      try {
        const s = await call("POST", vmPath(id, "/sessions"), { json: req });
        select(s.id);
      } finally { btn.disabled = false; }
    } catch (err) { state.textContent = ""; error.textContent = describe(err); }
  } },
  h("div", { class: "row" }, field("Agent", agent), field("Permissions", policy), field("Working directory", cwd), field("Session environment", env)),
  h("button", { type: "submit", class: "primary" }, "Open session"));

  const chatForm = h("form", { class: "row compose", onsubmit: async (e) => {
    e.preventDefault();
    const text = message.value.trim();
    if (!text || !current) return;
    error.textContent = "";
    try {
      await call("POST", vmPath(id, `/sessions/${current}/prompt`), { json: { content: [{ type: "text", text }] }, headers: { Prefer: "respond-async" } });
      message.value = "";
    } catch (err) { error.textContent = describe(err); }
  } }, field("Message", message), send, cancel);
  message.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); chatForm.requestSubmit(); } });

  replace(panel, openForm, h("div", { class: "sessionview" }, h("div", { class: "side" }, h("h2", {}, "Sessions"), sessionList),
    h("div", { class: "main" }, state, chat, chatForm)), error);

  call("GET", vmPath(id, "/agents")).then((res) => {
    const installed = res.items.filter((a) => a.installed);
    replace(agent, (installed.length ? installed : res.items).map((a) => h("option", { value: a.id }, a.id + (a.installed ? "" : " (not installed)"))));
  }).catch((err) => { error.textContent = describe(err); });
  const last = sessionStorage.getItem(lastSession(id));
  if (last) select(last); else loadSessions();
  return () => { if (feed) feed.stop(); };
}
