"""The gateway's wire types, generated from api/openapi.yaml by
scripts/generate_schema.py: do not edit.

Each is a TypedDict whose keys are the JSON fields as the spec names them.
"""

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "Problem",
    "ErrorCode",
    "VMState",
    "VM",
    "CreateVMRequest",
    "UpdateVMRequest",
    "VMUsage",
    "VMEvent",
    "ExecRequest",
    "ExecResult",
    "SpawnRequest",
    "ExitStatus",
    "ProcessInfo",
    "OpenShellRequest",
    "Shell",
    "ShellCreated",
    "AttachServerFrame",
    "FileWritten",
    "ArchiveExtracted",
    "Stat",
    "DirEntry",
    "OpenSessionRequest",
    "Session",
    "SessionState",
    "Permission",
    "PermissionOption",
    "PermissionDecision",
    "PermissionAnswer",
    "SessionConfig",
    "SessionHistory",
    "ContentBlock",
    "PromptRequest",
    "PromptResult",
    "CancelResult",
    "CreatePreviewRequest",
    "Preview",
    "CreateScheduleRequest",
    "Schedule",
    "ScheduleAction",
    "ScheduleExec",
    "SchedulePrompt",
    "OverlapPolicy",
    "ScheduleRun",
    "Snapshot",
    "Forked",
    "CreateTokenRequest",
    "Token",
    "CreatedToken",
    "Me",
    "CreateWebhookRequest",
    "UpdateWebhookRequest",
    "WebhookEventName",
    "Webhook",
    "Delivery",
    "WebhookSecret",
    "WebhookEvent",
    "OutputEvent",
    "ProcessExitEvent",
    "ExecExitEvent",
    "GapEvent",
    "LostEvent",
    "WatchEvent",
    "WatchResyncEvent",
    "ErrorEvent",
    "SessionEvent",
    "EphemeralEvent",
    "AgentStderrEvent",
    "AgentExitEvent",
    "OverflowEvent",
    "SessionEndEvent",
]


# The stable error code; each maps to one status: `invalid_argument` 400,
# `unauthenticated` 401, `permission_denied` 403, `not_found` 404, `method_not_allowed`
# 405 (with an `Allow` header), `request_timeout` 408 (a request body stopped arriving
# for `--body-read-timeout`), `conflict` 409, `precondition_failed` 412,
# `payload_too_large` 413, `range_not_satisfiable` 416, `unprocessable` 422,
# `headers_too_large` 431, `resource_exhausted` 429, `internal` 500, `not_implemented`
# 501 (a transfer coding the gateway does not know), `unavailable` 503,
# `deadline_exceeded` 504.
ErrorCode = Literal[
    "invalid_argument",
    "unauthenticated",
    "permission_denied",
    "not_found",
    "method_not_allowed",
    "request_timeout",
    "conflict",
    "precondition_failed",
    "payload_too_large",
    "range_not_satisfiable",
    "unprocessable",
    "headers_too_large",
    "resource_exhausted",
    "internal",
    "not_implemented",
    "unavailable",
    "deadline_exceeded",
]


class Problem(TypedDict):
    """An RFC 9457 problem document with the gateway's stable `code`."""

    type: str
    title: str
    status: int
    detail: str
    instance: NotRequired[str]
    code: ErrorCode
    requestId: NotRequired[str]
    details: NotRequired[dict[str, Any]]


# `creating` → `ready` → `disposing` → `disposed`; a VM whose sidecar died (or that was
# live when the gateway restarted without hibernating it) is `lost`. `disposed` and
# `lost` are final. `ready` → `hibernating` → `hibernated` → `waking` → `ready`: a
# hibernated VM runs nowhere, its files are in the store, and it wakes under the same
# id.
VMState = Literal[
    "creating",
    "ready",
    "disposing",
    "disposed",
    "lost",
    "hibernating",
    "hibernated",
    "waking",
]


