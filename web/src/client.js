// The SDK's Client for the tab: the gateway is this page's origin and the
// credential is the key the tab signed in with.
import { Client } from "../../sdk/typescript/src/index.ts";
import { getKey } from "./access.js";

// client makes a Client with the tab's key as it is now, so that signing in
// or out takes effect at the next call. options let a stream give a Client
// of its own its fetch and its retry policy.
export function client(options = {}) {
  const key = getKey();
  return new Client({ baseUrl: location.origin, ...(key ? { apiKey: key } : {}), ...options });
}
