import type { components } from "./schema.js";
import { AgentosError } from "./errors.js";
import {
  Transport, bytes, decodeData, esc, replayed, resolveRetry, toBase64, utf8,
  type Body, type CallOptions, type IdempotentCallOptions, type RetryPolicy,
} from "./http.js";
import {
  EventStream, type ExecStreamEvent, type OpenFn, type ProcessStreamEvent, type SessionStreamEvent,
  type ShellStreamEvent, type StreamKind, type VMEventsStreamEvent, type WatchStreamEvent,
} from "./stream.js";
import { AttachConnection, openAttach, type AttachOptions, type WebSocketConstructor } from "./attach.js";
import { fillPath, type JSONAnswer, type Method, type Operation, type PathFor, type RequestArgs, type RequestOptions } from "./request.js";

type Schemas = components["schemas"];

export type VM = Schemas["VM"];
export type VMState = Schemas["VMState"];
export type CreateVMRequest = Schemas["CreateVMRequest"];
export type UpdateVMRequest = Schemas["UpdateVMRequest"];
export type VMUsage = Schemas["VMUsage"];
export type ProcessInfo = Schemas["ProcessInfo"];
export type ExitStatus = Schemas["ExitStatus"];
export type Shell = Schemas["Shell"];
export type OpenShellRequest = Schemas["OpenShellRequest"];
export type FileWritten = Schemas["FileWritten"];
export type ArchiveExtracted = Schemas["ArchiveExtracted"];
export type Stat = Schemas["Stat"];
export type DirEntry = Schemas["DirEntry"];
export type Session = Schemas["Session"];
export type OpenSessionRequest = Schemas["OpenSessionRequest"];
export type ContentBlock = Schemas["ContentBlock"];
export type Permission = Schemas["Permission"];
export type PermissionAnswer = Schemas["PermissionAnswer"];
export type SessionConfig = Schemas["SessionConfig"];
export type SessionHistory = Schemas["SessionHistory"];
export type Preview = Schemas["Preview"];
export type CreatePreviewRequest = Schemas["CreatePreviewRequest"];
export type Schedule = Schemas["Schedule"];
export type CreateScheduleRequest = Schemas["CreateScheduleRequest"];
export type ScheduleRun = Schemas["ScheduleRun"];
export type Snapshot = Schemas["Snapshot"];
export type Token = Schemas["Token"];
export type CreatedToken = Schemas["CreatedToken"];
export type CreateTokenRequest = Schemas["CreateTokenRequest"];
export type Me = Schemas["Me"];
export type Webhook = Schemas["Webhook"];
export type CreateWebhookRequest = Schemas["CreateWebhookRequest"];
export type UpdateWebhookRequest = Schemas["UpdateWebhookRequest"];
export type Delivery = Schemas["Delivery"];
export type WebhookSecret = Schemas["WebhookSecret"];
export type ExecAccepted = Schemas["ExecAccepted"];

/**
 * A command to run: a command line (`command`), a program with arguments
 * (`command` with `args`) or an `argv`. stdin may be text or bytes; the SDK
 * picks its encoding. argv is widened as in SpawnRequest.
 */
export type ExecRequest = Omit<Schemas["ExecRequest"], "stdin" | "stdinEncoding" | "argv"> & { stdin?: string | Uint8Array; argv?: string[] };

/**
 * A process to start. argv is widened from the generated type:
 * openapi-typescript reads the spec's prefixItems (a non-empty first
 * element) and items as a one-element tuple.
 */
export type SpawnRequest = Omit<Schemas["SpawnRequest"], "argv"> & { argv?: string[] };

/** The result of a buffered exec. */
export interface ExecResult {
  exitCode: number;
  signal?: string;
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** stdout and stderr decoded as UTF-8, for the common case of text output. */
  stdoutText: string;
  stderrText: string;
  /** Output beyond maxOutputBytes was dropped. */
  truncated: boolean;
  durationMs: number;
  /** The gateway answered from the record of an earlier call with the same idempotency key. */
  replayed: boolean;
}

/** One page of a list. */
export interface Page<T> {
  items: T[];
  nextCursor: string;
}

export interface PageOptions extends CallOptions {
  /** Items per page (the gateway bounds it). */
  limit?: number;
}

export interface ListVMsOptions extends PageOptions {
  /** States to list (default: the live ones); "all" lists every state. */
  states?: VMState[] | "all";
  /** Label selectors, such as "team=a" or "env!=prod". */
  labels?: string[];
}

/** Where a followed stream resumes. */
export interface FollowOptions extends CallOptions {
  /** Resume after this sequence number (an output's seq, a session's durable sequence). */
  after?: number | string;
}