class VM(TypedDict):
    id: str
    state: VMState
    reason: NotRequired[str]
    labels: dict[str, str]
    sidecarId: NotRequired[str]
    node: NotRequired[str]
    env: NotRequired[dict[str, str]]
    permissions: NotRequired[dict[str, Any]]
    limits: NotRequired[dict[str, Any]]
    loopbackExemptPorts: list[int]
    software: list[str]
    agents: list[str]
    idleTimeoutSeconds: int
    onIdle: NotRequired[Literal["hibernate", "dispose"]]
    hibernatedAt: NotRequired[str]
    checkpointSeconds: int
    checkpointAt: NotRequired[str]
    restorable: bool
    fromSnapshot: NotRequired[str]
    createdAt: str
    updatedAt: str


class CreateVMRequest(TypedDict):
    """On a gateway that keeps warm VMs (`--warm-vms`), a create that sets no field other
    than `labels`, `env` and `idleTimeoutSeconds` is served by a VM created ahead of
    demand with the default spec and already past its first process's warm-up: its `env`
    is applied to every process it starts, its labels and idle timeout are the
    gateway's. Any other field needs a new VM. Either way the VM is new to its tenant: a
    warm VM is handed out once, and counts against no quota until then.
    """

    labels: NotRequired[dict[str, str]]
    env: NotRequired[dict[str, str]]
    permissions: NotRequired[dict[str, Any]]
    limits: NotRequired[dict[str, Any]]
    loopbackExemptPorts: NotRequired[list[int]]
    software: NotRequired[list[str]]
    agents: NotRequired[list[Literal["pi", "claude", "codex", "opencode"]]]
    idleTimeoutSeconds: NotRequired[int]
    onIdle: NotRequired[Literal["hibernate", "dispose"]]
    bindings: NotRequired[dict[str, Any]]
    fromSnapshot: NotRequired[str]
    checkpointSeconds: NotRequired[int]


class UpdateVMRequest(TypedDict):
    labels: NotRequired[dict[str, str | None]]
    idleTimeoutSeconds: NotRequired[int]
    onIdle: NotRequired[Literal["hibernate", "dispose"]]
    checkpointSeconds: NotRequired[int]
    permissions: NotRequired[dict[str, Any]]


class VMUsage(TypedDict):
    """A VM's use of its node (`GET /v1/vms/{vm}/usage`). A running VM has the engine's
    figures (`processes`, `handles`, `limits`, and `filesystemBytes` and `inodes` once
    counted), and `memoryBytes` and `cpuSeconds` when `ownSidecar`; a `hibernated` or
    `waking` VM has `imageBytes` alone.
    """

    vmId: str
    state: VMState
    collectedAt: str
    ownSidecar: bool
    memoryBytes: NotRequired[int]
    cpuSeconds: NotRequired[float]
    filesystemBytes: NotRequired[int]
    inodes: NotRequired[int]
    imageBytes: NotRequired[int]
    processes: NotRequired[dict[str, Any]]
    handles: NotRequired[dict[str, Any]]
    limits: NotRequired[dict[str, Any]]


class ExitStatus(TypedDict):
    exitCode: int
    signal: NotRequired[str]


class VMEvent(TypedDict):
    """An event of a VM; `type` is also the SSE event name. `state` events carry `state`
    (and `reason`); `limit_warning` and `structured` carry `name` and `detail`;
    `process_exit` carries `pid` and `exit`; `schedule_run` carries `name` (the schedule
    id) and `detail` (`run`, `outcome`, `exitCode`); `binding_call` carries `name`
    (`<collection>.<binding>`) and `detail` (`invocation`, `outcome`: `ok`, `timeout`,
    `http_error`, `unreachable`, `refused` or `unknown`, `durationMs`, and `status` when
    the webhook answered).
    """

    type: Literal["state", "limit_warning", "process_exit", "structured", "schedule_run", "binding_call"]
    time: str
    state: NotRequired[VMState]
    reason: NotRequired[str]
    name: NotRequired[str]
    detail: NotRequired[dict[str, str]]
    pid: NotRequired[int]
    exit: NotRequired[ExitStatus]


