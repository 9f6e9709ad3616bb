import type { components } from "./schema.js";
import { AgentosError, type ErrorCode } from "./errors.js";
import { abortReason, backoff, decodeData, sleep, type ResolvedRetryPolicy } from "./http.js";

type Schemas = components["schemas"];

/** A piece of a process's, a command's or a shell's output. */
export interface OutputEvent {
  type: "stdout" | "stderr";
  /** The output's sequence number, also the event id to resume after. */
  seq: number;
  /** The raw bytes, decoded from base64 when they travelled so. */
  data: Uint8Array;
  /** When the engine read the bytes (RFC 3339). */
  ts: string;
}

/** The final event of a process's or a command's output. truncated and durationMs are set by a streamed exec only. */
export interface ExitEvent {
  type: "exit";
  exitCode: number;
  signal?: string;
  truncated?: boolean;
  durationMs?: number;
}

/** Output (or events) with sequence numbers from..to was dropped from the gateway's bounded buffer before it was read. */
export type GapEvent = Schemas["GapEvent"] & { type: "gap" };

/** The final event of a shell's output: its exit status. */
export interface ShellEndEvent {
  type: "end";
  exitCode: number;
  signal?: string;
}

/** Ends a stream proxied from a gateway node that died: the VM is lost. */
export type LostEvent = Schemas["LostEvent"] & { type: "lost" };

/** An event this SDK does not know, as it came. */
export interface UnknownEvent {
  type: "unknown";
  event: string;
  data: string;
}

/** A VM's state change, limit warning or process exit. */
export interface VMStreamEvent {
  type: "vm";
  event: Schemas["VMEvent"];
}

/** The events of a session's stream. */
export type SessionStreamEvent =
  | { type: "durable"; event: Schemas["SessionEvent"] }
  | { type: "ephemeral"; event: Schemas["EphemeralEvent"] }
  | { type: "agent_stderr"; event: Schemas["AgentStderrEvent"] }
  | { type: "agent_exit"; event: Schemas["AgentExitEvent"] }
  | { type: "overflow"; event: Schemas["OverflowEvent"] }
  | { type: "end"; state: Schemas["SessionEndEvent"]["state"] }
  | LostEvent
  | UnknownEvent;

/** A change under a watched directory (create, modify, delete, rename). */
export type FileChangeEvent = Schemas["WatchEvent"];

/** Changes were lost and the watcher's view must be rebuilt. */
export interface ResyncEvent {
  type: "resync";
  reason: Schemas["WatchResyncEvent"]["reason"];
}

export type ExecStreamEvent = OutputEvent | ExitEvent | LostEvent | UnknownEvent;
export type ProcessStreamEvent = OutputEvent | GapEvent | ExitEvent | LostEvent | UnknownEvent;
export type ShellStreamEvent = OutputEvent | GapEvent | ShellEndEvent | LostEvent | UnknownEvent;
export type VMEventsStreamEvent = VMStreamEvent | GapEvent | LostEvent | UnknownEvent;
export type WatchStreamEvent = FileChangeEvent | ResyncEvent | GapEvent | LostEvent | UnknownEvent;

export type StreamKind = "exec" | "process" | "shell" | "vm" | "session" | "watch";

/** One Server-Sent Event as it came. */
export interface RawEvent {
  id: string;
  type: string;
  data: string;
}

/** Bounds one event (its data and any single line), as the Go client's DefaultMaxEventSize. */
const maxEventSize = 16 << 20;

/** The parser's state that outlives one connection: the last event id. */
interface ParserState {
  lastEventId: string;
}

/**
 * Parses a text/event-stream body as the HTML spec says, yielding events
 * with data; comments (the gateway's heartbeats) are skipped. It returns
 * when the body ends, whether or not a final event came.
 */
