/**
 * The TypeScript SDK of agentos-gateway, for browsers and Node.js 20+: a
 * Client over fetch, Server-Sent Events with Last-Event-ID resume, and the
 * WebSocket attach protocol. verifyWebhook, which needs node:crypto, is in
 * "agentos-gateway/webhook".
 */
export * from "./client.js";
export { AgentosError, codeForStatus, isCode, type ErrorCode, type Problem, type ProblemDetails } from "./errors.js";
export type { RetryPolicy, CallOptions, IdempotentCallOptions, Body } from "./http.js";
export {
  EventStream, NotEventStreamError, StreamCutError,
  type OutputEvent, type ExitEvent, type GapEvent, type ShellEndEvent, type LostEvent, type UnknownEvent,
  type VMStreamEvent, type SessionStreamEvent, type FileChangeEvent, type ResyncEvent,
  type ExecStreamEvent, type ProcessStreamEvent, type ShellStreamEvent, type VMEventsStreamEvent, type WatchStreamEvent,
} from "./stream.js";
export {
  AttachConnection, AttachClosedError, attachProtocol, bearerProtocol,
  type AttachEvent, type AttachOutput, type AttachGap, type AttachRefusal, type AttachExit, type AttachOptions, type WebSocketConstructor,
} from "./attach.js";
export type { Method, PathFor, Operation, PathParams, QueryParams, JSONBody, JSONAnswer, RequestOptions } from "./request.js";
export type { components, paths, operations } from "./schema.js";