export interface ReadFileOptions extends CallOptions {
  /**
   * Selects the bytes [offset, offset+length); length 0 or absent reads to
   * the end, and a negative offset selects the last -offset bytes.
   */
  offset?: number;
  length?: number;
  /** An ETag of an earlier read: the whole file comes back when it changed since. */
  ifRange?: string;
  /** An ETag of an earlier read: notModified (and no body) while the file is unchanged. */
  ifNoneMatch?: string;
}

/** A file read: its body as it streams in, and where it lies in the file. */
export interface FileRange {
  /** The bytes; null when notModified. */
  body: ReadableStream<Uint8Array> | null;
  /** The body holds the range asked for (206); otherwise the whole file. */
  partial: boolean;
  notModified: boolean;
  start: number;
  length: number;
  /** The file's size, -1 when unknown. */
  size: number;
  etag: string;
  lastModified: string;
}

export interface WriteFileOptions extends CallOptions {
  /** Create the missing parent directories. */
  mkdirs?: boolean;
}

export interface ArchiveOptions extends CallOptions {
  /** tar.gz rather than tar. */
  gzip?: boolean;
  /** (uploads) Create the target directory and its parents. */
  mkdirs?: boolean;
}

export interface WatchOptions extends FollowOptions {
  recursive?: boolean;
  /** The scan interval for changes made inside the guest. */
  intervalMs?: number;
}

export interface PromptResult {
  stopReason: string;
  message: unknown;
  replayed: boolean;
}

/** The credential of a Client: an API key, or a token minted with createToken. */
export type ClientCredential = { apiKey: string; token?: never } | { token: string; apiKey?: never } | { apiKey?: undefined; token?: undefined };

export type ClientOptions = ClientCredential & {
  /** The gateway, such as "http://127.0.0.1:8080" (a path prefix is kept). */
  baseUrl: string;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: typeof fetch;
  /** The WebSocket constructor of attach (default globalThis.WebSocket; Node 20 has none without --experimental-websocket). */
  WebSocket?: WebSocketConstructor;
  retry?: RetryPolicy;
};

/** Content of one text block, for prompt. */
export function textPrompt(text: string): ContentBlock[] {
  return [{ type: "text", text } as ContentBlock];
}

function vmPath(vm: string, ...rest: string[]): string {
  return `/v1/vms/${esc(vm)}${rest.map((r) => `/${r}`).join("")}`;
}

/** Iterates over every item of a paged list, fetching the pages one by one as the iteration goes on. */
async function* pages<T>(list: (cursor: string) => Promise<Page<T>>): AsyncGenerator<T> {
  let cursor = "";
  for (;;) {
    const page = await list(cursor);
    yield* page.items;
    if (!page.nextCursor) return;
    cursor = page.nextCursor;
  }
}

function execResultOf(w: Schemas["ExecResult"], resp: Response): ExecResult {
  const stdout = decodeData(w.stdout, w.encoding);
  const stderr = decodeData(w.stderr, w.encoding);
  const r: ExecResult = {
    exitCode: w.exitCode, stdout, stderr, stdoutText: utf8(stdout), stderrText: utf8(stderr),
    truncated: w.truncated, durationMs: w.durationMs, replayed: replayed(resp),
  };
  if (w.signal) r.signal = w.signal;
  return r;
}

/** The wire form of an exec request: bytes of stdin travel as base64. */
function execWire(req: ExecRequest): Omit<Schemas["ExecRequest"], "argv"> & { argv?: string[] } {
  const { stdin, ...rest } = req;
  if (stdin === undefined) return rest;
  if (typeof stdin === "string") return { ...rest, stdin, stdinEncoding: "utf8" };
  return { ...rest, stdin: toBase64(stdin), stdinEncoding: "base64" };
}

/**
 * A client of one gateway with one credential: an API key, or a token
 * minted with createToken (for browsers and end users). Calls about one VM
 * go through its handle, client.vm(id). Every answer outside 2xx throws an
 * AgentosError; idempotent calls are retried on 429 and 503 (see
 * RetryPolicy); every call takes an AbortSignal.
 */
export class Client {
  /** @internal */
  readonly t: Transport;
  /** @internal */
  readonly WebSocket: WebSocketConstructor | undefined;

  constructor(o: ClientOptions) {
    if (o.apiKey && o.token) throw new TypeError("agentos-gateway: pass an apiKey or a token, not both");
    const f = o.fetch ?? globalThis.fetch;
    if (!f) throw new TypeError("agentos-gateway: this runtime has no fetch; pass one as the fetch option");
    this.t = new Transport({ baseUrl: o.baseUrl, credential: o.apiKey ?? o.token, fetch: f.bind(globalThis), retry: resolveRetry(o.retry) });
    this.WebSocket = o.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  }

  /** The gateway's address. */
  get baseUrl(): string {
    return this.t.baseUrl;
  }

