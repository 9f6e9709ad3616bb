import { AgentosError, errorFromResponse } from "./errors.js";

/**
 * How idempotent calls are retried and how followed streams reconnect,
 * as the Go client's RetryPolicy.
 *
 * A call is retried when the gateway answered 429 or 503 (it did not run
 * the call) and the call is idempotent: GET, HEAD, PUT and DELETE, and any
 * call sent with an idempotency key. GET, HEAD and keyed calls are also
 * retried after a network failure, since running them twice is harmless. A
 * call whose body is a stream is never retried, because it cannot be sent
 * again.
 */
export interface RetryPolicy {
  /** Attempts of one call, and consecutive failed reconnections of a followed stream. Default 5; 1 disables retries. */
  maxAttempts?: number;
  /** Bounds of the exponential, jittered wait between attempts. Defaults 200 ms and 5 s. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /**
   * Idle timeout of followed streams, so that a connection that silently
   * died is noticed (the gateway sends a heartbeat every 15 s by default).
   * Default 60 s; 0 or less disables it.
   */
  idleTimeoutMs?: number;
}

export type ResolvedRetryPolicy = Required<RetryPolicy>;

export function resolveRetry(p: RetryPolicy | undefined): ResolvedRetryPolicy {
  const maxAttempts = p?.maxAttempts && p.maxAttempts > 0 ? p.maxAttempts : 5;
  const minBackoffMs = p?.minBackoffMs && p.minBackoffMs > 0 ? p.minBackoffMs : 200;
  let maxBackoffMs = p?.maxBackoffMs && p.maxBackoffMs > 0 ? p.maxBackoffMs : 5000;
  if (maxBackoffMs < minBackoffMs) maxBackoffMs = minBackoffMs;
  const idleTimeoutMs = p?.idleTimeoutMs === undefined ? 60_000 : p.idleTimeoutMs;
  return { maxAttempts, minBackoffMs, maxBackoffMs, idleTimeoutMs };
}

/** The wait before attempt failures+1: exponential, jittered, and at least the gateway's Retry-After (up to a minute). */
export function backoff(p: ResolvedRetryPolicy, failures: number, err: unknown): number {
  let d = p.minBackoffMs;
  for (let i = 1; i < failures && d < p.maxBackoffMs; i++) d *= 2;
  d = Math.min(d, p.maxBackoffMs);
  d = d / 2 + Math.random() * (d / 2);
  if (err instanceof AgentosError && err.retryAfterMs !== undefined && err.retryAfterMs > d) {
    d = Math.min(err.retryAfterMs, 60_000);
  }
  return d;
}

/** The reason an aborted signal carries, as an Error. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("The operation was aborted.", "AbortError");
}

/** Waits ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(abortReason(signal!));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A request body: JSON values travel as JSON, the rest as it is. */
export type Body = string | Uint8Array | Blob | ReadableStream<Uint8Array>;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | (string | number)[]>;
  /** A JSON body; exclusive with body. */
  json?: unknown;
  body?: Body;
  contentType?: string;
  accept?: string;
  headers?: Record<string, string>;
  idempotencyKey?: string;
  signal?: AbortSignal | undefined;
  /** Statuses outside 2xx that are answers rather than errors (304 for conditional reads). */
  okStatuses?: number[];
  /** Sends the request once, for callers that retry themselves (followed streams). */
  once?: boolean;
}

/** Options every call of the SDK takes. */
export interface CallOptions {
  /** Cancels the call, and for streams the whole stream. */
  signal?: AbortSignal;
}

/** Options of the calls that accept an Idempotency-Key. */
export interface IdempotentCallOptions extends CallOptions {
  /**
   * Sent as Idempotency-Key: a retry with the same key within 24 h gets the
   * first outcome and never runs the call twice, so the SDK also retries
   * such a call after a dropped connection.
   */
  idempotencyKey?: string;
}

export interface TransportOptions {
  baseUrl: string;
  credential: string | undefined;
  fetch: typeof fetch;
  retry: ResolvedRetryPolicy;
}

function isRetryableStatus(status: number): boolean {
  return status === 429 || status === 503;
}

/** The HTTP layer: authentication, problems as AgentosError, and the retries of idempotent calls. */
export class Transport {
  readonly baseUrl: string;
  readonly credential: string | undefined;
  readonly retry: ResolvedRetryPolicy;
  private readonly fetchFn: typeof fetch;

