// The Terminal tab: xterm.js on a shell's attach WebSocket. The gateway's
// protocol numbers every binary output frame, so after a dropped connection
// the terminal attaches again with ?after=<last sequence> and loses nothing.
// The shell edits its line in the gateway and runs each line as a process
// of its own (README, Shells), so it asks the terminal nothing and never
// fails to start. Leaving the tab closes it.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { call, client, describe, vmPath } from "./api.js";
import { h, replace } from "./dom.js";

export function terminalTab(panel, vm) {
  const status = h("span", { class: "muted", role: "status", "data-testid": "terminal-status" }, "Opening a shell…");
  const error = h("p", { class: "error", role: "alert" });
  const box = h("div", { class: "term", "data-testid": "terminal" });
  const reconnect = h("button", { type: "button", disabled: true, onclick: () => { if (conn) conn.close(); } }, "Reconnect");
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
  let conn = null; // the SDK's attach connection, while one is open
  let last = 0; // the sequence of the last output frame written
  let closed = false;
  let ended = false;
  let retry;
  let open = false; // whether conn is open: input before that has nowhere to go

  const send = (data) => { if (conn && open) conn.send(data); };
  term.onData((d) => send(d));
  term.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0))));
  // size is the shell's terminal size as last sent: a resize goes out only
  // when the size changed (each one signals the shell).
  let size = "";
  const resize = () => {
    fit.fit();
    const now = `${term.cols}x${term.rows}`;
    if (now === size || !conn || !open) return;
    size = now;
    conn.resize(term.cols, term.rows);
  };
  const observer = new ResizeObserver(() => resize());
  observer.observe(box);

  // connect attaches after the last output written and writes what comes
  // until the shell ends or the connection drops; a drop (or Reconnect,
  // which closes the connection) attaches again. A connection that was
  // replaced by a new shell's stops without a word.
  const connect = async () => {
    const c = client().vm(vm.id).shell(shell).attach({ after: last });
    conn = c;
    try {
      await c.opened();
      open = true;
      status.textContent = `Connected to ${shell}`;
      reconnect.disabled = false;
      resize();
      term.focus();
      for await (const ev of c) {
        if (ev.type === "output") term.write(ev.data);
        if (ev.type === "gap") term.write(`\r\n[output ${ev.from}-${ev.to} was lost]\r\n`);
        if (ev.type === "error") error.textContent = `${ev.detail} (${ev.code})`;
        if (ev.type === "exit") {
          ended = true;
          status.textContent = ev.code ? `The shell ended: ${ev.detail}` : `The shell exited with code ${ev.exitCode}${ev.signal ? " (" + ev.signal + ")" : ""}`;
        }
      }
    } catch {
      // A dropped or refused connection: it is attached again below.
    }
    if (conn !== c) return;
    last = c.lastSeq;
    conn = null;
    open = false;
    reconnect.disabled = true;
    if (closed || ended) return;
    status.textContent = "Disconnected; reconnecting…";
    retry = setTimeout(connect, 500);
  };

  const start = () => {
    ended = false;
    last = 0;
    if (conn) { const old = conn; conn = null; open = false; old.close(); }
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
    if (conn) conn.close();
    if (shell && !ended) call("DELETE", vmPath(vm.id, `/shells/${shell}`)).catch(() => {});
    term.dispose();
  };
}