  /**
   * Sends any request of the API, for the routes this SDK has no method
   * for: the path is a template of api/openapi.yaml, such as
   * "/v1/tenants/{tenant}/keys", whose params, query and JSON body are
   * typed by it. It answers the Response of a 2xx; any other status throws
   * an AgentosError, and idempotent calls are retried like every call.
   * A path parameter left out rejects the promise (a TypeError), as every
   * other failure does, rather than throwing before it is returned.
   */
  async request<M extends Method, P extends PathFor<M>>(method: M, path: P, ...[o]: RequestArgs<Operation<P, M>>): Promise<Response> {
    const { params, query, json, body, contentType, accept, headers, idempotencyKey, signal } = (o ?? {}) as RequestOptions<Operation<P, M>>;
    return this.t.send(method, fillPath(path, params as Record<string, unknown> | undefined), {
      query: query as Record<string, string | number | boolean | undefined | (string | number)[]> | undefined,
      json,
      body,
      contentType,
      accept: accept ?? "application/json",
      headers,
      idempotencyKey,
      signal,
    });
  }

  /** Sends a request as request does and decodes its JSON answer, typed by the schema (null for a 204). */
  async requestJSON<M extends Method, P extends PathFor<M>>(method: M, path: P, ...o: RequestArgs<Operation<P, M>>): Promise<JSONAnswer<Operation<P, M>>> {
    const resp = await this.request(method, path, ...o);
    if (resp.status === 204) return null as JSONAnswer<Operation<P, M>>;
    return (await resp.json()) as JSONAnswer<Operation<P, M>>;
  }

  /** Resolves once the gateway is ready (GET /readyz); an AgentosError with code unavailable before. */
  async ready(o: CallOptions = {}): Promise<void> {
    await this.t.empty("GET", "/readyz", { signal: o.signal });
  }

  /** The caller: its tenant, key and, for a token, the token. */
  me(o: CallOptions = {}): Promise<Me> {
    return this.t.json("GET", "/v1/me", { signal: o.signal });
  }

  /** Creates a VM; client.vm(vm.id) makes the calls about it. */
  createVM(req: CreateVMRequest = {}, o: CallOptions = {}): Promise<VM> {
    return this.t.json("POST", "/v1/vms", { json: req, signal: o.signal });
  }

  /** One page of the caller's VMs. */
  listVMs(o: ListVMsOptions & { cursor?: string } = {}): Promise<Page<VM>> {
    return this.t.json("GET", "/v1/vms", {
      query: { state: o.states === "all" ? "all" : o.states, label: o.labels, limit: o.limit, cursor: o.cursor || undefined },
      signal: o.signal,
    });
  }

  /** Iterates over all of the caller's VMs that o selects, fetching page after page. */
  vms(o: ListVMsOptions = {}): AsyncGenerator<VM> {
    return pages((cursor) => this.listVMs({ ...o, cursor }));
  }

  /** The handle of a VM. It makes no call: a VM that does not exist shows in the first call (not_found). */
  vm(id: string): VMHandle {
    return new VMHandle(this, id);
  }

  /** Mints a token for a browser or an end user; its secret is in the answer only. */
  createToken(req: CreateTokenRequest, o: CallOptions = {}): Promise<CreatedToken> {
    return this.t.json("POST", "/v1/tokens", { json: req, signal: o.signal });
  }

  /** The tenant's live tokens. */
  async tokens(o: CallOptions = {}): Promise<Token[]> {
    return (await this.t.json<Page<Token>>("GET", "/v1/tokens", { signal: o.signal })).items;
  }

  /** Revokes a token. */
  async revokeToken(id: string, o: CallOptions = {}): Promise<void> {
    await this.t.empty("DELETE", `/v1/tokens/${esc(id)}`, { signal: o.signal });
  }

  /** Subscribes a URL to events of the tenant (or of one VM). */
  createWebhook(req: CreateWebhookRequest, o: CallOptions = {}): Promise<Webhook> {
    return this.t.json("POST", "/v1/webhooks", { json: req, signal: o.signal });
  }

  /** Iterates over the tenant's webhook subscriptions. */
  webhooks(o: PageOptions = {}): AsyncGenerator<Webhook> {
    return pages((cursor) => this.t.json<Page<Webhook>>("GET", "/v1/webhooks", { query: { cursor: cursor || undefined, limit: o.limit }, signal: o.signal }));
  }

  /** The handle of a webhook subscription. It makes no call. */
  webhook(id: string): WebhookHandle {
    return new WebhookHandle(this, id);
  }

  /** The tenant's webhook signing secret, for verifyWebhook. */
  webhookSecret(o: CallOptions = {}): Promise<WebhookSecret> {
    return this.t.json("GET", "/v1/webhook-secret", { signal: o.signal });
  }

