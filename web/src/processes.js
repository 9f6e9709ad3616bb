// The Processes tab: a Command box whose Run streams the output and the
// exit code, and the VM's processes, each with its live output, stdin and
// kill.
import { call, describe, execStream, followProcess, outputText, raw, vmPath } from "./api.js";
import { field, h, replace } from "./dom.js";

export function processesTab(panel, vm) {
  const id = vm.id;
  const error = h("p", { class: "error", role: "alert" });
  const cmd = h("input", { spellcheck: false, autocomplete: "off", placeholder: "echo hello; ls /" });
  const out = h("pre", { class: "output", "aria-label": "Command output", "aria-live": "polite" });
  const exit = h("p", { class: "exit", role: "status", "data-testid": "exit-status" });
  const background = h("input", { type: "checkbox" });
  const streams = new Set();
  let running = null;

  const runBtn = h("button", { type: "submit", class: "primary" }, "Run");
  const form = h("form", { class: "row", onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = "";
    const command = cmd.value.trim();
    if (!command) { error.textContent = "Type a command first."; return; }
    if (background.checked) {
      try { await call("POST", vmPath(id, "/processes"), { json: { command } }); loadList(); } catch (err) { error.textContent = describe(err); }
      return;
    }
    if (running) running.stop();
    replace(out);
    exit.textContent = "Running…";
    runBtn.disabled = true;
    running = execStream(id, command, {
      onEvent: (name, data) => {
        if (name === "stdout" || name === "stderr") out.append(h("span", { class: name }, outputText(data)));
        else if (name === "exit") exit.textContent = `Exit code ${data.exitCode}${data.signal ? " (" + data.signal + ")" : ""}${data.truncated ? ", output truncated" : ""}, ${data.durationMs} ms`;
        else if (name === "error") exit.textContent = `Ended: ${data.detail} (${data.code})`;
      },
      onState: (s, err) => {
        if (s !== "ended") return;
        runBtn.disabled = false;
        if (err) { exit.textContent = ""; error.textContent = describe(err); }
      } });
  } }, field("Command", cmd), h("label", { class: "check" }, background, "in the background"), runBtn);

  const listBody = h("div", { class: "procs" }, h("p", { class: "muted" }, "Loading processes…"));
  const follow = (p, pre, state) => {
    const s = followProcess(id, p.pid, {
      onEvent: (name, data) => {
        if (name === "stdout" || name === "stderr") { pre.append(h("span", { class: name }, outputText(data))); pre.scrollTop = pre.scrollHeight; }
        if (name === "exit") state.textContent = `exited ${data.exitCode}${data.signal ? " (" + data.signal + ")" : ""}`;
      } });
    streams.add(s);
  };
  const seen = new Map();
  const loadList = async () => {
    try {
      const res = await call("GET", vmPath(id, "/processes"));
      if (!res.items.length) { replace(listBody, h("p", { class: "muted" }, "No processes: run one in the background.")); return; }
      const fresh = res.items.filter((p) => !seen.has(p.pid));
      if (!fresh.length && seen.size === res.items.length) {
        for (const p of res.items) if (!p.running) seen.get(p.pid).state.textContent = p.exit ? `exited ${p.exit.exitCode}` : "ended";
        return;
      }
      if (seen.size === 0) replace(listBody);
      for (const p of fresh) {
        const pre = h("pre", { class: "output small", "aria-label": `Output of process ${p.pid}` });
        const state = h("span", { class: "muted" }, p.running ? "running" : p.exit ? `exited ${p.exit.exitCode}` : "ended");
        const stdin = h("input", { spellcheck: false });
        const card = h("article", { class: "card proc", "aria-label": `Process ${p.pid}` },
          h("div", { class: "row" }, h("strong", {}, `${p.pid}`), h("code", {}, [p.command, ...p.args].join(" ")), state,
            h("button", { type: "button", class: "danger", onclick: async () => {
              try { await call("POST", vmPath(id, `/processes/${p.pid}/signal`), { json: { signal: "SIGKILL" } }); } catch (err) { error.textContent = describe(err); }
            } }, "Kill")),
          pre,
          h("form", { class: "row", onsubmit: async (e) => {
            e.preventDefault();
            try {
              await raw("POST", vmPath(id, `/processes/${p.pid}/stdin`), { body: stdin.value + "\n", headers: { "Content-Type": "application/octet-stream" } });
              stdin.value = "";
            } catch (err) { error.textContent = describe(err); }
          } }, field(`Stdin of ${p.pid}`, stdin), h("button", { type: "submit" }, "Send input")));
        seen.set(p.pid, { state });
        listBody.prepend(card);
        follow(p, pre, state);
      }
    } catch (err) { error.textContent = describe(err); }
  };

  replace(panel, form, exit, out, error, h("h2", {}, "Processes"), listBody);
  loadList();
  const timer = setInterval(loadList, 3000);
  return () => { clearInterval(timer); if (running) running.stop(); for (const s of streams) s.stop(); };
}
