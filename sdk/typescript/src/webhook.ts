/**
 * Verification of the gateway's webhook requests, for Node.js (it uses
 * node:crypto, which is why it is an entry of its own:
 * "agentos-gateway/webhook").
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** The Unix time, in seconds, at which the request was signed. */
export const webhookTimestampHeader = "Agentos-Webhook-Timestamp";
/** "v1=" and the hex HMAC-SHA256, keyed with the tenant's webhook secret, of the timestamp, a full stop and the body. */
export const webhookSignatureHeader = "Agentos-Webhook-Signature";
/** The invocation id, the same for every attempt, for receivers that deduplicate. */
export const webhookIdHeader = "Agentos-Webhook-Id";
/** How far a webhook's timestamp may be from now, as the Go client's WebhookTolerance (5 minutes). */
export const webhookToleranceMs = 5 * 60 * 1000;

const signatureVersion = "v1=";

/** Why a webhook request failed verification. */
export class WebhookVerificationError extends Error {
  constructor(readonly reason: "bad_signature" | "stale") {
    super(reason === "stale" ? "webhook timestamp is outside the tolerance" : "webhook signature does not match");
    this.name = "WebhookVerificationError";
  }
}

/** Headers as Node's IncomingMessage has them, or a fetch Headers. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

function header(h: WebhookHeaders, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(h as Record<string, string | string[] | undefined>)) {
    if (k.toLowerCase() === lower) return (Array.isArray(v) ? v[0] : v) ?? "";
  }
  return "";
}

function mac(secret: string, timestamp: string, body: string | Uint8Array): Uint8Array {
  return createHmac("sha256", secret).update(timestamp).update(".").update(body).digest();
}

/** The signature header value of body signed at unixSeconds, as the gateway computes it (for tests of receivers). */
export function signWebhook(secret: string, unixSeconds: number, body: string | Uint8Array): string {
  return signatureVersion + toHex(mac(secret, String(Math.trunc(unixSeconds)), body));
}

function toHex(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}

function fromHex(s: string): Uint8Array | undefined {
  if (s.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(s)) return undefined;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/**
 * Checks a webhook request as a receiver must, with its raw body (as it
 * came, before any JSON parsing): the signature must match, and the
 * timestamp be within 5 minutes of now so that replays of old requests
 * fail. It throws a WebhookVerificationError otherwise.
 */
export function verifyWebhook(secret: string, headers: WebhookHeaders, body: string | Uint8Array, o: { now?: Date; toleranceMs?: number } = {}): void {
  const timestamp = header(headers, webhookTimestampHeader);
  const signature = header(headers, webhookSignatureHeader);
  if (!/^-?\d+$/.test(timestamp)) throw new WebhookVerificationError("stale");
  const now = (o.now ?? new Date()).getTime();
  const tolerance = o.toleranceMs ?? webhookToleranceMs;
  const d = now - Number(timestamp) * 1000;
  if (d > tolerance || d < -tolerance) throw new WebhookVerificationError("stale");
  if (!signature.startsWith(signatureVersion)) throw new WebhookVerificationError("bad_signature");
  const got = fromHex(signature.slice(signatureVersion.length));
  const want = mac(secret, timestamp, body);
  if (!got || got.length !== want.length || !timingSafeEqual(got, want)) throw new WebhookVerificationError("bad_signature");
}
