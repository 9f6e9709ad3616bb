import type { components } from "./schema.js";
import { AgentosError, type ErrorCode } from "./errors.js";
import { abortReason, bytes } from "./http.js";

type Schemas = components["schemas"];

/** A WebSocket constructor with the browser's API: globalThis.WebSocket, or one passed to the Client (Node 20 has none). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocket;

/** The subprotocol the gateway's attach endpoints speak. */
export const attachProtocol = "agentos-gateway.v1";
/** Prefixes the subprotocol that carries the credential, since browsers cannot set headers on a WebSocket. */
export const bearerProtocolPrefix = "bearer.agentos-gateway.";

const tokenChars = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * The subprotocol carrying a credential: as it is when a subprotocol may
 * hold it (gateway keys are tokens), else base64url without padding, which
 * the gateway accepts too.
 */
export function bearerProtocol(credential: string): string {
  if (tokenChars.test(credential)) return bearerProtocolPrefix + credential;
  let s = "";
  for (const b of new TextEncoder().encode(credential)) s += String.fromCharCode(b);
  return bearerProtocolPrefix + btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Output of an attached shell or process: the next sequence number's bytes. */
export interface AttachOutput {
  type: "output";
  seq: number;
  /** For a process, the stream the bytes came from; a shell's output is its terminal's. */
  stream?: "stdout" | "stderr";
  data: Uint8Array;
}

/** Output from..to was dropped from the gateway's bounded buffer; the next output is to+1. */
export interface AttachGap {
  type: "gap";
  from: number;
  to: number;
}

/** The gateway refused input or a control frame; the connection stays. */
export interface AttachRefusal {
  type: "error";
  code: ErrorCode;
  detail: string;
}

/**
 * The end: the exit status, or the code and detail of why it is
 * unknowable (the VM ended, its sidecar died). seq is the last sequence.
 */
export interface AttachExit {
  type: "exit";
  seq: number;
  exitCode?: number;
  signal?: string;
  code?: ErrorCode;
  detail?: string;
}

export type AttachEvent = AttachOutput | AttachGap | AttachRefusal | AttachExit;

export interface AttachOptions {
  /** Resume after this output sequence number (the lastSeq of an earlier connection). */
  after?: number;
  signal?: AbortSignal;
}

/** The connection closed before the exit frame; attach again with after: lastSeq. */
export class AttachClosedError extends Error {
  constructor(
    readonly closeCode: number,
    readonly reason: string,
  ) {
    super(`agentos-gateway: attach connection closed (${closeCode}${reason ? ` ${reason}` : ""}) before the exit`);
    this.name = "AttachClosedError";
  }
}

/**
 * A WebSocket attached to a shell or a process. Iterate over its events
 * with `for await`: the loop ends after the exit frame, that is when the
 * shell or process ends, and throws AttachClosedError when the connection
 * ends before it. Send input with send right away: what is sent before the
 * connection is open waits for it and goes first, in order (opened() is
 * only needed to learn that the gateway accepted the connection). lastSeq
 * is the sequence number of the last output received, to resume with
 * `attach({after: conn.lastSeq})` after a dropped connection.
 */
export class AttachConnection implements AsyncIterable<AttachEvent> {
  private seq = 0;
  private readonly queue: AttachEvent[] = [];
  private waiter: (() => void) | undefined;
  private ended: { error?: unknown } | undefined;
  private readonly openPromise: Promise<void>;
  /**
   * Frames sent while the WebSocket was connecting, for which the browser's
   * send throws InvalidStateError; undefined once it is open or closed.
   */
  private pending: (Uint8Array | string)[] | undefined = [];

  /** @internal */
  constructor(
    private readonly ws: WebSocket,
    private readonly processFrames: boolean,
    after: number,
    signal: AbortSignal | undefined,
  ) {
    this.seq = after;
    ws.binaryType = "arraybuffer";
    this.openPromise = new Promise<void>((resolve, reject) => {
      ws.addEventListener(
        "open",
        () => {
          // The queued frames go out before opened() resolves, so that what
          // a caller sends after awaiting it follows them.
          const frames = this.pending ?? [];
          this.pending = undefined;
          for (const f of frames) ws.send(f);
          resolve();
        },
        { once: true },
      );
      ws.addEventListener(
        "close",
        (e) => {
          // Input queued for a connection that never opened has nowhere to go;
          // iteration and opened() report why.
          this.pending = undefined;
          reject(new AttachClosedError(e.code, e.reason));
        },
        { once: true },
      );
    });
    // A rejection nobody awaits must not crash a Node process: iteration reports the same end.
    this.openPromise.catch(() => undefined);
    ws.addEventListener("message", (m: MessageEvent) => this.onMessage(m.data));
    ws.addEventListener("close", (e: CloseEvent) => {
      if (!this.ended) this.finish({ error: new AttachClosedError(e.code, e.reason) });
    });
    if (signal) {
      const onAbort = () => {
        this.finish({ error: abortReason(signal) });
        ws.close(1000);
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
  }

  /**
   * Resolves once the connection is open; rejects when it closed before (a
   * refused key, an unknown target). Sending does not need it.
   */
  opened(): Promise<void> {
    return this.openPromise;
  }

  /** The sequence number of the last output received (or skipped over by a gap). */
  get lastSeq(): number {
    return this.seq;
  }

  /**
   * Sends input: a shell's keystrokes or a process's stdin bytes (at most
   * 64 KiB a frame). Before the connection is open the input waits for it;
   * after the connection closed it is dropped, as the WebSocket drops it.
   */
  send(data: string | Uint8Array): void {
    this.sendFrame(bytes(data));
  }

  /** Changes a shell's terminal size. */
  resize(cols: number, rows: number): void {
    const frame: Schemas["AttachShellControl"] = { type: "resize", cols, rows };
    this.sendFrame(JSON.stringify(frame));
  }

  /** Closes an attached process's stdin, in order with the input sent before. */
  closeStdin(): void {
    this.sendFrame(JSON.stringify({ type: "close_stdin" }));
  }

  /** Sends an attached process a signal, such as "SIGTERM". */
  signal(signal: string): void {
    this.sendFrame(JSON.stringify({ type: "signal", signal }));
  }

  private sendFrame(frame: Uint8Array | string): void {
    if (this.ws.readyState === 0 && this.pending) {
      // A copy, since the caller may reuse its buffer before the frame goes.
      this.pending.push(typeof frame === "string" ? frame : frame.slice());
      return;
    }
    // A WebSocket that is closing or closed discards the frame itself.
    this.ws.send(frame);
  }

  /** Closes the connection; the shell or process goes on. */
  close(): void {
    this.finish({});
    this.ws.close(1000);
  }

  private onMessage(data: unknown): void {
    if (typeof data === "string") {
      let f: Schemas["AttachServerFrame"];
      try {
        f = JSON.parse(data) as Schemas["AttachServerFrame"];
      } catch {
        return;
      }
      switch (f.type) {
        case "hello":
          this.seq = f.seq ?? this.seq;
          return;
        case "gap":
          this.seq = f.to ?? this.seq;
          this.push({ type: "gap", from: f.from ?? 0, to: f.to ?? 0 });
          return;
        case "error":
          this.push({ type: "error", code: f.code ?? "internal", detail: f.detail ?? "" });
          return;
        case "exit": {
          const ev: AttachExit = { type: "exit", seq: f.seq ?? this.seq };
          if (f.exitCode !== undefined) ev.exitCode = f.exitCode;
          if (f.signal) ev.signal = f.signal;
          if (f.code) ev.code = f.code;
          if (f.detail) ev.detail = f.detail;
          this.push(ev);
          this.finish({});
          return;
        }
      }
      return;
    }
    if (!(data instanceof ArrayBuffer)) return;
    let b = new Uint8Array(data);
    this.seq++;
    const ev: AttachOutput = { type: "output", seq: this.seq, data: b };
    if (this.processFrames) {
      ev.stream = b[0] === 2 ? "stderr" : "stdout";
      b = b.subarray(1);
      ev.data = b;
    }
    this.push(ev);
  }

  private push(ev: AttachEvent): void {
    if (this.ended) return;
    this.queue.push(ev);
    this.wake();
  }

  private finish(end: { error?: unknown }): void {
    if (this.ended) return;
    this.ended = end;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<AttachEvent> {
    try {
      for (;;) {
        const ev = this.queue.shift();
        if (ev) {
          yield ev;
          continue;
        }
        if (this.ended) {
          if (this.ended.error !== undefined) throw this.ended.error;
          return;
        }
        await new Promise<void>((resolve) => (this.waiter = resolve));
      }
    } finally {
      if (this.ws.readyState === 0 || this.ws.readyState === 1) this.ws.close(1000);
    }
  }
}

/** Opens an attach WebSocket at an http(s) URL of the gateway, with the credential as a subprotocol. */
export function openAttach(
  WS: WebSocketConstructor | undefined,
  httpUrl: string,
  credential: string | undefined,
  processFrames: boolean,
  o: AttachOptions,
): AttachConnection {
  if (!WS) {
    throw new Error(
      "agentos-gateway: no WebSocket implementation: this runtime has no global WebSocket (Node 20 needs --experimental-websocket); pass one as the Client's WebSocket option",
    );
  }
  const url = httpUrl.replace(/^http/, "ws");
  const protocols = [attachProtocol];
  if (credential) protocols.push(bearerProtocol(credential));
  const ws = new WS(url, protocols);
  if (o.signal?.aborted) {
    ws.close(1000);
    throw abortReason(o.signal);
  }
  return new AttachConnection(ws, processFrames, o.after ?? 0, o.signal);
}

/** Turns an attach exit that carries a code into the AgentosError it stands for. */
export function exitError(ev: AttachExit): AgentosError | undefined {
  return ev.code ? new AgentosError({ status: 0, code: ev.code, detail: ev.detail ?? "" }) : undefined;
}