  /** Iterates over the tenant's snapshots (of one VM with o.vm). */
  snapshots(o: PageOptions & { vm?: string } = {}): AsyncGenerator<Snapshot> {
    return pages((cursor) => this.t.json<Page<Snapshot>>("GET", "/v1/snapshots", { query: { vm: o.vm, cursor: cursor || undefined, limit: o.limit }, signal: o.signal }));
  }

  /** A snapshot. */
  snapshot(id: string, o: CallOptions = {}): Promise<Snapshot> {
    return this.t.json("GET", `/v1/snapshots/${esc(id)}`, { signal: o.signal });
  }

  /** Deletes a snapshot. */
  async deleteSnapshot(id: string, o: CallOptions = {}): Promise<void> {
    await this.t.empty("DELETE", `/v1/snapshots/${esc(id)}`, { signal: o.signal });
  }

  /** @internal Opens a stream of kind at path. A followed stream retries its opens itself. */
  stream<E>(kind: StreamKind, path: string, o: FollowOptions & { query?: Record<string, string | number | boolean | undefined> }, follow: boolean, vmEvents = false): EventStream<E> {
    const open: OpenFn = (lastEventId, signal) =>
      this.t.send("GET", path, {
        query: o.query,
        accept: "text/event-stream",
        headers: lastEventId ? { "Last-Event-ID": lastEventId } : {},
        signal,
        once: follow,
      });
    return new EventStream<E>(kind, open, {
      lastEventId: o.after === undefined ? "" : String(o.after),
      signal: o.signal,
      follow,
      vmEvents,
      idleTimeoutMs: follow ? this.t.retry.idleTimeoutMs : 0,
      retry: this.t.retry,
    });
  }

  /** @internal */
  attach(path: string, processFrames: boolean, query: Record<string, string | undefined>, o: AttachOptions): AttachConnection {
    return openAttach(this.WebSocket, this.t.url(path, { ...query, after: o.after }), this.t.credential, processFrames, o);
  }
}

/** Makes the calls about one VM: its commands, processes, shells, files and sessions. */
export class VMHandle {
  constructor(
    private readonly c: Client,
    readonly id: string,
  ) {}

  private path(...rest: string[]): string {
    return vmPath(this.id, ...rest);
  }

  get(o: CallOptions = {}): Promise<VM> {
    return this.c.t.json("GET", this.path(), { signal: o.signal });
  }

  /**
   * Ends the VM, and is idempotent: a live VM is disposed and its final
   * record returned; the record of a VM that already ended is removed and
   * undefined returned.
   */
  async delete(o: CallOptions = {}): Promise<VM | undefined> {
    const resp = await this.c.t.send("DELETE", this.path(), { accept: "application/json", signal: o.signal });
    if (resp.status === 204) return undefined;
    return (await resp.json()) as VM;
  }

  /** Changes the VM's labels and idle settings. */
  update(req: UpdateVMRequest, o: CallOptions = {}): Promise<VM> {
    return this.c.t.json("PATCH", this.path(), { json: req, signal: o.signal });
  }

  /** Captures the VM's files into the gateway's store and stops it; any call that needs it runs it again. */
  hibernate(o: CallOptions = {}): Promise<VM> {
    return this.c.t.json("POST", this.path("hibernate"), { signal: o.signal });
  }

  /** Runs a hibernated VM again (or restores a lost one from its checkpoint). */
  wake(o: CallOptions = {}): Promise<VM> {
    return this.c.t.json("POST", this.path("wake"), { signal: o.signal });
  }

  /** Stores what changed in the VM's files since its last checkpoint. */
  checkpoint(o: CallOptions = {}): Promise<VM> {
    return this.c.t.json("POST", this.path("checkpoint"), { signal: o.signal });
  }

  usage(o: CallOptions = {}): Promise<VMUsage> {
    return this.c.t.json("GET", this.path("usage"), { signal: o.signal });
  }

  /** Follows the VM's events (state changes, limit warnings, process exits) until it ends, reconnecting without losing one. */
  events(o: FollowOptions = {}): EventStream<VMEventsStreamEvent> {
    return this.c.stream("vm", this.path("events"), o, true, true);
  }

  /**
   * Runs a command to completion and answers its buffered output. A
   * timeout is an AgentosError with code deadline_exceeded. With an
   * idempotencyKey a retry gets the first outcome and never runs the
   * command again.
   */
  async exec(req: ExecRequest, o: IdempotentCallOptions = {}): Promise<ExecResult> {
    const resp = await this.c.t.send("POST", this.path("exec"), {
      json: execWire(req), accept: "application/json", idempotencyKey: o.idempotencyKey, signal: o.signal,
    });
    return execResultOf((await resp.json()) as Schemas["ExecResult"], resp);
  }

