import type { components } from "./schema.js";

/** One of the gateway's stable error codes. Branch on it, never on a message. */
export type ErrorCode = components["schemas"]["ErrorCode"];

/** The RFC 9457 problem body of every answer of the gateway outside 2xx. */
export type Problem = components["schemas"]["Problem"];

/** The extra facts of a problem, such as the `field` an invalid_argument is about. */
export type ProblemDetails = NonNullable<Problem["details"]>;

/**
 * An answer of the gateway outside 2xx (an RFC 9457 problem), or the final
 * `error` event of a stream (then `status` is 0).
 */
export class AgentosError extends Error {
  /** The HTTP status, or 0 for a stream's final error event. */
  readonly status: number;
  /** The gateway's stable code; derived from the status when the body was not a problem. */
  readonly code: ErrorCode;
  readonly title: string;
  readonly detail: string;
  /** Extra facts, for example a VM's `state` on conflict. */
  readonly details: ProblemDetails;
  readonly type: string;
  readonly instance: string;
  /** The gateway's id of the request (from the problem or X-Request-ID). */
  readonly requestId: string;
  /** The Retry-After header in milliseconds, when the gateway sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(init: {
    status: number;
    code: ErrorCode;
    title?: string;
    detail?: string;
    details?: ProblemDetails;
    type?: string;
    instance?: string;
    requestId?: string;
    retryAfterMs?: number;
  }) {
    const text = init.detail || init.title || "";
    const status = init.status ? `${init.status} ` : "";
    const rid = init.requestId ? ` (request ${init.requestId})` : "";
    super(`agentos-gateway: ${status}${init.code}${text ? `: ${text}` : ""}${rid}`);
    this.name = "AgentosError";
    this.status = init.status;
    this.code = init.code;
    this.title = init.title ?? "";
    this.detail = init.detail ?? "";
    this.details = init.details ?? {};
    this.type = init.type ?? "";
    this.instance = init.instance ?? "";
    this.requestId = init.requestId ?? "";
    this.retryAfterMs = init.retryAfterMs;
  }
}

/** Reports whether err is an AgentosError with the given code. */
export function isCode(err: unknown, code: ErrorCode): boolean {
  return err instanceof AgentosError && err.code === code;
}

/**
 * The gateway's code for a status, for answers that carry no problem (HEAD,
 * proxies, a server that is not the gateway). It mirrors the Go client's
 * codeForStatus so that both clients branch the same way.
 */
export function codeForStatus(status: number): ErrorCode {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: case 410: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 409: return "conflict";
    case 412: return "precondition_failed";
    case 413: return "payload_too_large";
    case 416: return "range_not_satisfiable";
    case 422: return "unprocessable";
    case 429: return "resource_exhausted";
    case 431: return "headers_too_large";
    case 501: return "not_implemented";
    case 502: case 503: return "unavailable";
    case 504: return "deadline_exceeded";
  }
  if (status >= 500) return "internal";
  if (status >= 400) return "invalid_argument";
  return "internal";
}

/** How much of an error body is read; a longer one is cut. */
const maxErrorBody = 64 << 10;

function retryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

function isProblem(v: unknown): v is Partial<Problem> {
  if (typeof v !== "object" || v === null) return false;
  const p = v as Record<string, unknown>;
  return typeof p.code === "string" || typeof p.title === "string" || typeof p.detail === "string";
}

/**
 * Turns a non-2xx answer into an AgentosError. It never fails: a body that
 * is not a problem falls back to the status, with a snippet of the body as
 * the detail.
 */
export async function errorFromResponse(resp: Response): Promise<AgentosError> {
  let text = "";
  try {
    text = (await resp.text()).slice(0, maxErrorBody);
  } catch {
    // A body cut short still leaves the status to report.
  }
  const base = {
    status: resp.status,
    title: resp.statusText,
    requestId: resp.headers.get("X-Request-ID") ?? "",
    retryAfterMs: retryAfter(resp.headers.get("Retry-After")),
  };
  const ctype = (resp.headers.get("Content-Type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (ctype === "application/json" || ctype.endsWith("+json")) {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (isProblem(body)) {
      return new AgentosError({
        ...base,
        code: (body.code as ErrorCode | undefined) || codeForStatus(resp.status),
        title: body.title || base.title,
        detail: body.detail ?? "",
        details: body.details ?? {},
        type: body.type ?? "",
        instance: body.instance ?? "",
        requestId: body.requestId || base.requestId,
      });
    }
  }
  const snippet = text.trim();
  return new AgentosError({ ...base, code: codeForStatus(resp.status), detail: snippet.length > 512 ? `${snippet.slice(0, 512)}…` : snippet });
}