  constructor(o: TransportOptions) {
    let u: URL;
    try {
      u = new URL(o.baseUrl);
    } catch {
      throw new TypeError(`agentos-gateway: base URL ${JSON.stringify(o.baseUrl)} is not a URL`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new TypeError(`agentos-gateway: base URL ${JSON.stringify(o.baseUrl)}: the scheme must be http or https`);
    }
    if (u.search || u.hash || u.username || u.password) {
      throw new TypeError(`agentos-gateway: base URL ${JSON.stringify(o.baseUrl)} may not carry a query, a fragment or user information`);
    }
    this.baseUrl = u.toString().replace(/\/+$/, "");
    this.credential = o.credential || undefined;
    this.retry = o.retry;
    this.fetchFn = o.fetch;
  }

  url(path: string, query?: RequestOptions["query"]): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      if (Array.isArray(v)) for (const item of v) params.append(k, String(item));
      else params.set(k, String(v));
    }
    const qs = params.toString();
    if (!qs) return this.baseUrl + path;
    // A path may carry a query of its own (Client.request takes one a
    // caller built): the options' parameters join it.
    return this.baseUrl + path + (path.includes("?") ? "&" : "?") + qs;
  }

  /**
   * Sends a request and answers its 2xx response (or one of okStatuses);
   * any other status becomes an AgentosError. Idempotent requests are
   * retried as the RetryPolicy says.
   */
  async send(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const headers = new Headers(o.headers);
    if (this.credential) headers.set("Authorization", `Bearer ${this.credential}`);
    if (o.accept) headers.set("Accept", o.accept);
    if (o.idempotencyKey) headers.set("Idempotency-Key", o.idempotencyKey);
    let body: BodyInit | undefined;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers.set("Content-Type", "application/json");
    } else if (o.body !== undefined) {
      body = o.body as BodyInit;
      if (o.contentType) headers.set("Content-Type", o.contentType);
    }
    const streamed = typeof ReadableStream !== "undefined" && body instanceof ReadableStream;
    const keyed = !!o.idempotencyKey;
    const idempotentMethod = method === "GET" || method === "HEAD" || method === "PUT" || method === "DELETE";
    const url = this.url(path, o.query);
    const init: RequestInit & { duplex?: "half" } = { method, headers, signal: o.signal ?? null };
    if (body !== undefined) init.body = body;
    // Streaming a request body needs half duplex in Node's fetch (and in
    // the browsers that stream uploads at all).
    if (streamed) init.duplex = "half";
    const maxAttempts = o.once || streamed ? 1 : this.retry.maxAttempts;
    for (let attempt = 1; ; attempt++) {
      let err: unknown;
      try {
        const resp = await this.fetchFn(url, init);
        if ((resp.status >= 200 && resp.status <= 299) || o.okStatuses?.includes(resp.status)) return resp;
        err = await errorFromResponse(resp);
      } catch (e) {
        err = e;
      }
      if (o.signal?.aborted) throw abortReason(o.signal);
      let retry: boolean;
      if (err instanceof AgentosError) {
        retry = isRetryableStatus(err.status) && (idempotentMethod || keyed);
      } else {
        // A network failure: the call may or may not have run.
        retry = method === "GET" || method === "HEAD" || keyed;
      }
      if (!retry || attempt >= maxAttempts) throw err;
      await sleep(backoff(this.retry, attempt, err), o.signal);
    }
  }

  /** Sends a JSON call and decodes its JSON answer. */
  async json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const resp = await this.send(method, path, { accept: "application/json", ...o });
    return (await resp.json()) as T;
  }

  /** Sends a call whose answer carries nothing the caller needs. */
  async empty(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const resp = await this.send(method, path, { accept: "application/json", ...o });
    // The body is read so that the connection can be reused.
    await resp.arrayBuffer();
    return resp;
  }
}

/** Reports whether the gateway answered from the record of an earlier call with the same Idempotency-Key. */
export function replayed(resp: Response): boolean {
  return resp.headers.get("Idempotent-Replayed") === "true";
}

/** Escapes one path segment: ids may hold any character. */
export function esc(s: string): string {
  return encodeURIComponent(s);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encodes bytes as standard base64 (as the gateway's JSON carries binary data). */
export function toBase64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

/** Decodes data that travelled in the given encoding. */
export function decodeData(data: string, encoding: string | undefined): Uint8Array {
  if (encoding === "base64") {
    const s = atob(data);
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  return encoder.encode(data);
}

export function utf8(b: Uint8Array): string {
  return decoder.decode(b);
}

export function bytes(s: string | Uint8Array): Uint8Array {
  return typeof s === "string" ? encoder.encode(s) : s;
}
