// The Events tab: the VM's event stream as it comes.
import { followVM } from "./api.js";
import { h, replace } from "./dom.js";

export function eventsTab(panel, vm) {
  const list = h("ol", { class: "events", "aria-label": "VM events" });
  const state = h("p", { class: "muted", role: "status" }, "Connecting…");
  const empty = h("li", { class: "muted" }, "No events yet.");
  list.append(empty);
  replace(panel, state, list);
  const s = followVM(vm.id, {
    onEvent: (name, data, id) => {
      empty.remove();
      const what = data.state || data.name || (data.pid ? `pid ${data.pid}` : "") || data.detail || "";
      list.prepend(h("li", {}, h("code", {}, id || "·"), " ", h("strong", {}, name), " ", String(typeof what === "string" ? what : JSON.stringify(what)),
        data.time ? h("span", { class: "muted" }, " " + new Date(data.time).toLocaleTimeString()) : null,
        h("details", {}, h("summary", {}, "data"), h("pre", {}, JSON.stringify(data, null, 2)))));
    },
    onState: (st, err) => { state.textContent = st === "open" ? "Following the VM's events." : st === "retrying" ? "Reconnecting…" : err ? err.detail || err.message : "The stream ended."; },
  });
  return () => s.stop();
}
