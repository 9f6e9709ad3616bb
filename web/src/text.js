// The console's wording of the gateway's answers, and the paths it calls.
// It imports nothing, so that its tests run under plain Node.

// describe turns any error into a sentence for the page. The SDK's
// AgentosError is recognised by its name, because this module does not
// import the SDK: its title and detail are the gateway's problem, and its
// status is 0 for a stream's final error event, which has no title.
export function describe(err) {
  if (err && err.name === "AgentosError") {
    const title = err.title ? err.title + ": " : "";
    const detail = err.detail || err.title || `HTTP ${err.status}`;
    return `${title}${detail}${err.code ? ` (${err.code})` : ""}`;
  }
  if (err && err.name === "AbortError") return "Cancelled.";
  return (err && err.message) || String(err);
}

export const q = (params) => "?" + new URLSearchParams(params).toString();
export const vmPath = (vm, rest = "") => `/v1/vms/${encodeURIComponent(vm)}${rest}`;
