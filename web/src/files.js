// The Files tab: a tree that follows changes (its open folders are listed
// again every few seconds), the editor, upload by drag and drop with
// progress, download, new folder, rename/move and delete with confirmation.
import { call, describe, isCode, q, raw, upload, vmPath } from "./api.js";
import { bytes, field, h, replace } from "./dom.js";
import { createEditor } from "./editor.js";

const refreshMs = 3000;

const join = (dir, name) => (dir === "/" ? "" : dir) + "/" + name;
const parent = (p) => p.slice(0, p.lastIndexOf("/")) || "/";

export function filesTab(panel, vm) {
  const id = vm.id;
  const status = h("p", { class: "error", role: "alert" });
  const note = h("p", { class: "muted", role: "status" });
  const open = new Set();
  const listings = new Map(); // dir -> entries
  // Shells and exec start in /workspace (agentos.DefaultCwd), so the tab opens there too.
  let root = "/workspace";
  let selected = { path: root, isDirectory: true };
  let editing = null;
  let dirty = false;
  let timer;

  const fail = (err) => { status.textContent = describe(err); };
  const ok = (msg) => { status.textContent = ""; note.textContent = msg; };

  const tree = h("ul", { class: "tree", role: "tree", "aria-label": "Files" });
  const rootInput = h("input", { value: root, spellcheck: false });
  const selectedLabel = h("span", { class: "muted" });

  const list = async (dir) => {
    const res = await call("GET", vmPath(id, "/dirs") + q({ path: dir }));
    res.items.sort((a, b) => (b.isDirectory - a.isDirectory) || a.name.localeCompare(b.name));
    return res.items;
  };
  const refresh = async () => {
    let changed = false;
    for (const dir of [root, ...open]) {
      try {
        const items = await list(dir);
        if (JSON.stringify(items) !== JSON.stringify(listings.get(dir))) { listings.set(dir, items); changed = true; }
      } catch (err) {
        if (isCode(err, "not_found") && dir !== root) { open.delete(dir); listings.delete(dir); changed = true; continue; }
        fail(err);
        return;
      }
    }
    if (changed) render();
  };
  const select = (entry) => {
    selected = entry;
    selectedLabel.textContent = entry.path;
    render();
  };
  const node = (entry) => {
    const isOpen = open.has(entry.path);
    const label = entry.isDirectory ? (isOpen ? "▾ " : "▸ ") + entry.name + "/" : entry.name;
    const btn = h("button", {
      type: "button", class: "entry" + (selected.path === entry.path ? " selected" : ""),
      "aria-expanded": entry.isDirectory ? String(isOpen) : null,
      onclick: async () => {
        select(entry);
        if (entry.isDirectory) {
          if (isOpen) open.delete(entry.path); else open.add(entry.path);
          await refresh();
          render();
        } else openFile(entry.path);
      },
    }, label, entry.isDirectory ? null : h("span", { class: "muted size" }, " " + bytes(entry.size)));
    const kids = entry.isDirectory && isOpen ? h("ul", { role: "group" }, (listings.get(entry.path) || []).map(node)) : null;
    return h("li", { role: "treeitem", "aria-selected": String(selected.path === entry.path), "aria-expanded": entry.isDirectory ? String(isOpen) : null }, btn, kids);
  };
  const render = () => {
    const items = listings.get(root);
    if (!items) { replace(tree, h("li", { class: "muted" }, "Loading…")); return; }
    if (!items.length) { replace(tree, h("li", { class: "muted" }, "This folder is empty.")); return; }
    replace(tree, items.map(node));
  };
  const targetDir = () => (selected.isDirectory ? selected.path : parent(selected.path));

  // The editor.
  const fileLabel = h("span", { class: "path" }, "No file open");
  const editorBox = h("div", { class: "editor" });
  const save = async () => {
    if (!editing) { fail(new Error("Open or create a file first.")); return; }
    try {
      await raw("PUT", vmPath(id, "/files") + q({ path: editing }), { body: editor.text(), headers: { "Content-Type": "application/octet-stream" } });
      dirty = false;
      fileLabel.textContent = editing;
      ok(`Saved ${editing}.`);
      refresh();
    } catch (err) { fail(err); }
  };
  const editor = createEditor(editorBox, save);
  editor.view.dom.addEventListener("input", () => { dirty = true; });
  const openFile = async (path) => {
    try {
      const resp = await raw("GET", vmPath(id, "/files") + q({ path }));
      const text = await resp.text();
      editing = path;
      fileLabel.textContent = path;
      editor.set(path, text);
      dirty = false;
      ok(`Opened ${path}.`);
    } catch (err) { fail(err); }
  };
  const newFileName = h("input", { placeholder: "notes.txt", spellcheck: false });
  const newFile = (e) => {
    e.preventDefault();
    const name = newFileName.value.trim();
    if (!name) { fail(new Error("Name the new file first.")); return; }
    editing = name.startsWith("/") ? name : join(targetDir(), name);
    fileLabel.textContent = editing + " (new)";
    editor.set(editing, "");
    newFileName.value = "";
    ok(`New file ${editing}: type, then Save.`);
    editor.view.focus();
  };

  // Upload.
  const progress = h("progress", { max: 1, value: 0, hidden: true, "aria-label": "Upload progress" });
  const picker = h("input", { type: "file", multiple: true, hidden: true, onchange: () => uploadAll(picker.files) });
  const uploadAll = async (files) => {
    for (const f of files) {
      const path = join(targetDir(), f.name);
      progress.hidden = false;
      progress.value = 0;
      try {
        await upload(vmPath(id, "/files") + q({ path }), f, (x) => { progress.value = x; });
        ok(`Uploaded ${path} (${bytes(f.size)}).`);
      } catch (err) { fail(err); }
    }
    progress.hidden = true;
    picker.value = "";
    refresh();
  };
  const drop = h("div", { class: "drop", "aria-label": "Drop files here to upload them",
    ondragover: (e) => { e.preventDefault(); drop.classList.add("over"); },
    ondragleave: () => drop.classList.remove("over"),
    ondrop: (e) => { e.preventDefault(); drop.classList.remove("over"); uploadAll(e.dataTransfer.files); },
  }, "Drop files here to upload them into the selected folder, or ",
  h("button", { type: "button", onclick: () => picker.click() }, "Upload"), picker, progress);

  // Actions on the selected entry.
  const folderName = h("input", { placeholder: "new-folder", spellcheck: false });
  const newFolder = async (e) => {
    e.preventDefault();
    const name = folderName.value.trim();
    if (!name) { fail(new Error("Name the new folder first.")); return; }
    const path = name.startsWith("/") ? name : join(targetDir(), name);
    try { await call("POST", vmPath(id, "/dirs"), { json: { path } }); folderName.value = ""; ok(`Created ${path}.`); open.add(parent(path)); refresh(); } catch (err) { fail(err); }
  };
  const moveTo = h("input", { placeholder: "/workspace/new-name", spellcheck: false });
  const move = async (e) => {
    e.preventDefault();
    const to = moveTo.value.trim();
    if (!to) { fail(new Error("Give the new path first.")); return; }
    try {
      await call("POST", vmPath(id, "/fs/move"), { json: { from: selected.path, to } });
      ok(`Moved ${selected.path} to ${to}.`);
      if (editing === selected.path) { editing = to; fileLabel.textContent = to; }
      selected = { path: to, isDirectory: selected.isDirectory };
      moveTo.value = "";
      refresh();
    } catch (err) { fail(err); }
  };
  const download = async () => {
    if (selected.isDirectory) { fail(new Error("Select a file to download.")); return; }
    try {
      const resp = await raw("GET", vmPath(id, "/files") + q({ path: selected.path }));
      const url = URL.createObjectURL(await resp.blob());
      const a = h("a", { href: url, download: selected.path.split("/").pop() });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) { fail(err); }
  };
  const confirmBox = h("div", { class: "confirm", hidden: true, role: "alertdialog", "aria-label": "Confirm delete" });
  const askDelete = () => {
    const path = selected.path;
    replace(confirmBox,
      h("span", {}, `Delete ${path}${selected.isDirectory ? " and everything in it" : ""}?`),
      h("button", { type: "button", class: "danger", onclick: async () => {
        confirmBox.hidden = true;
        try {
          await call("DELETE", vmPath(id, "/files") + q({ path, recursive: String(!!selected.isDirectory) }));
          ok(`Deleted ${path}.`);
          if (editing === path) { editing = null; fileLabel.textContent = "No file open"; editor.set("", ""); }
          select({ path: parent(path), isDirectory: true });
          refresh();
        } catch (err) { fail(err); }
      } }, "Confirm delete"),
      h("button", { type: "button", onclick: () => { confirmBox.hidden = true; } }, "Keep"));
    confirmBox.hidden = false;
    confirmBox.querySelector("button").focus();
  };

  replace(panel,
    h("div", { class: "files" },
      h("div", { class: "side" },
        h("form", { class: "row", onsubmit: (e) => { e.preventDefault(); root = rootInput.value.trim() || "/"; listings.clear(); open.clear(); select({ path: root, isDirectory: true }); refresh(); } },
          field("Folder", rootInput), h("button", { type: "submit" }, "Go")),
        tree,
        h("p", {}, "Selected: ", selectedLabel),
        h("div", { class: "row" },
          h("button", { type: "button", onclick: download }, "Download"),
          h("button", { type: "button", class: "danger", onclick: askDelete }, "Delete")),
        confirmBox,
        h("form", { class: "row", onsubmit: newFolder }, field("Folder name", folderName), h("button", { type: "submit" }, "New folder")),
        h("form", { class: "row", onsubmit: move }, field("Move to", moveTo), h("button", { type: "submit" }, "Rename")),
        drop),
      h("div", { class: "main" },
        h("div", { class: "row" }, fileLabel, h("button", { type: "button", class: "primary", onclick: save }, "Save")),
        h("form", { class: "row", onsubmit: newFile }, field("New file name", newFileName), h("button", { type: "submit" }, "New file")),
        editorBox)),
    note, status);
  selectedLabel.textContent = root;
  render();
  refresh();
  timer = setInterval(refresh, refreshMs);
  const beforeUnload = (e) => { if (dirty) e.preventDefault(); };
  window.addEventListener("beforeunload", beforeUnload);
  return () => { clearInterval(timer); editor.destroy(); window.removeEventListener("beforeunload", beforeUnload); };
}
