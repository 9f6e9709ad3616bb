// The console's entry point: sign-in, the header, and routing by the URL's
// fragment (#/, #/vms/<id>/<tab>, #/admin) to the pages.
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { call, describe, getKey, setKey } from "./api.js";
import { field, h, replace } from "./dom.js";
import { vmListPage } from "./vms.js";
import { vmPage } from "./vm.js";
import { adminPage } from "./admin.js";

const app = document.getElementById("app");
let me = null;
let cleanup = () => {};

function signInPage(message) {
  const key = h("input", { type: "password", autocomplete: "off", required: true, spellcheck: false });
  const status = h("p", { class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "card signin", onsubmit: async (e) => {
    e.preventDefault();
    status.textContent = "";
    setKey(key.value.trim());
    try {
      me = await call("GET", "/v1/me");
      route();
    } catch (err) {
      setKey("");
      status.textContent = describe(err);
    }
  } },
  h("h1", {}, "agentos-gateway"),
  h("p", {}, "Sign in with an API key. It is kept for this tab only."),
  field("API key", key),
  h("button", { type: "submit", class: "primary" }, "Sign in"),
  status);
  replace(app, h("main", { class: "center" }, form));
  key.focus();
}

function header() {
  const link = (href, text) => h("a", { href, "aria-current": location.hash === href || (href === "#/" && /^#\/(vms|$)/.test(location.hash || "#/")) ? "page" : null }, text);
  return h("header", { class: "top" },
    h("a", { href: "#/", class: "brand" }, "agentos-gateway"),
    h("nav", { "aria-label": "Main" }, link("#/", "VMs"), me.admin ? link("#/admin", "Admin") : null),
    h("span", { class: "who", title: me.tenant.id }, "Tenant: ", h("strong", { "data-testid": "tenant-name" }, me.tenant.name)),
    h("button", { type: "button", onclick: () => { setKey(""); me = null; cleanup(); cleanup = () => {}; location.hash = "#/"; signInPage(); } }, "Sign out"));
}

async function route() {
  cleanup();
  cleanup = () => {};
  if (!getKey()) { signInPage(); return; }
  if (!me) {
    try { me = await call("GET", "/v1/me"); } catch (err) { setKey(""); signInPage(describe(err)); return; }
  }
  const main = h("main", { id: "main" });
  replace(app, header(), main);
  const parts = (location.hash.replace(/^#\/?/, "") || "").split("/").map(decodeURIComponent);
  if (parts[0] === "vms" && parts[1]) cleanup = vmPage(main, parts[1], parts[2] || "files");
  else if (parts[0] === "admin" && me.admin) cleanup = adminPage(main);
  else cleanup = vmListPage(main);
}

window.addEventListener("hashchange", route);
route();