  /**
   * Runs a command and streams its output: stdout and stderr events as it
   * arrives, then a final exit event. A streamed exec cannot be resumed;
   * use spawn for output that must survive reconnects.
   */
  execStream(req: ExecRequest, o: IdempotentCallOptions = {}): EventStream<ExecStreamEvent> {
    const open: OpenFn = (_last, signal) =>
      this.c.t.send("POST", this.path("exec"), { json: execWire(req), accept: "text/event-stream", idempotencyKey: o.idempotencyKey, signal });
    return new EventStream<ExecStreamEvent>("exec", open, { signal: o.signal, follow: false, idleTimeoutMs: 0, retry: this.c.t.retry });
  }

  /** Starts a long-running process and answers its record; vm.process(p.pid) makes the calls about it. */
  spawn(req: SpawnRequest, o: IdempotentCallOptions = {}): Promise<ProcessInfo> {
    return this.c.t.json("POST", this.path("processes"), { json: req, idempotencyKey: o.idempotencyKey, signal: o.signal });
  }

  /** The VM's processes, exited ones included. */
  async processes(o: CallOptions = {}): Promise<ProcessInfo[]> {
    return (await this.c.t.json<Page<ProcessInfo>>("GET", this.path("processes"), { signal: o.signal })).items;
  }

  process(pid: number): ProcessHandle {
    return new ProcessHandle(this.c, this.id, pid);
  }

  /** Opens an interactive shell; attach to it over a WebSocket with shell.attach(). */
  async openShell(req: OpenShellRequest = { cols: 80, rows: 24 }, o: CallOptions = {}): Promise<ShellHandle> {
    const out = await this.c.t.json<Schemas["ShellCreated"]>("POST", this.path("shells"), { json: req, signal: o.signal });
    return this.shell(out.shellId);
  }

  async shells(o: CallOptions = {}): Promise<Shell[]> {
    return (await this.c.t.json<Page<Shell>>("GET", this.path("shells"), { signal: o.signal })).items;
  }

  shell(id: string): ShellHandle {
    return new ShellHandle(this.c, this.id, id);
  }

  /** Writes a file from bytes, text, a Blob or a stream (a stream is never retried). */
  writeFile(path: string, data: Body, o: WriteFileOptions = {}): Promise<FileWritten> {
    return this.c.t.json("PUT", this.path("files"), {
      query: { path, mkdirs: o.mkdirs || undefined }, body: data, contentType: "application/octet-stream", signal: o.signal,
    });
  }

  /**
   * Reads a file, or a range of it, as it streams in. A range outside the
   * file is an AgentosError with code range_not_satisfiable.
   */
  async readFileStream(path: string, o: ReadFileOptions = {}): Promise<FileRange> {
    const headers: Record<string, string> = {};
    const off = o.offset ?? 0;
    const len = o.length ?? 0;
    if (off < 0) headers.Range = `bytes=${off}`;
    else if (len > 0) headers.Range = `bytes=${off}-${off + len - 1}`;
    else if (off > 0) headers.Range = `bytes=${off}-`;
    if (o.ifRange) headers["If-Range"] = o.ifRange;
    if (o.ifNoneMatch) headers["If-None-Match"] = o.ifNoneMatch;
    const resp = await this.c.t.send("GET", this.path("files"), { query: { path }, accept: "*/*", headers, signal: o.signal, okStatuses: [304] });
    const out: FileRange = {
      body: resp.body, partial: false, notModified: false, start: 0, length: -1, size: -1,
      etag: resp.headers.get("ETag") ?? "", lastModified: resp.headers.get("Last-Modified") ?? "",
    };
    const cl = resp.headers.get("Content-Length");
    if (resp.status === 304) {
      await resp.body?.cancel();
      return { ...out, body: null, notModified: true };
    }
    if (resp.status === 206) {
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(resp.headers.get("Content-Range") ?? "");
      if (!m) {
        await resp.body?.cancel();
        throw new Error(`agentos-gateway: GET ${path}: Content-Range ${JSON.stringify(resp.headers.get("Content-Range"))} is not bytes first-last/size`);
      }
      const first = Number(m[1]);
      return { ...out, partial: true, start: first, length: Number(m[2]) - first + 1, size: Number(m[3]) };
    }
    const n = cl === null ? -1 : Number(cl);
    return { ...out, length: n, size: n };
  }

  /** Reads a file, or a range of it (see ReadFileOptions), whole into memory. */
  async readFile(path: string, o: ReadFileOptions = {}): Promise<Uint8Array> {
    const r = await this.readFileStream(path, { ...o, ifNoneMatch: undefined });
    return r.body ? new Uint8Array(await new Response(r.body).arrayBuffer()) : new Uint8Array();
  }

