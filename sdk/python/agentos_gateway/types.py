"""The SDK's types: the gateway's wire types (TypedDicts generated from the
spec, re-exported from :mod:`agentos_gateway.schema`) and the values the SDK
makes of them (results, pages, events), as frozen dataclasses.

Wire types keep the spec's JSON names (``vm["createdAt"]``); the SDK's own
values have Python names (``result.exit_code``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from .schema import (
    AgentExitEvent,
    AgentStderrEvent,
    ArchiveExtracted,
    CancelResult,
    ContentBlock,
    CreatedToken,
    CreatePreviewRequest,
    CreateScheduleRequest,
    CreateTokenRequest,
    CreateVMRequest,
    CreateWebhookRequest,
    Delivery,
    DirEntry,
    EphemeralEvent,
    ErrorCode,
    ExitStatus,
    FileWritten,
    Me,
    OpenSessionRequest,
    OpenShellRequest,
    OverflowEvent,
    Permission,
    PermissionAnswer,
    Preview,
    ProcessInfo,
    Schedule,
    ScheduleRun,
    Session,
    SessionConfig,
    SessionEvent,
    SessionHistory,
    Shell,
    Snapshot,
    SpawnRequest,
    Stat,
    Token,
    UpdateVMRequest,
    UpdateWebhookRequest,
    VM,
    VMEvent,
    VMState,
    VMUsage,
    WatchEvent,
    Webhook,
    WebhookSecret,
)

__all__ = [
    # Wire types.
    "AgentExitEvent", "AgentStderrEvent", "ArchiveExtracted", "CancelResult", "ContentBlock",
    "CreatePreviewRequest", "CreateScheduleRequest", "CreateTokenRequest", "CreateVMRequest",
    "CreateWebhookRequest", "CreatedToken", "Delivery", "DirEntry", "EphemeralEvent",
    "ErrorCode", "ExitStatus", "FileWritten", "Me", "OpenSessionRequest", "OpenShellRequest",
    "OverflowEvent", "Permission", "PermissionAnswer", "Preview", "ProcessInfo", "Schedule",
    "ScheduleRun", "Session", "SessionConfig", "SessionEvent", "SessionHistory", "Shell",
    "Snapshot", "SpawnRequest", "Stat", "Token", "UpdateVMRequest", "UpdateWebhookRequest",
    "VM", "VMEvent", "VMState", "VMUsage", "WatchEvent", "Webhook", "WebhookSecret",
    # The SDK's values.
    "AttachEvent", "AttachExit", "AttachGap", "AttachOutput", "AttachRefusal",
    "ExecEvent", "ExecResult", "ExitEvent", "FileChangeEvent", "FileRange", "GapEvent",
    "LostEvent", "OutputEvent", "Page", "ProcessEvent", "PromptResult", "ResyncEvent",
    "RetryPolicy", "SessionEnd", "SessionStreamEvent", "SessionUpdate", "ShellEndEvent",
    "ShellEvent", "UnknownEvent", "VMEventsEvent", "VMStreamEvent", "WatchStreamEvent",
]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How idempotent calls are retried and how followed streams reconnect, as
    the Go client's RetryPolicy.

    A call is retried when the gateway answered 429 or 503 (it did not run the
    call) and the call is idempotent: GET, HEAD, PUT and DELETE, and any call
    sent with an idempotency key. GET, HEAD and keyed calls are also retried
    after a network failure, since running them twice is harmless. A call whose
    body is a stream is never retried, because it cannot be sent again.
    """

    max_attempts: int = 5
    """Attempts of one call, and consecutive failed reconnections of a followed
    stream (a connection that delivers an event resets the count); 1 disables retries."""
    min_backoff: float = 0.2
    """Seconds: the bounds of the exponential, jittered wait between attempts. A
    longer ``Retry-After`` of the gateway is honoured, up to a minute."""
    max_backoff: float = 5.0
    idle_timeout: float | None = 60.0
    """Seconds without a byte (the gateway sends a heartbeat every 15 s) after which
    a followed stream's connection is taken for dead and resumed; None disables it."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.min_backoff <= 0 or self.max_backoff < self.min_backoff:
            raise ValueError("RetryPolicy needs 0 < min_backoff <= max_backoff")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list; ``next_cursor`` is empty on the last."""

    items: list[T]
    next_cursor: str


@dataclass(frozen=True)
class ExecResult:
    """The result of a buffered exec."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    """Output beyond ``maxOutputBytes`` was dropped."""
    duration_ms: int
    signal: str | None = None
    replayed: bool = False
    """The gateway answered from the record of an earlier call with the same idempotency key."""

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@dataclass(frozen=True)
class PromptResult:
    stop_reason: str
    message: Any
    replayed: bool = False


@dataclass(frozen=True)
class FileRange:
    """Where a file read lies in the file, as the answer's headers say."""

    partial: bool
    """The body holds the range asked for (206); otherwise the whole file."""
    not_modified: bool
    """``if_none_match`` matched (304): there is no body."""
    start: int
    length: int
    """Bytes in the body, -1 when unknown."""
    size: int
    """The file's size, -1 when unknown."""
    etag: str
    last_modified: str


