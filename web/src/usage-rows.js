// The rows of a VM's Usage section, apart from the page so that their unit
// tests run under plain Node, which cannot load the SDK the page calls.
import { bytes } from "./dom.js";

// usageRows turns a usage document into [term, value, testid] rows.
export function usageRows(u) {
  const ofLimit = (n, limit, fmt = String) => (limit ? `${fmt(n)} of ${fmt(limit)}` : fmt(n));
  const limits = u.limits || {};
  const rows = [];
  if (u.state === "hibernated" || u.state === "waking") {
    rows.push(["Stored image", u.imageBytes !== undefined ? bytes(u.imageBytes) : "—", "usage-image"]);
    return rows;
  }
  rows.push(["Memory", u.memoryBytes !== undefined ? bytes(u.memoryBytes) + " (its sidecar)" : "— (its sidecar runs other tenants' VMs)", "usage-memory"]);
  rows.push(["CPU time", u.cpuSeconds !== undefined ? u.cpuSeconds.toFixed(2) + " s" : "—", "usage-cpu"]);
  if (u.processes) {
    rows.push(["Processes", `${ofLimit(u.processes.running, limits.processes)} running, ${u.processes.exited} exited`, "usage-processes"]);
  }
  rows.push(["Files", u.filesystemBytes !== undefined
    ? `${ofLimit(u.filesystemBytes, limits.filesystemBytes, bytes)}, ${ofLimit(u.inodes ?? 0, limits.inodes)} inodes`
    : "— (not counted before the first file write)", "usage-files"]);
  if (u.handles) {
    rows.push(["Open files", ofLimit(u.handles.openFds, limits.openFds), "usage-fds"]);
    rows.push(["Sockets", `${ofLimit(u.handles.sockets, limits.sockets)} (${u.handles.socketListeners} listening, ${u.handles.socketConnections} connected)`, "usage-sockets"]);
  }
  return rows;
}
