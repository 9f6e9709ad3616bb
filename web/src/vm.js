// A VM's page: its summary and usage, Checkpoint, Hibernate or Wake,
// Restore, Delete VM, and the tabs Files, Terminal, Processes, Sessions and
// Events. Each tab mounts into its panel and returns the function that
// unmounts it (the Terminal tab closes its shell then: an idle shell slows
// its sidecar on agentOS 0.2.21). A hibernated VM wakes on the first call a
// tab makes; Hibernate unmounts the tab, whose processes and shells end with
// the VM's run. A VM lost with a checkpoint comes back only on Restore: its
// files are those of the checkpoint, which its owner should know before
// using it.
import { allowed, call, describe, vmPath } from "./api.js";
import { age, h, replace } from "./dom.js";
import { filesTab } from "./files.js";
import { terminalTab } from "./terminal.js";
import { processesTab } from "./processes.js";
import { sessionsTab } from "./sessions.js";
import { eventsTab } from "./events.js";
import { usageSection } from "./usage.js";

// Each tab, and the scope a token needs for it.
const allTabs = [
  ["files", "Files", filesTab, "files:read"],
  ["terminal", "Terminal", terminalTab, "shells"],
  ["processes", "Processes", processesTab, "exec"],
  ["sessions", "Sessions", sessionsTab, "sessions"],
  ["events", "Events", eventsTab, "vm:read"],
];

export function vmPage(main, id, tab) {
  const tabs = allTabs.filter((t) => allowed(t[3]));
  const manages = allowed("vm:write");
  if (!tabs.length) {
    replace(main, h("p", { class: "error", role: "alert" }, "This token opens none of the console's tabs (files:read, shells, exec, sessions, vm:read)."));
    return () => {};
  }
  let unmount = () => {};
  const status = h("p", { class: "error", role: "alert" });
  const summary = h("div", { class: "summary" }, h("span", { class: "muted" }, "Loading the VM…"));
  const panel = h("section", { role: "tabpanel", class: "panel" });
  const current = tabs.find((t) => t[0] === tab) || tabs[0];
  const buttons = tabs.map(([key, name]) => h("button", {
    type: "button", role: "tab", id: "tab-" + key, "aria-controls": "panel",
    "aria-selected": String(key === current[0]), tabindex: key === current[0] ? "0" : "-1",
    onclick: () => { location.hash = `#/vms/${encodeURIComponent(id)}/${key}`; },
    onkeydown: (e) => {
      const i = tabs.findIndex((t) => t[0] === key);
      const j = e.key === "ArrowRight" ? (i + 1) % tabs.length : e.key === "ArrowLeft" ? (i + tabs.length - 1) % tabs.length : -1;
      if (j >= 0) { e.preventDefault(); location.hash = `#/vms/${encodeURIComponent(id)}/${tabs[j][0]}`; }
    },
  }, name));
  panel.id = "panel";
  panel.setAttribute("aria-labelledby", "tab-" + current[0]);

  const del = h("button", { type: "button", class: "danger", onclick: async () => {
    status.textContent = "";
    del.disabled = true;
    try {
      unmount();
      unmount = () => {};
      await call("DELETE", vmPath(id));
      location.hash = "#/";
    } catch (err) { status.textContent = describe(err); del.disabled = false; }
  } }, "Delete VM");

  const usage = usageSection(id);
  let alive = true;
  const showSummary = (vm) => {
    replace(summary,
      h("span", {}, "State ", h("strong", { class: "state " + vm.state, "data-testid": "vm-state" }, vm.state)),
      h("span", {}, "Sidecar ", vm.sidecarId || "—"),
      h("span", { title: vm.createdAt }, "Age ", age(vm.createdAt)),
      vm.agents.length ? h("span", {}, "Agents ", vm.agents.join(", ")) : null,
      vm.checkpointAt ? h("span", { title: vm.checkpointAt, "data-testid": "vm-checkpoint" }, "Checkpoint ", age(vm.checkpointAt), " ago") : null,
      Object.entries(vm.labels).map(([k, v]) => h("span", { class: "tag" }, `${k}=${v}`)));
    hibernate.hidden = !manages || vm.state !== "ready";
    checkpoint.hidden = !manages || vm.state !== "ready";
    wake.hidden = !manages || vm.state !== "hibernated";
    restore.hidden = !manages || !vm.restorable;
    usage.refresh(vm.state);
  };
  // action runs a call on the VM, then shows its record. after says what
  // becomes of the tab: "unmount" (the VM stops running), "remount" (it
  // runs again) or "keep".
  const action = (button, path, after) => async () => {
    status.textContent = "";
    button.disabled = true;
    try {
      if (after === "unmount") { unmount(); unmount = () => {}; replace(panel, h("p", { class: "muted" }, "The VM is hibernated: Wake it, or open a tab to wake it.")); }
      const vm = await call("POST", vmPath(id, path));
      if (!alive) return;
      showSummary(vm);
      if (after === "remount") { unmount(); unmount = current[2](panel, vm); }
    } catch (err) { status.textContent = describe(err); }
    button.disabled = false;
  };
  const checkpoint = h("button", { type: "button", hidden: true, title: "Store what changed in the VM's files now" }, "Checkpoint");
  const hibernate = h("button", { type: "button", hidden: true }, "Hibernate");
  const wake = h("button", { type: "button", hidden: true }, "Wake");
  const restore = h("button", { type: "button", hidden: true, title: "Bring the lost VM back from its last checkpoint" }, "Restore");
  checkpoint.onclick = action(checkpoint, "/checkpoint", "keep");
  hibernate.onclick = action(hibernate, "/hibernate", "unmount");
  wake.onclick = action(wake, "/wake", "remount");
  restore.onclick = action(restore, "/wake", "remount");

  replace(main,
    h("div", { class: "titlebar" }, h("h1", {}, h("a", { href: "#/" }, "VMs"), " / ", id), h("div", { class: "row" }, checkpoint, hibernate, wake, restore, manages ? del : null)),
    summary, status, usage.el,
    h("div", { role: "tablist", "aria-label": "VM", class: "tabs" }, buttons),
    panel);
  if (location.hash.split("/")[3] === undefined || current[0] !== tab) {
    history.replaceState(null, "", `#/vms/${encodeURIComponent(id)}/${current[0]}`);
  }
  (async () => {
    let vm = await call("GET", vmPath(id));
    if (!alive) return;
    showSummary(vm);
    if (vm.state === "hibernated") {
      // Opening the page is using the VM: it wakes, as any call would.
      replace(panel, h("p", { class: "muted", role: "status" }, "Waking the VM…"));
      vm = await call("POST", vmPath(id, "/wake"));
      if (!alive) return;
      showSummary(vm);
    }
    if (vm.restorable) {
      replace(panel, h("p", { class: "muted", role: "status" },
        "The VM was lost with its sidecar or node. Restore brings it back under its id with its files as of its last checkpoint."));
      return;
    }
    unmount = current[2](panel, vm);
  })().catch((err) => { if (alive) { replace(summary); status.textContent = describe(err); } });
  return () => { alive = false; unmount(); };
}
