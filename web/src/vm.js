// A VM's page: its summary, Delete VM, and the tabs Files, Terminal,
// Processes, Sessions and Events. Each tab mounts into its panel and
// returns the function that unmounts it (the Terminal tab closes its shell
// then: an idle shell slows its sidecar on agentOS 0.2.21).
import { call, describe, vmPath } from "./api.js";
import { age, h, replace } from "./dom.js";
import { filesTab } from "./files.js";
import { terminalTab } from "./terminal.js";
import { processesTab } from "./processes.js";
import { sessionsTab } from "./sessions.js";
import { eventsTab } from "./events.js";

const tabs = [
  ["files", "Files", filesTab],
  ["terminal", "Terminal", terminalTab],
  ["processes", "Processes", processesTab],
  ["sessions", "Sessions", sessionsTab],
  ["events", "Events", eventsTab],
];

export function vmPage(main, id, tab) {
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

  replace(main,
    h("div", { class: "titlebar" }, h("h1", {}, h("a", { href: "#/" }, "VMs"), " / ", id), del),
    summary, status,
    h("div", { role: "tablist", "aria-label": "VM", class: "tabs" }, buttons),
    panel);
  if (location.hash.split("/")[3] === undefined || current[0] !== tab) {
    history.replaceState(null, "", `#/vms/${encodeURIComponent(id)}/${current[0]}`);
  }
  let alive = true;
  call("GET", vmPath(id)).then((vm) => {
    if (!alive) return;
    replace(summary,
      h("span", {}, "State ", h("strong", { class: "state " + vm.state }, vm.state)),
      h("span", {}, "Sidecar ", vm.sidecarId || "—"),
      h("span", { title: vm.createdAt }, "Age ", age(vm.createdAt)),
      vm.agents.length ? h("span", {}, "Agents ", vm.agents.join(", ")) : null,
      Object.entries(vm.labels).map(([k, v]) => h("span", { class: "tag" }, `${k}=${v}`)));
    unmount = current[2](panel, vm);
  }).catch((err) => { if (alive) { replace(summary); status.textContent = describe(err); } });
  return () => { alive = false; unmount(); };
}