class ExecRequest(TypedDict):
    """`argv` with `command` or `args`, or `args` without `command`, is `400`
    `invalid_argument` naming the field.
    """

    command: NotRequired[str]
    args: NotRequired[list[str]]
    argv: NotRequired[list[str]]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]
    stdin: NotRequired[str]
    stdinEncoding: NotRequired[Literal["utf8", "base64"]]
    timeoutMs: NotRequired[int]
    maxOutputBytes: NotRequired[int]


class ExecResult(TypedDict):
    exitCode: int
    signal: NotRequired[str]
    stdout: str
    stderr: str
    encoding: Literal["utf8", "base64"]
    truncated: bool
    durationMs: int


class SpawnRequest(TypedDict):
    """`argv` with `command` or `args`, or `args` without `command`, is `400`
    `invalid_argument` naming the field.
    """

    command: NotRequired[str]
    args: NotRequired[list[str]]
    argv: NotRequired[list[str]]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]


class ProcessInfo(TypedDict):
    pid: int
    command: str
    args: list[str]
    cwd: str
    running: bool
    exit: NotRequired[ExitStatus]
    error: NotRequired[str]
    startedAt: str
    exitedAt: NotRequired[str]


class OpenShellRequest(TypedDict):
    shell: NotRequired[Literal["sh", "bash"]]
    cols: NotRequired[int]
    rows: NotRequired[int]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]


class Shell(TypedDict):
    id: str
    shell: Literal["sh", "bash"]
    state: Literal["running", "exited"]
    cols: int
    rows: int
    startedAt: str
    exitedAt: NotRequired[str]
    exit: NotRequired[ExitStatus]
    error: NotRequired[str]
    answeredQueries: int


class ShellCreated(TypedDict):
    shellId: str


# A text frame from the server on an attach WebSocket: `hello` (first; `seq` is the
# sequence the next binary frame follows), `gap` (`from`..`to` were dropped), `error`
# (input or a control frame was refused: `code`, `detail`), `exit` (last; `seq` is the
# last sequence, then `exitCode` and `signal`, or `code` and `detail` when the end is
# unknowable).
AttachServerFrame = TypedDict(
    "AttachServerFrame",
    {
        "type": Literal["hello", "gap", "error", "exit"],
        "seq": NotRequired[int],
        "from": NotRequired[int],
        "to": NotRequired[int],
        "exitCode": NotRequired[int],
        "signal": NotRequired[str],
        "code": NotRequired[ErrorCode],
        "detail": NotRequired[str],
    },
)


class FileWritten(TypedDict):
    path: str
    size: int


class ArchiveExtracted(TypedDict):
    path: str
    files: int
    dirs: int
    symlinks: int
    bytes: int


class Stat(TypedDict):
    path: str
    size: int
    mode: int
    isDirectory: bool
    isSymbolicLink: bool
    mtime: str
    uid: int
    gid: int


class DirEntry(TypedDict):
    name: str
    path: str
    isDirectory: bool
    isSymbolicLink: bool
    size: int


class OpenSessionRequest(TypedDict):
    sessionId: NotRequired[str]
    agent: str
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]
    additionalDirectories: NotRequired[list[str]]
    mcpServers: NotRequired[list[dict[str, Any]] | None]
    permissionPolicy: NotRequired[Literal["ask", "allow_all", "reject_all"]]
    permissionDefault: NotRequired[dict[str, Any] | None]
    additionalInstructions: NotRequired[str]


# `idle` (no turn runs), `running` (a turn runs), `waiting` (the turn waits for
# permission answers), `unloaded` (the agent was stopped; a prompt starts it again);
# `closed` once the VM was disposed, `lost` once it was lost. `closed` and `lost` are
# final.
SessionState = Literal["idle", "running", "waiting", "unloaded", "closed", "lost"]


