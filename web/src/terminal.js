// The Terminal tab: xterm.js on a shell's attach WebSocket. The gateway's
// protocol numbers every binary output frame, so after a dropped connection
// the terminal attaches again with ?after=<last sequence> and loses nothing.
// The shell edits its line in the gateway and runs each line as a process
// of its own (README, Shells), so it asks the terminal nothing and never
// fails to start. Leaving the tab closes it.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { call, describe, protocols, vmPath, wsURL } from "./api.js";
import { h, replace } from "./dom.js";

export function terminalTab(panel, vm) {
  const status = h("span", { class: "muted", role: "status", "data-testid": "terminal-status" }, "Opening a shell…");
  const error = h("p", { class: "error", role: "alert" });
  const box = h("div", { class: "term", "data-testid": "terminal" });
  const reconnect = h("button", { type: "button", disabled: true, onclick: () => { if (ws) ws.close(4000, "reconnect"); } }, "Reconnect");
  const newShell = h("button", { type: "button", onclick: () => {
    if (shell && !ended) call("DELETE", vmPath(vm.id, `/shells/${shell}`)).catch(() => {});
    term.write("\r\n[new shell]\r\n");
    start();
  } }, "New shell");
  replace(panel, h("div", { class: "row" }, status, reconnect, newShell), box, error);

  const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14, scrollback: 5000,
    theme: { background: "#111418", foreground: "#e6e6e6" } });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  term.textarea?.setAttribute("aria-label", "Terminal input");

  let shell = null;
  let ws = null;
  let last = 0; // the sequence of the last output frame written
  let closed = false;
  let ended = false;
  let retry;
  const enc = new TextEncoder();

  const send = (data) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(typeof data === "string" ? enc.encode(data) : data); };
  term.onData((d) => send(d));
  term.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0))));
  // size is the shell's terminal size as last sent: a resize goes out only
  // when the size changed (each one signals the shell).
  let size = "";
  const resize = () => {
    fit.fit();
    const now = `${term.cols}x${term.rows}`;
    if (now === size || !ws || ws.readyState !== WebSocket.OPEN) return;
    size = now;
    ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
  };
  const observer = new ResizeObserver(() => resize());
  observer.observe(box);

  const connect = () => {
    ws = new WebSocket(wsURL(vmPath(vm.id, `/shells/${shell}/attach?after=${last}`)), protocols());
    ws.binaryType = "arraybuffer";
    ws.onopen = () => { status.textContent = `Connected to ${shell}`; reconnect.disabled = false; resize(); term.focus(); };
    ws.onmessage = (m) => {
      if (typeof m.data !== "string") { last++; term.write(new Uint8Array(m.data)); return; }
      const f = JSON.parse(m.data);
      if (f.type === "hello" || f.type === "exit") last = f.seq ?? last;
      if (f.type === "gap") { last = f.to; term.write(`\r\n[output ${f.from}-${f.to} was lost]\r\n`); }
      if (f.type === "error") error.textContent = `${f.detail} (${f.code})`;
      if (f.type === "exit") {
        ended = true;
        status.textContent = f.code ? `The shell ended: ${f.detail}` : `The shell exited with code ${f.exitCode}${f.signal ? " (" + f.signal + ")" : ""}`;
      }
    };
    ws.onclose = () => {
      reconnect.disabled = true;
      if (closed || ended) return;
      status.textContent = "Disconnected; reconnecting…";
      retry = setTimeout(connect, 500);
    };
  };

  const start = () => {
    ended = false;
    last = 0;
    if (ws) { ws.onclose = null; ws.close(1000, "new shell"); }
    size = `${term.cols}x${term.rows}`;
    call("POST", vmPath(vm.id, "/shells"), { json: { cols: term.cols, rows: term.rows } })
      .then((res) => {
        shell = res.shellId;
        if (closed) { call("DELETE", vmPath(vm.id, `/shells/${shell}`)).catch(() => {}); return; }
        connect();
      })
      .catch((err) => { status.textContent = "No shell"; error.textContent = describe(err); });
  };
  start();

  return () => {
    closed = true;
    clearTimeout(retry);
    observer.disconnect();
    if (ws) ws.close(1000, "tab closed");
    if (shell && !ended) call("DELETE", vmPath(vm.id, `/shells/${shell}`)).catch(() => {});
    term.dispose();
  };
}
