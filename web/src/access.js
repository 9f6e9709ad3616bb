// Who the tab signed in as: the key is kept in the tab's sessionStorage, and
// the scopes of a token (from a `/#token=` link) decide what the pages show.
// It imports nothing, so that its tests run under plain Node.

const keyName = "agentos-gateway.key";

export function getKey() { return sessionStorage.getItem(keyName) || ""; }
export function setKey(k) { if (k) sessionStorage.setItem(keyName, k); else sessionStorage.removeItem(keyName); }

// The scopes of the token the tab signed in with (null for an API key, which
// may do everything its tenant may): the pages show only what they allow.
let scopes = null;
export function setScopes(list) { scopes = list ? new Set(list) : null; }
export function allowed(scope) { return scopes === null || scopes.has(scope); }
export function isKey() { return scopes === null; }
