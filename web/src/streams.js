// The gateway's event streams as the pages follow them: the SDK reads and
// resumes each stream, and every event reaches the page as
// onEvent(name, data, id), with onState("open" | "retrying" | "ended", err)
// telling of the connection. Each follow returns { stop() }.
import { client } from "./client.js";

// A page follows a stream until it ends or the page stops it, however often
// the connection drops, so its Client never gives up reconnecting.
const forever = { maxAttempts: Number.MAX_SAFE_INTEGER };

// wire gives an SDK event the name and data it had on the wire: the SDK
// wraps a VM's and a session's events, and keeps events it does not know
// as text.
function wire(ev) {
  if (ev.type === "vm") return [ev.event.type, ev.event];
  if (ev.type === "unknown") return [ev.event, ev.data];
  if (ev.event && typeof ev.event === "object") return [ev.type, ev.event];
  return [ev.type, ev];
}

// follow opens a stream with open(client, signal) and reports it. The SDK
// reconnects by itself, so the Client's fetch is wrapped to tell the page
// when a connection opens and when one is tried again. A stream's final
// error event, which the SDK throws as an AgentosError with status 0, is
// passed on as the event it was.
function follow(open, { onEvent, onState = () => {} }) {
  const ctl = new AbortController();
  let tries = 0;
  const fetchAndTell = async (url, init) => {
    if (tries++ > 0) onState("retrying");
    const resp = await fetch(url, init);
    if (resp.ok) onState("open");
    return resp;
  };
  const events = open(client({ fetch: fetchAndTell, retry: forever }), ctl.signal);
  (async () => {
    try {
      for await (const ev of events) {
        const [name, data] = wire(ev);
        onEvent(name, data, events.lastEventId);
      }
      onState("ended");
    } catch (err) {
      if (ctl.signal.aborted) return;
      if (err.name === "AgentosError" && err.status === 0) {
        onEvent("error", { code: err.code, detail: err.detail }, events.lastEventId);
        onState("ended");
        return;
      }
      onState("ended", err);
    }
  })();
  return { stop() { ctl.abort(); } };
}

export const followVM = (vm, handlers) => follow((c, signal) => c.vm(vm).events({ signal }), handlers);
export const followSession = (vm, session, handlers) => follow((c, signal) => c.vm(vm).session(session).events({ signal }), handlers);
export const followProcess = (vm, pid, handlers) => follow((c, signal) => c.vm(vm).process(pid).follow({ signal }), handlers);

// execStream runs a command and streams its output. The SDK never sends it
// twice: a command must not run twice.
export const execStream = (vm, command, handlers) => follow((c, signal) => c.vm(vm).execStream({ command }, { signal }), handlers);