  /** Reads a text file as UTF-8. */
  async readTextFile(path: string, o: ReadFileOptions = {}): Promise<string> {
    return utf8(await this.readFile(path, o));
  }

  /** Removes a file, or a directory (with its content when recursive). */
  async deleteFile(path: string, o: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path("files"), { query: { path, recursive: o.recursive || undefined }, signal: o.signal });
  }

  /** Lists a directory (and its subdirectories when recursive). */
  async listDir(path: string, o: CallOptions & { recursive?: boolean; maxDepth?: number } = {}): Promise<DirEntry[]> {
    const l = await this.c.t.json<Page<DirEntry>>("GET", this.path("dirs"), { query: { path, recursive: o.recursive || undefined, maxDepth: o.maxDepth }, signal: o.signal });
    return l.items;
  }

  /** Creates a directory and its missing parents. */
  async mkdir(path: string, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("dirs"), { json: { path }, signal: o.signal });
  }

  /** Renames a file or a directory. */
  async move(from: string, to: string, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("fs", "move"), { json: { from, to }, signal: o.signal });
  }

  stat(path: string, o: CallOptions = {}): Promise<Stat> {
    return this.c.t.json("GET", this.path("fs", "stat"), { query: { path }, signal: o.signal });
  }

  /** Streams the directory (or file) at path as a tar (or tar.gz) archive. */
  async downloadArchive(path: string, o: ArchiveOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.c.t.send("GET", this.path("archive"), { query: { path, format: o.gzip ? "tar.gz" : undefined }, accept: "*/*", signal: o.signal });
    if (!resp.body) throw new Error("agentos-gateway: the archive answer has no body");
    return resp.body;
  }

  /** Extracts a tar (or tar.gz) archive into the directory at path, all or nothing. */
  uploadArchive(path: string, archive: Body, o: ArchiveOptions = {}): Promise<ArchiveExtracted> {
    return this.c.t.json("PUT", this.path("archive"), {
      query: { path, format: o.gzip ? "tar.gz" : undefined, mkdirs: o.mkdirs || undefined },
      body: archive, contentType: o.gzip ? "application/gzip" : "application/x-tar", signal: o.signal,
    });
  }

  /**
   * Follows the changes of the directory path, reconnecting without losing
   * or repeating one (a resync event says when the gateway could not
   * resume). It ends with an AgentosError: conflict when the VM ends.
   */
  watch(path: string, o: WatchOptions = {}): EventStream<WatchStreamEvent> {
    return this.c.stream("watch", this.path("watch"), { ...o, query: { path, recursive: o.recursive || undefined, interval: o.intervalMs } }, true);
  }

  /** Opens an agent session. */
  openSession(req: OpenSessionRequest, o: CallOptions = {}): Promise<Session> {
    return this.c.t.json("POST", this.path("sessions"), { json: req, signal: o.signal });
  }

  /** Iterates over the VM's sessions. */
  sessions(o: PageOptions = {}): AsyncGenerator<Session> {
    return pages((cursor) => this.c.t.json<Page<Session>>("GET", this.path("sessions"), { query: { cursor: cursor || undefined, limit: o.limit }, signal: o.signal }));
  }

  session(id: string): SessionHandle {
    return new SessionHandle(this.c, this.id, id);
  }

  /** Makes a guest port reachable at a public, unguessable URL. */
  createPreview(req: CreatePreviewRequest, o: CallOptions = {}): Promise<Preview> {
    return this.c.t.json("POST", this.path("previews"), { json: req, signal: o.signal });
  }

  async previews(o: CallOptions = {}): Promise<Preview[]> {
    return (await this.c.t.json<Page<Preview>>("GET", this.path("previews"), { signal: o.signal })).items;
  }

  preview(id: string, o: CallOptions = {}): Promise<Preview> {
    return this.c.t.json("GET", this.path("previews", esc(id)), { signal: o.signal });
  }

  async deletePreview(id: string, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path("previews", esc(id)), { signal: o.signal });
  }

  createSchedule(req: CreateScheduleRequest, o: CallOptions = {}): Promise<Schedule> {
    return this.c.t.json("POST", this.path("schedules"), { json: req, signal: o.signal });
  }

  schedules(o: PageOptions = {}): AsyncGenerator<Schedule> {
    return pages((cursor) => this.c.t.json<Page<Schedule>>("GET", this.path("schedules"), { query: { cursor: cursor || undefined, limit: o.limit }, signal: o.signal }));
  }

  schedule(id: string, o: CallOptions = {}): Promise<Schedule> {
    return this.c.t.json("GET", this.path("schedules", esc(id)), { signal: o.signal });
  }

  async deleteSchedule(id: string, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path("schedules", esc(id)), { signal: o.signal });
  }

  /** Iterates over a schedule's runs. */
  scheduleRuns(id: string, o: PageOptions = {}): AsyncGenerator<ScheduleRun> {
    return pages((cursor) => this.c.t.json<Page<ScheduleRun>>("GET", this.path("schedules", esc(id), "runs"), { query: { cursor: cursor || undefined, limit: o.limit }, signal: o.signal }));
  }

  /** Captures the VM's files as a snapshot that new VMs can start from. */
  createSnapshot(o: CallOptions = {}): Promise<Snapshot> {
    return this.c.t.json("POST", this.path("snapshots"), { signal: o.signal });
  }

  /** Starts count new VMs from a snapshot of this one. */
  async fork(count = 1, o: CallOptions = {}): Promise<VM[]> {
    return (await this.c.t.json<Schemas["Forked"]>("POST", this.path("fork"), { json: { count }, signal: o.signal })).vms;
  }
}