class PermissionOption(TypedDict):
    """An answer offered by a permission request, as ACP has it; `kind` is `allow_once`,
    `allow_always`, `reject_once` or `reject_always`. Agents may add fields of their
    own.
    """

    optionId: NotRequired[str]
    name: NotRequired[str]
    kind: NotRequired[str]


class PermissionDecision(TypedDict):
    """How a permission request was settled."""

    by: Literal["api", "timeout", "agent", "webhook"]
    keyId: NotRequired[str]
    optionId: NotRequired[str]
    status: str
    reason: NotRequired[str]
    at: str


class Permission(TypedDict):
    """A permission request of the agent."""

    requestId: str
    options: list[PermissionOption] | None
    toolCall: dict[str, Any] | None
    askedAt: str
    status: Literal["pending", "answered", "dropped"]
    decision: PermissionDecision | None


class Session(TypedDict):
    id: str
    vmId: str
    agent: str
    cwd: str
    additionalDirectories: list[str]
    permissionPolicy: Literal["ask", "allow_all", "reject_all"]
    permissionDefault: dict[str, Any] | None
    state: SessionState
    pendingPermissions: list[Permission]
    latestSequence: int
    createdAt: str
    updatedAt: str


class PermissionAnswer(TypedDict):
    status: Literal["accepted", "not_pending"]
    reason: NotRequired[str]


class SessionConfig(TypedDict):
    """The agent's configuration options."""

    revision: int
    options: Any


class SessionEvent(TypedDict):
    """A durable event of an agent session: the data of a `durable` event, and an item of a
    session's history. `type` is the ACP `sessionUpdate` kind of a session update
    (`user_message_chunk`, `agent_message_chunk`, `agent_thought_chunk`, `tool_call`,
    `tool_call_update`, `plan`, ..., with the update in `update`), or
    `permission_request` (`requestId`, `options`, `toolCall`) or `permission_response`
    (`requestId`, `status`, `reason`, `response`, `decision`).
    """

    sequence: int
    timestamp: str
    type: str
    update: NotRequired[dict[str, Any]]
    requestId: NotRequired[str]
    options: NotRequired[list[dict[str, Any]] | None]
    toolCall: NotRequired[dict[str, Any] | None]
    status: NotRequired[str]
    reason: NotRequired[str]
    response: NotRequired[Any]
    decision: NotRequired[PermissionDecision]


class SessionHistory(TypedDict):
    """A page of a session's durable events, oldest first."""

    events: list[SessionEvent]
    hasMoreBefore: bool
    hasMoreAfter: bool


class ContentBlock(TypedDict):
    """An ACP content block: `text` needs `text`; `image` and `audio` need `data` (base64)
    and `mimeType`; `resource_link` needs `uri` and `name` (all strings); `resource`
    needs `resource` (an object). Other ACP fields (`annotations`, ...) are passed to
    the agent as they are. A block that breaks these rules is `400` with `details.field`
    naming it, e.g. `content[1].mimeType`.
    """

    type: Literal["text", "image", "audio", "resource_link", "resource"]
    text: NotRequired[str]
    data: NotRequired[str]
    mimeType: NotRequired[str]
    uri: NotRequired[str]
    name: NotRequired[str]
    resource: NotRequired[dict[str, Any]]


class PromptRequest(TypedDict):
    content: list[ContentBlock]
    idempotencyKey: NotRequired[str]


class PromptResult(TypedDict):
    """The end of a turn."""

    stopReason: str
    message: Any


class CancelResult(TypedDict):
    status: Literal["cancelled", "no_active_prompt"]


class CreatePreviewRequest(TypedDict):
    port: int
    ttlSeconds: NotRequired[int]


class Preview(TypedDict):
    id: str
    vmId: str
    port: int
    url: NotRequired[str]
    hostUrl: NotRequired[str]
    createdAt: str
    expiresAt: str


