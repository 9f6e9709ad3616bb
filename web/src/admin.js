// The admin page (admin key only): tenants and their keys, and the sidecar
// pool with a small live chart of its VMs and memory.
import { call, describe, q } from "./api.js";
import { age, bytes, field, h, replace } from "./dom.js";

const samples = 60;
const pollMs = 2000;

export function adminPage(main) {
  const error = h("p", { class: "error", role: "alert" });
  const tenantsBody = h("div", { class: "tenants" }, h("p", { class: "muted" }, "Loading tenants…"));
  const newKey = h("div", { class: "newkey", role: "status" });
  const name = h("input", { spellcheck: false, autocomplete: "off" });

  const showKey = (k) => replace(newKey, h("div", { class: "card key" },
    h("p", {}, `New key for ${k.tenantId}. It is shown once: copy it now.`),
    h("code", { "data-testid": "new-key" }, k.key),
    h("button", { type: "button", onclick: () => navigator.clipboard?.writeText(k.key) }, "Copy"),
    h("button", { type: "button", onclick: () => replace(newKey) }, "Done")));

  const tenantCard = async (t) => {
    const keys = h("ul", { class: "keys" }, h("li", { class: "muted" }, "Loading keys…"));
    const loadKeys = async () => {
      try {
        const res = await call("GET", `/v1/tenants/${encodeURIComponent(t.id)}/keys`);
        if (!res.items.length) { replace(keys, h("li", { class: "muted" }, "No keys.")); return; }
        replace(keys, res.items.map((k) => h("li", {}, h("code", {}, k.prefix + "…"), ` ${k.id}, created ${age(k.createdAt)} ago `,
          h("button", { type: "button", class: "danger", "aria-label": `Revoke key ${k.id}`, onclick: async () => {
            try { await call("DELETE", `/v1/tenants/${encodeURIComponent(t.id)}/keys/${encodeURIComponent(k.id)}`); loadKeys(); } catch (err) { error.textContent = describe(err); }
          } }, "Revoke"))));
      } catch (err) { error.textContent = describe(err); }
    };
    loadKeys();
    return h("article", { class: "card", "aria-label": "Tenant " + t.name },
      h("div", { class: "row" }, h("strong", {}, t.name), h("code", {}, t.id), t.isolated ? h("span", { class: "tag" }, "isolated") : null,
        h("span", { class: "muted" }, `VMs ≤ ${t.quotas.maxVms || "∞"}, processes ≤ ${t.quotas.maxProcesses || "∞"}, ${t.quotas.requestsPerSecond || "∞"} req/s`),
        h("button", { type: "button", "aria-label": `Create a key for ${t.name}`, onclick: async () => {
          error.textContent = "";
          try { showKey(await call("POST", `/v1/tenants/${encodeURIComponent(t.id)}/keys`)); loadKeys(); } catch (err) { error.textContent = describe(err); }
        } }, "Create key")),
      keys);
  };
  const loadTenants = async () => {
    try {
      const res = await call("GET", "/v1/tenants" + q({ limit: 200 }));
      replace(tenantsBody, await Promise.all(res.items.map(tenantCard)));
    } catch (err) { error.textContent = describe(err); }
  };

  const createForm = h("form", { class: "row card", "aria-label": "Create a tenant", onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = "";
    try {
      await call("POST", "/v1/tenants", { json: { name: name.value.trim() } });
      name.value = "";
      loadTenants();
    } catch (err) { error.textContent = describe(err); }
  } }, field("Tenant name", name), h("button", { type: "submit", class: "primary" }, "Create tenant"));

  // The sidecar pool.
  const poolBody = h("tbody", {}, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Loading sidecars…")));
  const svgNS = "http://www.w3.org/2000/svg";
  const chart = document.createElementNS(svgNS, "svg");
  chart.setAttribute("viewBox", "0 0 300 80");
  chart.setAttribute("role", "img");
  chart.setAttribute("aria-label", "VMs and memory of the sidecar pool over the last two minutes");
  chart.classList.add("chart");
  const lineVMs = document.createElementNS(svgNS, "polyline");
  const lineRSS = document.createElementNS(svgNS, "polyline");
  lineVMs.setAttribute("class", "vms");
  lineRSS.setAttribute("class", "rss");
  chart.append(lineVMs, lineRSS);
  const legend = h("p", { class: "legend" });
  const history = [];
  const draw = () => {
    const maxV = Math.max(1, ...history.map((s) => s.vms));
    const maxR = Math.max(1, ...history.map((s) => s.rss));
    const pts = (f, max) => history.map((s, i) => `${(i * 300) / (samples - 1)},${78 - (f(s) / max) * 74}`).join(" ");
    lineVMs.setAttribute("points", pts((s) => s.vms, maxV));
    lineRSS.setAttribute("points", pts((s) => s.rss, maxR));
    const last = history[history.length - 1];
    if (last) legend.textContent = `VMs: ${last.vms} (max ${maxV}) · memory: ${bytes(last.rss)} · sidecars: ${last.n}`;
  };
  const poll = async () => {
    try {
      const res = await call("GET", "/v1/sidecars");
      history.push({ vms: res.items.reduce((a, s) => a + s.vmCount, 0), rss: res.items.reduce((a, s) => a + s.rssBytes, 0), n: res.items.length });
      if (history.length > samples) history.shift();
      draw();
      replace(poolBody, res.items.length ? res.items.map((s) => h("tr", {},
        h("td", {}, s.id), h("td", {}, s.state), h("td", {}, String(s.vmCount)), h("td", {}, bytes(s.rssBytes)),
        h("td", {}, String(s.restarts)), h("td", {}, s.isolated ? "isolated: " + s.tenants.join(", ") : s.tenants.join(", ") || "—")))
        : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No sidecars running.")));
    } catch (err) { error.textContent = describe(err); }
  };

  replace(main, h("h1", {}, "Admin"), error,
    h("section", { "aria-label": "Tenants" }, h("h2", {}, "Tenants and keys"), createForm, newKey, tenantsBody),
    h("section", { "aria-label": "Sidecar pool" }, h("h2", {}, "Sidecar pool"), chart, legend,
      h("div", { class: "scroll" }, h("table", { class: "list", "aria-label": "Sidecars" },
        h("thead", {}, h("tr", {}, ["Sidecar", "State", "VMs", "Memory", "Restarts", "Tenants"].map((t) => h("th", { scope: "col" }, t)))), poolBody))));
  loadTenants();
  poll();
  const timer = setInterval(poll, pollMs);
  return () => clearInterval(timer);
}
