// The VM list: live states from each VM's event stream, create and delete.
import { call, describe, followVM, isKey, q, vmPath } from "./api.js";
import { age, field, h, parsePairs, replace } from "./dom.js";

const agentsKnown = ["pi", "claude", "codex", "opencode"];

export function vmListPage(main) {
  const status = h("p", { class: "error", role: "alert" });
  const body = h("tbody", {}, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Loading VMs…")));
  const streams = new Map();
  let vms = [];
  let timer;

  const render = () => {
    if (!vms.length) { replace(body, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No VMs yet: create one above."))); return; }
    replace(body, vms.map((vm) => h("tr", {},
      h("td", { id: "vm-" + vm.id }, h("a", { href: `#/vms/${vm.id}/files` }, vm.id)),
      h("td", {}, h("span", { class: "state " + vm.state, "data-vm-state": vm.id }, vm.state), vm.reason ? h("span", { class: "muted" }, " " + vm.reason) : null,
        vm.restorable ? h("span", { class: "tag" }, "restorable") : null),
      h("td", {}, Object.entries(vm.labels || {}).map(([k, v]) => h("span", { class: "tag" }, `${k}=${v}`))),
      h("td", { title: vm.createdAt }, age(vm.createdAt)),
      h("td", {}, vm.sidecarId || "—"),
      h("td", {}, h("button", { type: "button", class: "danger", "aria-describedby": "vm-" + vm.id, onclick: () => del(vm) }, "Delete VM")))));
  };
  const follow = () => {
    for (const vm of vms) {
      // Only a ready VM has events to follow: a VM still being created
      // answers 409 until it is ready, and the next refresh follows it then.
      if (streams.has(vm.id) || vm.state !== "ready") continue;
      streams.set(vm.id, followVM(vm.id, { onEvent: (name, data) => {
        if (name !== "state") return;
        const v = vms.find((x) => x.id === vm.id);
        if (v) { v.state = data.state; if (data.reason) v.reason = data.reason; render(); }
      } }));
    }
  };
  const load = async () => {
    try {
      vms = (await call("GET", "/v1/vms" + q({ limit: 200 }))).items;
      status.textContent = "";
      render();
      follow();
    } catch (err) { status.textContent = describe(err); }
  };
  const del = async (vm) => {
    status.textContent = "";
    try { await call("DELETE", vmPath(vm.id)); await load(); } catch (err) { status.textContent = describe(err); }
  };

  const labels = h("input", { placeholder: "team=docs, env=dev" });
  const env = h("textarea", { rows: 2, placeholder: "LANG=C.UTF-8" });
  const ports = h("input", { placeholder: "e.g. 8080", inputmode: "numeric" });
  const agentBoxes = agentsKnown.map((a) => h("label", { class: "check" }, h("input", { type: "checkbox", value: a }), a));
  const creating = h("span", { class: "muted", role: "status" });
  const form = h("form", { class: "card", "aria-label": "Create a VM", onsubmit: async (e) => {
    e.preventDefault();
    status.textContent = "";
    let req;
    try {
      req = { labels: parsePairs(labels.value, "Labels"), env: parsePairs(env.value, "Environment") };
      const agents = agentBoxes.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value);
      if (agents.length) req.agents = agents;
      const p = ports.value.split(/[\s,]+/).filter(Boolean).map(Number);
      if (p.some((n) => !Number.isInteger(n))) throw new Error("Loopback ports: whole numbers, separated by commas");
      if (p.length) req.loopbackExemptPorts = p;
    } catch (err) { status.textContent = describe(err); return; }
    const btn = form.querySelector("button[type=submit]");
    btn.disabled = true;
    creating.textContent = "Creating…";
    try {
      const vm = await call("POST", "/v1/vms", { json: req });
      creating.textContent = `Created ${vm.id}.`;
      labels.value = env.value = ports.value = "";
      await load();
    } catch (err) { status.textContent = describe(err); creating.textContent = ""; }
    btn.disabled = false;
  } },
  h("h2", {}, "New VM"),
  h("div", { class: "row" }, field("Labels", labels), field("Environment", env), field("Loopback ports", ports)),
  h("fieldset", { class: "agents" }, h("legend", {}, "Agents"), agentBoxes),
  h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Create VM"), creating));

  // Only a key creates VMs; a token lists the VMs it may see.
  replace(main, h("h1", {}, "VMs"), isKey() ? form : null, status,
    h("div", { class: "scroll" }, h("table", { class: "list", "aria-label": "VMs" },
      h("thead", {}, h("tr", {}, ["VM", "State", "Labels", "Age", "Sidecar", ""].map((t) => h("th", { scope: "col" }, t)))), body)));
  load();
  // New VMs (made elsewhere) and ages: a light refresh; states come live.
  timer = setInterval(load, 10000);
  return () => { clearInterval(timer); for (const s of streams.values()) s.stop(); };
}
