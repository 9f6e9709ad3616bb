"""The Python SDK of agentos-gateway: a sync :class:`Client` and an
:class:`AsyncClient` of the gateway's REST API, its event streams and its
attach WebSockets, and :func:`verify_webhook` for webhook receivers."""

from ._async_client import (
    AsyncClient,
    AsyncDownload,
    AsyncEventStream,
    AsyncProcessHandle,
    AsyncSessionHandle,
    AsyncShellHandle,
    AsyncVMHandle,
    AsyncWebhookHandle,
)
from ._attach import AsyncAttachment, Attachment, exit_error
from ._sync_client import (
    Client,
    Download,
    EventStream,
    ProcessHandle,
    SessionHandle,
    ShellHandle,
    VMHandle,
    WebhookHandle,
)
from .errors import (
    AgentosError,
    AttachClosedError,
    ConflictError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotEventStreamError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    StreamCutError,
    UnauthenticatedError,
    UnavailableError,
    code_for_status,
)
from .types import (
    AttachEvent,
    AttachExit,
    AttachGap,
    AttachOutput,
    AttachRefusal,
    ExecResult,
    ExitEvent,
    FileChangeEvent,
    FileRange,
    GapEvent,
    LostEvent,
    OutputEvent,
    Page,
    PromptResult,
    ResyncEvent,
    RetryPolicy,
    SessionEnd,
    SessionUpdate,
    ShellEndEvent,
    UnknownEvent,
    VMStreamEvent,
)
from .webhook import WebhookHeaders, WebhookVerificationError, sign_webhook, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "AgentosError", "AsyncAttachment", "AsyncClient", "AsyncDownload", "AsyncEventStream",
    "AsyncProcessHandle", "AsyncSessionHandle", "AsyncShellHandle", "AsyncVMHandle",
    "AsyncWebhookHandle", "AttachClosedError", "AttachEvent", "AttachExit", "AttachGap",
    "AttachOutput", "AttachRefusal", "Attachment", "Client", "ConflictError",
    "DeadlineExceededError", "Download", "EventStream", "ExecResult", "ExitEvent",
    "FileChangeEvent", "FileRange", "GapEvent", "InvalidArgumentError", "LostEvent",
    "NotEventStreamError", "NotFoundError", "OutputEvent", "Page", "PermissionDeniedError",
    "ProcessHandle", "PromptResult", "RateLimitedError", "ResyncEvent", "RetryPolicy",
    "SessionEnd", "SessionHandle", "SessionUpdate", "ShellEndEvent", "ShellHandle",
    "StreamCutError", "UnauthenticatedError", "UnavailableError", "UnknownEvent",
    "VMHandle", "VMStreamEvent", "WebhookHandle", "WebhookHeaders", "WebhookVerificationError",
    "code_for_status", "exit_error", "sign_webhook", "verify_webhook",
]