# ---------------------------------------------------------------- stream events


@dataclass(frozen=True)
class OutputEvent:
    """A piece of a process's, a command's or a shell's output."""

    stream: Literal["stdout", "stderr"]
    seq: int
    """The output's sequence number, also the event id to resume after."""
    data: bytes
    ts: str
    type: Literal["output"] = "output"

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class ExitEvent:
    """The final event of a process's or a command's output. ``truncated`` and
    ``duration_ms`` are set by a streamed exec only."""

    exit_code: int
    signal: str | None = None
    truncated: bool = False
    duration_ms: int | None = None
    type: Literal["exit"] = "exit"


@dataclass(frozen=True)
class GapEvent:
    """Sequence numbers ``first``..``last`` (inclusive) were dropped from the
    gateway's bounded buffer before they were read."""

    first: int
    last: int
    type: Literal["gap"] = "gap"


@dataclass(frozen=True)
class ShellEndEvent:
    """The final event of a shell's output: its exit status."""

    exit_code: int
    signal: str | None = None
    type: Literal["end"] = "end"


@dataclass(frozen=True)
class LostEvent:
    """Ends a stream proxied from a gateway node that died: the VM is lost."""

    code: ErrorCode
    detail: str
    node: str
    type: Literal["lost"] = "lost"


@dataclass(frozen=True)
class UnknownEvent:
    """An event this SDK does not know, as it came."""

    event: str
    data: str
    type: Literal["unknown"] = "unknown"


@dataclass(frozen=True)
class VMStreamEvent:
    """A VM's state change, limit warning, process exit..."""

    event: VMEvent
    type: Literal["vm"] = "vm"


@dataclass(frozen=True)
class FileChangeEvent:
    """A change under a watched directory."""

    event: WatchEvent
    type: Literal["change"] = "change"


@dataclass(frozen=True)
class ResyncEvent:
    """Changes were lost: list the tree again; the events after it are live."""

    reason: Literal["expired", "unknown"]
    type: Literal["resync"] = "resync"


@dataclass(frozen=True)
class SessionUpdate:
    """An event of a session's stream: ``durable`` (``data`` is a SessionEvent,
    whose ``sequence`` is its id), ``ephemeral``, ``agent_stderr``,
    ``agent_exit`` or ``overflow`` (the spec's schema of that name)."""

    type: Literal["durable", "ephemeral", "agent_stderr", "agent_exit", "overflow"]
    data: dict[str, Any]


@dataclass(frozen=True)
class SessionEnd:
    """The final event of a session's stream."""

    state: Literal["closed", "lost", "deleted"]
    type: Literal["end"] = "end"


ExecEvent = OutputEvent | ExitEvent | LostEvent | UnknownEvent
ProcessEvent = OutputEvent | GapEvent | ExitEvent | LostEvent | UnknownEvent
ShellEvent = OutputEvent | GapEvent | ShellEndEvent | LostEvent | UnknownEvent
VMEventsEvent = VMStreamEvent | GapEvent | LostEvent | UnknownEvent
WatchStreamEvent = FileChangeEvent | ResyncEvent | GapEvent | LostEvent | UnknownEvent
SessionStreamEvent = SessionUpdate | SessionEnd | LostEvent | UnknownEvent


# ---------------------------------------------------------------- attach events


@dataclass(frozen=True)
class AttachOutput:
    """Output of an attached shell or process: the next sequence number's bytes.
    ``stream`` is a process's stream; a shell's output is its terminal's."""

    seq: int
    data: bytes
    stream: Literal["stdout", "stderr"] | None = None
    type: Literal["output"] = "output"


@dataclass(frozen=True)
class AttachGap:
    """Output ``first``..``last`` was dropped from the gateway's bounded buffer."""

    first: int
    last: int
    type: Literal["gap"] = "gap"


@dataclass(frozen=True)
class AttachRefusal:
    """The gateway refused input or a control frame; the connection stays."""

    code: ErrorCode
    detail: str
    type: Literal["error"] = "error"


@dataclass(frozen=True)
class AttachExit:
    """The end: the exit status, or the ``code`` and ``detail`` of why it cannot be
    known (the VM ended, its sidecar died). ``seq`` is the last sequence."""

    seq: int
    exit_code: int | None = None
    signal: str | None = None
    code: ErrorCode | None = None
    detail: str = ""
    type: Literal["exit"] = "exit"


AttachEvent = AttachOutput | AttachGap | AttachRefusal | AttachExit