export async function* parseSSE(body: ReadableStream<Uint8Array>, st: ParserState, onChunk: () => void): AsyncGenerator<RawEvent> {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let first = true;
  let type = "";
  let data = "";
  let hasData = false;
  let idBuf = st.lastEventId;
  const eol = /[\r\n]/g;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onChunk();
      buf += dec.decode(value, { stream: true });
      if (first && buf.length > 0) {
        first = false;
        if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
      }
      let start = 0;
      const events: RawEvent[] = [];
      for (;;) {
        eol.lastIndex = start;
        const m = eol.exec(buf);
        if (!m) break;
        const i = m.index;
        // A CR at the end of what arrived may be the first half of a CRLF.
        if (buf[i] === "\r" && i + 1 === buf.length) break;
        const line = buf.slice(start, i);
        start = i + (buf[i] === "\r" && buf[i + 1] === "\n" ? 2 : 1);
        if (line === "") {
          // As the spec says, the last event id is updated even by an event without data.
          st.lastEventId = idBuf;
          if (hasData) events.push({ id: idBuf, type: type || "message", data });
          type = "";
          data = "";
          hasData = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        switch (field) {
          case "event":
            type = value;
            break;
          case "data":
            data = hasData ? `${data}\n${value}` : value;
            hasData = true;
            if (data.length > maxEventSize) throw new Error(`agentos-gateway: server-sent event larger than ${maxEventSize} bytes`);
            break;
          case "id":
            if (!value.includes("\0")) idBuf = value;
            break;
        }
      }
      buf = buf.slice(start);
      if (buf.length > maxEventSize) throw new Error(`agentos-gateway: server-sent event line larger than ${maxEventSize} bytes`);
      for (const ev of events) yield ev;
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

function parse<T>(raw: RawEvent): T {
  try {
    return JSON.parse(raw.data) as T;
  } catch (e) {
    throw new Error(`agentos-gateway: decode ${JSON.stringify(raw.type)} event: ${String(e)}`);
  }
}

type Decoded = { event: unknown; final: boolean };

/**
 * Turns one event of a stream of the given kind into its typed value. An
 * `error` event is thrown as the AgentosError it carries (status 0).
 */
export function decodeEvent(kind: StreamKind, raw: RawEvent): Decoded {
  const t = raw.type;
  if (t === "error") {
    const w = parse<Partial<Schemas["ErrorEvent"]>>(raw);
    throw new AgentosError({ status: 0, code: (w.code || "internal") as ErrorCode, detail: w.detail ?? "" });
  }
  if (t === "lost") return { event: { ...parse<Schemas["LostEvent"]>(raw), type: "lost" } satisfies LostEvent, final: true };
  if (t === "gap") return { event: { ...parse<Schemas["GapEvent"]>(raw), type: "gap" } satisfies GapEvent, final: false };
  switch (kind) {
    case "watch": {
      if (t === "resync") return { event: { type: "resync", reason: parse<Schemas["WatchResyncEvent"]>(raw).reason } satisfies ResyncEvent, final: false };
      if (t === "create" || t === "modify" || t === "delete" || t === "rename") {
        const w = parse<FileChangeEvent>(raw);
        return { event: { ...w, type: w.type || t }, final: false };
      }
      break;
    }
    case "vm":
      return { event: { type: "vm", event: parse<Schemas["VMEvent"]>(raw) } satisfies VMStreamEvent, final: false };
    case "session":
      switch (t) {
        case "durable": return { event: { type: t, event: parse<Schemas["SessionEvent"]>(raw) }, final: false };
        case "ephemeral": return { event: { type: t, event: parse<Schemas["EphemeralEvent"]>(raw) }, final: false };
        case "agent_stderr": return { event: { type: t, event: parse<Schemas["AgentStderrEvent"]>(raw) }, final: false };
        case "agent_exit": return { event: { type: t, event: parse<Schemas["AgentExitEvent"]>(raw) }, final: false };
        case "overflow": return { event: { type: t, event: parse<Schemas["OverflowEvent"]>(raw) }, final: false };
        case "end": return { event: { type: t, state: parse<Schemas["SessionEndEvent"]>(raw).state }, final: true };
      }
      break;
    default: {
      if (t === "stdout" || t === "stderr") {
        const w = parse<Schemas["OutputEvent"]>(raw);
        const ev: OutputEvent = { type: w.stream || t, seq: w.seq, data: decodeData(w.data, w.encoding), ts: w.ts };
        return { event: ev, final: false };
      }
      const exitEvent = (kind === "exec" || kind === "process") && t === "exit";
      if (exitEvent || (kind === "shell" && t === "end")) {
        // The exec's exit event is the process's with two fields more.
        const w = parse<Partial<Schemas["ExecExitEvent"]>>(raw);
        const status: { exitCode: number; signal?: string } = { exitCode: w.exitCode ?? 0 };
        if (w.signal) status.signal = w.signal;
        if (t === "end") return { event: { type: "end", ...status } satisfies ShellEndEvent, final: true };
        const ev: ExitEvent = { type: "exit", ...status };
        if (kind === "exec") {
          ev.truncated = w.truncated ?? false;
          ev.durationMs = w.durationMs ?? 0;
        }
        return { event: ev, final: true };
      }
    }
  }
  return { event: { type: "unknown", event: t, data: raw.data } satisfies UnknownEvent, final: false };
}

/** The answer of a stream request was 2xx but not an event stream. */
export class NotEventStreamError extends Error {
  constructor(ctype: string) {
    super(`agentos-gateway: the answer is not an event stream (${ctype || "no Content-Type"})`);
    this.name = "NotEventStreamError";
  }
}

/** A connection that ended (or went idle) before the stream's final event. */
export class StreamCutError extends Error {
  constructor(message: string) {
    super(`agentos-gateway: ${message}`);
    this.name = "StreamCutError";
  }
}

/** Says whether reconnecting a followed stream could help. */
function retryStream(err: unknown): boolean {
  if (err instanceof AgentosError) return [429, 502, 503, 504].includes(err.status);
  if (err instanceof NotEventStreamError) return false;
  if (err instanceof Error && err.name === "AbortError") return false;
  // Network failures, a cut connection, an idle timeout.
  return true;
}

export type OpenFn = (lastEventId: string, signal: AbortSignal) => Promise<Response>;

export interface EventStreamOptions {
  /** Resume after this event id (Last-Event-ID). */
  lastEventId?: string;
  signal?: AbortSignal | undefined;
  /** Reconnect with Last-Event-ID after a dropped connection. */
  follow: boolean;
  /** A VM's stream ends normally with a conflict error event once the VM ended. */
  vmEvents?: boolean;
  /** Idle timeout of one connection, 0 for none. */
  idleTimeoutMs: number;
  retry: ResolvedRetryPolicy;
}

/**
 * An open stream of the gateway's typed events: iterate over it with
 * `for await`. It ends after the stream's final event (an exit, a shell's
 * or a session's end); a final `error` event is thrown as an AgentosError
 * with status 0. A followed stream reconnects with Last-Event-ID after a
 * dropped connection, so that no event is lost or repeated (a gap event
 * says when the gateway's buffer no longer held the resume point).
 * Breaking out of the loop, close() or the signal frees the connection.
 */
export class EventStream<E> implements AsyncIterable<E> {
  private last: string;
  private readonly closer = new AbortController();
  private started = false;

  constructor(
    private readonly kind: StreamKind,
    private readonly open: OpenFn,
    private readonly o: EventStreamOptions,
  ) {
    this.last = o.lastEventId ?? "";
  }

  /** The id of the last event read (or of the last id field): resume after it. */
  get lastEventId(): string {
    return this.last;
  }

  /** Ends the stream and frees its connection; a pending read rejects with an AbortError. */
  close(): void {
    this.closer.abort(new DOMException("The stream was closed.", "AbortError"));
  }

  [Symbol.asyncIterator](): AsyncIterator<E> {
    if (this.started) throw new Error("agentos-gateway: an EventStream can be iterated once");
    this.started = true;
    return this.run();
  }

  private async *run(): AsyncGenerator<E> {
    const outer = this.o.signal ? AbortSignal.any([this.o.signal, this.closer.signal]) : this.closer.signal;
    let failures = 0;
    for (;;) {
      const conn = new AbortController();
      const onOuter = () => conn.abort(abortReason(outer));
      outer.addEventListener("abort", onOuter, { once: true });
      if (outer.aborted) onOuter();
      let idle = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const arm = () => {
        if (this.o.idleTimeoutMs <= 0) return;
        if (timer !== undefined) clearTimeout(timer);
        timer = setTimeout(() => {
          idle = true;
          conn.abort(new StreamCutError("stream idle: no event or heartbeat received in time"));
        }, this.o.idleTimeoutMs);
      };
      let progressed = false;
      let err: unknown;
      try {
        arm();
        const resp = await this.open(this.last, conn.signal);
        const ctype = resp.headers.get("Content-Type") ?? "";
        if (!ctype.toLowerCase().startsWith("text/event-stream") || !resp.body) {
          await resp.body?.cancel();
          throw new NotEventStreamError(ctype);
        }
        const st = { lastEventId: this.last };
        for await (const raw of parseSSE(resp.body, st, arm)) {
          this.last = st.lastEventId;
          const d = decodeEvent(this.kind, raw);
          progressed = true;
          yield d.event as E;
          if (d.final) return;
        }
        this.last = st.lastEventId;
        err = new StreamCutError("the connection ended before the stream's final event");
      } catch (e) {
        err = idle ? new StreamCutError("stream idle: no event or heartbeat received in time") : e;
      } finally {
        if (timer !== undefined) clearTimeout(timer);
        outer.removeEventListener("abort", onOuter);
        conn.abort();
      }
      if (outer.aborted) throw abortReason(outer);
      if (err instanceof AgentosError && err.status === 0) {
        // A final error event: the gateway said why the stream ended, and
        // reconnecting cannot change it. A VM's stream ends so once the VM
        // ended, after the event of its final state.
        if (this.o.vmEvents && err.code === "conflict") return;
        throw err;
      }
      if (!this.o.follow || !retryStream(err)) throw err;
      if (progressed) failures = 0;
      failures++;
      if (failures >= this.o.retry.maxAttempts) {
        throw new StreamCutError(`stream lost, giving up after ${failures} attempts: ${err instanceof Error ? err.message : String(err)}`);
      }
      await sleep(backoff(this.o.retry, failures, err), outer);
    }
  }
}