/** Makes the calls about one process. */
export class ProcessHandle {
  constructor(
    private readonly c: Client,
    readonly vmId: string,
    readonly pid: number,
  ) {}

  private path(...rest: string[]): string {
    return vmPath(this.vmId, "processes", String(this.pid), ...rest);
  }

  get(o: CallOptions = {}): Promise<ProcessInfo> {
    return this.c.t.json("GET", this.path(), { signal: o.signal });
  }

  /**
   * Follows the process's output until its exit: stdout and stderr events
   * whose seq is the output's sequence number, a gap when the resume point
   * was no longer buffered, then a final exit. It reconnects with
   * Last-Event-ID after a dropped connection so that no output is lost or
   * repeated; `after` resumes after a sequence number an earlier stream
   * reached.
   */
  follow(o: FollowOptions = {}): EventStream<ProcessStreamEvent> {
    return this.c.stream("process", this.path("output"), o, true);
  }

  /** Attaches over a WebSocket: stdin in, stdout and stderr out. */
  attach(o: AttachOptions = {}): AttachConnection {
    return this.c.attach(this.path("attach"), true, {}, o);
  }

  async writeStdin(data: string | Uint8Array, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("stdin"), { body: bytes(data), contentType: "application/octet-stream", signal: o.signal });
  }

  async closeStdin(o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("stdin", "close"), { signal: o.signal });
  }

  /** Sends a signal, such as "SIGTERM". */
  async signal(signal: string, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("signal"), { json: { signal }, signal: o.signal });
  }

  /** Waits for the process to end, at most timeoutMs (deadline_exceeded after). */
  wait(o: CallOptions & { timeoutMs?: number } = {}): Promise<ExitStatus> {
    return this.c.t.json("GET", this.path("wait"), { query: { timeoutMs: o.timeoutMs }, signal: o.signal });
  }
}

/** Makes the calls about one shell. */
export class ShellHandle {
  constructor(
    private readonly c: Client,
    readonly vmId: string,
    readonly id: string,
  ) {}

  private path(...rest: string[]): string {
    return vmPath(this.vmId, "shells", esc(this.id), ...rest);
  }

  get(o: CallOptions = {}): Promise<Shell> {
    return this.c.t.json("GET", this.path(), { signal: o.signal });
  }

  /** Attaches over a WebSocket: keystrokes in, terminal output out, resize. */
  attach(o: AttachOptions = {}): AttachConnection {
    return this.c.attach(this.path("attach"), false, {}, o);
  }

  /** Sends keystrokes. */
  async input(data: string | Uint8Array, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("input"), { body: bytes(data), contentType: "application/octet-stream", signal: o.signal });
  }

  async resize(cols: number, rows: number, o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("POST", this.path("resize"), { json: { cols, rows }, signal: o.signal });
  }

  /** Follows the shell's output over SSE until its end, reconnecting without losing output. */
  follow(o: FollowOptions = {}): EventStream<ShellStreamEvent> {
    return this.c.stream("shell", this.path("output"), o, true);
  }

  /** Ends the shell if it runs and removes its record. */
  async close(o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path(), { signal: o.signal });
  }
}

/** Makes the calls about one agent session. */
export class SessionHandle {
  constructor(
    private readonly c: Client,
    readonly vmId: string,
    readonly id: string,
  ) {}

  private path(...rest: string[]): string {
    return vmPath(this.vmId, "sessions", esc(this.id), ...rest);
  }

  get(o: CallOptions = {}): Promise<Session> {
    return this.c.t.json("GET", this.path(), { signal: o.signal });
  }