# What a tick does while the previous run runs: `skip` records a skipped run; `queue`
# runs once it ends (one tick waits at most).
OverlapPolicy = Literal["skip", "queue"]


class ScheduleExec(TypedDict):
    """What a schedule runs, in the forms of an exec body (`command`, `command` with
    `args`, or `argv`), with its deadline.
    """

    command: NotRequired[str]
    args: NotRequired[list[str]]
    argv: NotRequired[list[str]]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]
    timeoutMs: NotRequired[int]


class SchedulePrompt(TypedDict):
    """A prompt sent to an open session of the VM; the run succeeds when the turn ends."""

    session: str
    content: list[ContentBlock]


class ScheduleAction(TypedDict):
    """Exactly one of `exec` and `prompt`."""

    exec: NotRequired[ScheduleExec]
    prompt: NotRequired[SchedulePrompt]


class CreateScheduleRequest(TypedDict):
    cron: str
    timezone: NotRequired[str]
    overlap: NotRequired[OverlapPolicy]
    action: ScheduleAction


class Schedule(TypedDict):
    id: str
    vmId: str
    cron: str
    timezone: str
    overlap: OverlapPolicy
    action: ScheduleAction
    createdAt: str


class ScheduleRun(TypedDict):
    id: str
    scheduleId: str
    startedAt: str
    endedAt: str
    outcome: Literal["succeeded", "failed", "skipped", "timed_out", "error"]
    exitCode: int | None
    signal: NotRequired[str]
    stdout: str
    stderr: str
    truncated: bool
    error: NotRequired[str]


class Snapshot(TypedDict):
    id: str
    tenantId: str
    vmId: str
    bytes: int
    files: int
    dirs: int
    symlinks: int
    node: NotRequired[str]
    createdAt: str


class Forked(TypedDict):
    vms: list[VM]


class CreateTokenRequest(TypedDict):
    scopes: list[Literal["vm:read", "vm:write", "exec", "shells", "files:read", "files:write", "sessions", "previews"]]
    vm: NotRequired[str]
    session: NotRequired[str]
    ttlSeconds: NotRequired[int]
    origins: NotRequired[list[str]]
    label: NotRequired[str]


class Token(TypedDict):
    """A token as listed; never its secret."""

    id: str
    scopes: list[str]
    vm: NotRequired[str]
    session: NotRequired[str]
    origins: list[str]
    label: NotRequired[str]
    createdAt: str
    expiresAt: str


class CreatedToken(TypedDict):
    """A token just created, with its secret (`token`), shown this once."""

    id: str
    scopes: list[str]
    vm: NotRequired[str]
    session: NotRequired[str]
    origins: list[str]
    label: NotRequired[str]
    createdAt: str
    expiresAt: str
    token: str


class Me(TypedDict):
    """Who a key belongs to."""

    tenant: dict[str, Any]
    keyId: str
    admin: bool
    token: NotRequired[Token]


WebhookEventName = Literal[
    "*",
    "vm.state",
    "process.exit",
    "exec.done",
    "session.turn_end",
    "session.permission_requested",
    "schedule.run",
    "snapshot.ready",
    "webhook.disabled",
]


class CreateWebhookRequest(TypedDict):
    url: str
    events: list[WebhookEventName]
    vm: NotRequired[str]
    description: NotRequired[str]


class UpdateWebhookRequest(TypedDict):
    url: NotRequired[str]
    events: NotRequired[list[WebhookEventName]]
    vm: NotRequired[str]
    description: NotRequired[str]
    enabled: NotRequired[bool]


class Webhook(TypedDict):
    id: str
    url: str
    events: list[WebhookEventName]
    vm: NotRequired[str]
    description: NotRequired[str]
    state: Literal["active", "disabled"]
    disabledReason: NotRequired[str]
    failingSince: NotRequired[str]
    createdAt: str
    updatedAt: str


