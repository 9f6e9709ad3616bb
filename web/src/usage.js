// The Usage section of a VM's page: what GET /v1/vms/{vm}/usage tells of
// the VM's memory, CPU time, processes and filesystem, as a definition list
// with a Refresh button. The page refreshes it when it opens and after each
// action; the gateway serves figures at most 2 s old, so a refresh is cheap.
// A figure the engine cannot give (memory and CPU time of a VM that shares
// its sidecar with other tenants' VMs) says why instead of a number.
import { allowed, call, describe, vmPath } from "./api.js";
import { age, h, replace } from "./dom.js";
import { usageRows } from "./usage-rows.js";

// Only these states have a usage; the others (creating, disposing, ended)
// are 409, which the page does not ask for.
const measured = new Set(["ready", "hibernating", "hibernated", "waking"]);

// usageSection returns the section (null for a token without vm:read) and
// refresh(state), which fetches and shows the VM's usage when the VM's
// state (if given) has one.
export function usageSection(id) {
  if (!allowed("vm:read")) return { el: null, refresh: () => {} };
  const list = h("dl", { class: "usage", "data-testid": "vm-usage" }, h("dd", { class: "muted" }, "Loading…"));
  // A live region, not role=status: the page's tabs own those.
  const note = h("span", { class: "muted", "aria-live": "polite", "data-testid": "usage-note" });
  const button = h("button", { type: "button", "aria-label": "Refresh usage" }, "Refresh");
  let seq = 0;
  const refresh = async (state) => {
    const mine = ++seq;
    if (typeof state === "string" && !measured.has(state)) {
      replace(list, h("dd", { class: "muted" }, "—"));
      note.textContent = `The VM is ${state}: it has no usage.`;
      return;
    }
    button.disabled = true;
    try {
      const u = await call("GET", vmPath(id, "/usage"));
      if (mine !== seq) return;
      replace(list, usageRows(u).map(([term, value, testid]) => [h("dt", {}, term), h("dd", { "data-testid": testid }, value)]));
      note.textContent = `Collected ${age(u.collectedAt)} ago`;
      note.title = u.collectedAt;
    } catch (err) {
      if (mine !== seq) return;
      replace(list, h("dd", { class: "muted" }, "—"));
      note.textContent = describe(err);
    } finally {
      if (mine === seq) button.disabled = false;
    }
  };
  button.onclick = () => refresh();
  const el = h("section", { "aria-labelledby": "usage-heading", class: "usage-section" },
    h("div", { class: "row" }, h("h2", { id: "usage-heading" }, "Usage"), button, note),
    list);
  return { el, refresh };
}