  async delete(o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path(), { signal: o.signal });
  }

  /** Stops the session's agent process; the session is loaded again by its next use. */
  unload(o: CallOptions = {}): Promise<Session> {
    return this.c.t.json("POST", this.path("unload"), { signal: o.signal });
  }

  /**
   * Runs a turn and waits for its end. Content is text or ACP content
   * blocks. With an idempotencyKey a retry of the same prompt gets the
   * recorded result of the first instead of a second turn.
   */
  async prompt(content: string | ContentBlock[], o: IdempotentCallOptions = {}): Promise<PromptResult> {
    const req: Schemas["PromptRequest"] = { content: typeof content === "string" ? textPrompt(content) : content };
    if (o.idempotencyKey) req.idempotencyKey = o.idempotencyKey;
    const resp = await this.c.t.send("POST", this.path("prompt"), { json: req, accept: "application/json", idempotencyKey: o.idempotencyKey, signal: o.signal });
    const out = (await resp.json()) as Schemas["PromptResult"];
    return { ...out, replayed: replayed(resp) };
  }

  /** Starts a turn and returns at once; follow it with events(). */
  async promptAsync(content: string | ContentBlock[], o: IdempotentCallOptions = {}): Promise<void> {
    const req: Schemas["PromptRequest"] = { content: typeof content === "string" ? textPrompt(content) : content };
    if (o.idempotencyKey) req.idempotencyKey = o.idempotencyKey;
    await this.c.t.empty("POST", this.path("prompt"), { json: req, headers: { Prefer: "respond-async" }, idempotencyKey: o.idempotencyKey, signal: o.signal });
  }

  /** Cancels the running turn. */
  async cancel(o: CallOptions = {}): Promise<Schemas["CancelResult"]["status"]> {
    return (await this.c.t.json<Schemas["CancelResult"]>("POST", this.path("cancel"), { signal: o.signal })).status;
  }

  /** The session's pending permission requests. */
  async permissions(o: CallOptions = {}): Promise<Permission[]> {
    return (await this.c.t.json<Page<Permission>>("GET", this.path("permissions"), { signal: o.signal })).items;
  }

  /** Answers a pending permission request with one of its options. */
  answerPermission(requestId: string, optionId: string, o: CallOptions = {}): Promise<PermissionAnswer> {
    const req: Schemas["AnswerPermissionRequest"] = { optionId };
    return this.c.t.json("POST", this.path("permissions", esc(requestId)), { json: req, signal: o.signal });
  }

  config(o: CallOptions = {}): Promise<SessionConfig> {
    return this.c.t.json("GET", this.path("config"), { signal: o.signal });
  }

  setConfig(configId: string, value: unknown, o: CallOptions = {}): Promise<SessionConfig> {
    return this.c.t.json("PUT", this.path("config", esc(configId)), { json: { value }, signal: o.signal });
  }

  history(o: CallOptions & { after?: number; limit?: number } = {}): Promise<SessionHistory> {
    return this.c.t.json("GET", this.path("history"), { query: { after: o.after, limit: o.limit }, signal: o.signal });
  }

  /**
   * Follows the session's events until it ends: durable events (whose id
   * is their sequence) and live-only ones. It reconnects with
   * Last-Event-ID so that every durable event comes exactly once; `after`
   * resumes after a durable sequence.
   */
  events(o: FollowOptions = {}): EventStream<SessionStreamEvent> {
    return this.c.stream("session", this.path("events"), o, true);
  }
}

/** Makes the calls about one webhook subscription. */
export class WebhookHandle {
  constructor(
    private readonly c: Client,
    readonly id: string,
  ) {}

  private path(...rest: string[]): string {
    return `/v1/webhooks/${esc(this.id)}${rest.map((r) => `/${r}`).join("")}`;
  }

  get(o: CallOptions = {}): Promise<Webhook> {
    return this.c.t.json("GET", this.path(), { signal: o.signal });
  }

  /** Changes the subscription; enabled: true re-enables one the gateway disabled. */
  update(req: UpdateWebhookRequest, o: CallOptions = {}): Promise<Webhook> {
    return this.c.t.json("PATCH", this.path(), { json: req, signal: o.signal });
  }

  async delete(o: CallOptions = {}): Promise<void> {
    await this.c.t.empty("DELETE", this.path(), { signal: o.signal });
  }

  /** Iterates over the subscription's deliveries, newest first. */
  deliveries(o: PageOptions & { status?: Delivery["status"]; after?: string } = {}): AsyncGenerator<Delivery> {
    return pages((cursor) => this.c.t.json<Page<Delivery>>("GET", this.path("deliveries"), {
      query: { status: o.status, after: o.after, cursor: cursor || undefined, limit: o.limit }, signal: o.signal,
    }));
  }

  /** Sends a delivery again. */
  redeliver(deliveryId: string, o: CallOptions = {}): Promise<Delivery> {
    return this.c.t.json("POST", this.path("deliveries", esc(deliveryId), "redeliver"), { signal: o.signal });
  }
}

export { AgentosError };
