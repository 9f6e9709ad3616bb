// The console's entry point: sign-in, the header, and routing by the URL's
// fragment (#/, #/vms/<id>/<tab>, #/admin) to the pages.
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { call, describe, getKey, setKey, setScopes } from "./api.js";
import { field, h, replace } from "./dom.js";
import { vmListPage } from "./vms.js";
import { vmPage } from "./vm.js";
import { adminPage } from "./admin.js";

const app = document.getElementById("app");
let me = null;
let cleanup = () => {};

// A backend may hand its end user a link to one VM with a token in the
// fragment (/#token=agt_...): it signs this tab in, and leaves the address
// bar at once, so that it stays out of the history and of a copied URL.
function takeFragmentToken() {
  const token = new URLSearchParams(location.hash.replace(/^#/, "")).get("token");
  if (!token) return;
  setKey(token);
  me = null;
  history.replaceState(null, "", location.pathname + location.search + "#/");
}

// signedIn keeps who the tab is: a token's scopes limit what the pages show.
function signedIn(who) {
  me = who;
  setScopes(who.token ? who.token.scopes : null);
}

function signInPage(message) {
  const key = h("input", { type: "password", autocomplete: "off", required: true, spellcheck: false });
  const status = h("p", { class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "card signin", onsubmit: async (e) => {
    e.preventDefault();
    status.textContent = "";
    setKey(key.value.trim());
    try {
      signedIn(await call("GET", "/v1/me"));
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
  const bound = me.token && me.token.vm;
  return h("header", { class: "top" },
    h("a", { href: "#/", class: "brand" }, "agentos-gateway"),
    h("nav", { "aria-label": "Main" }, bound ? null : link("#/", "VMs"), me.admin ? link("#/admin", "Admin") : null),
    h("span", { class: "who", title: me.tenant.id }, "Tenant: ", h("strong", { "data-testid": "tenant-name" }, me.tenant.name)),
    me.token ? h("span", { class: "who", title: me.token.expiresAt, "data-testid": "token" }, "Token ", me.token.label || me.token.id) : null,
    h("button", { type: "button", onclick: () => {
      // The page lets go of what it holds (a terminal closes its shell)
      // while the tab still has its credential.
      cleanup(); cleanup = () => {};
      setKey(""); me = null; setScopes(null); location.hash = "#/"; signInPage();
    } }, "Sign out"));
}

async function route() {
  cleanup();
  cleanup = () => {};
  takeFragmentToken();
  if (!getKey()) { signInPage(); return; }
  if (!me) {
    try { signedIn(await call("GET", "/v1/me")); } catch (err) { setKey(""); signInPage(describe(err)); return; }
  }
  const main = h("main", { id: "main" });
  replace(app, header(), main);
  const parts = (location.hash.replace(/^#\/?/, "") || "").split("/").map(decodeURIComponent);
  if (me.token && me.token.vm) {
    // A token bound to a VM sees that VM's page, and nothing else.
    cleanup = vmPage(main, me.token.vm, parts[0] === "vms" && parts[1] === me.token.vm ? parts[2] : "");
    return;
  }
  if (parts[0] === "vms" && parts[1]) cleanup = vmPage(main, parts[1], parts[2] || "files");
  else if (parts[0] === "admin" && me.admin) cleanup = adminPage(main);
  else cleanup = vmListPage(main);
}

window.addEventListener("hashchange", route);
route();