class Delivery(TypedDict):
    id: str
    subscriptionId: str
    type: WebhookEventName
    sequence: int
    vm: NotRequired[str]
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    lastStatus: NotRequired[int]
    lastError: NotRequired[str]
    createdAt: str
    nextAttemptAt: NotRequired[str]
    doneAt: NotRequired[str]
    data: Any


class WebhookSecret(TypedDict):
    secret: str
    signatureHeader: Literal["Agentos-Webhook-Signature"]
    timestampHeader: Literal["Agentos-Webhook-Timestamp"]


class WebhookEvent(TypedDict):
    """The body of every delivery. `type` names the event and `data` holds its fields (with
    `vmId` for a VM's event): `VMStateData`, `ProcessExitData`, `ExecDoneData`,
    `SessionTurnEndData`, `SessionPermissionRequestedData`, `ScheduleRunData`,
    `SnapshotReadyData` or `WebhookDisabledData`. `sequence` numbers the subscription's
    deliveries from 1; `deliveryId` is also the `Agentos-Webhook-Id` header, the same at
    every attempt, for receivers that deduplicate.
    """

    type: WebhookEventName
    deliveryId: str
    subscriptionId: str
    sequence: int
    createdAt: str
    tenantId: str
    data: dict[str, Any]


class OutputEvent(TypedDict):
    """Data of `stdout` and `stderr` events: a chunk of output."""

    seq: int
    stream: Literal["stdout", "stderr"]
    data: str
    encoding: Literal["utf8", "base64"]
    ts: str


class ProcessExitEvent(TypedDict):
    """Data of a process stream's final `exit` event."""

    exitCode: int
    signal: str | None


class ExecExitEvent(TypedDict):
    """Data of a streamed exec's final `exit` event."""

    exitCode: int
    signal: str | None
    truncated: bool
    durationMs: int


# Data of a `gap` event: the sequence numbers `from`..`to` (inclusive) were dropped from
# the bounded buffer before this client read them. The event's id is `to`.
GapEvent = TypedDict(
    "GapEvent",
    {
        "from": int,
        "to": int,
    },
)


class LostEvent(TypedDict):
    """Data of a final `lost` event: the stream came from another node through this one,
    and that node died (it stopped heartbeating for `--node-timeout`), so the VM is
    `lost`.
    """

    code: ErrorCode
    detail: str
    state: Literal["lost"]
    node: str


# Data of a file watch's `create`, `modify`, `delete` and `rename` events; `type` is
# also the event name and `seq` its id.
WatchEvent = TypedDict(
    "WatchEvent",
    {
        "seq": int,
        "type": Literal["create", "modify", "delete", "rename"],
        "path": str,
        "from": NotRequired[str],
        "kind": Literal["file", "directory", "symlink"],
        "source": Literal["api", "scan"],
        "time": str,
    },
)


class WatchResyncEvent(TypedDict):
    """Data of a file watch's `resync` event: changes were lost, so list the tree again;
    the events after it are live. Its id is where the live events continue from.
    """

    reason: Literal["expired", "unknown"]


class ErrorEvent(TypedDict):
    """Data of a final `error` event: why the stream ended."""

    code: ErrorCode
    detail: str


class EphemeralEvent(TypedDict):
    """Data of an `ephemeral` event: a streamed delta, not stored."""

    afterSequence: int
    type: str
    update: dict[str, Any] | None


class AgentStderrEvent(TypedDict):
    """Data of an `agent_stderr` event: output of the agent process."""

    agentType: str
    processId: str
    text: str


class AgentExitEvent(TypedDict):
    """Data of an `agent_exit` event: the agent process ended."""

    agentType: str
    processId: str
    exitCode: int | None
    restart: str


class OverflowEvent(TypedDict):
    """Data of an `overflow` event: the client fell behind and streamed deltas were
    dropped.
    """

    reason: str


class SessionEndEvent(TypedDict):
    """Data of a session stream's final `end` event."""

    state: Literal["closed", "lost", "deleted"]
