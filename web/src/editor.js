// The file editor: CodeMirror 6 with highlighting chosen by file name.
import { EditorView, basicSetup } from "codemirror";
import { Compartment, EditorState } from "@codemirror/state";
import { javascript } from "@codemirror/lang-javascript";
import { json } from "@codemirror/lang-json";
import { python } from "@codemirror/lang-python";
import { go } from "@codemirror/lang-go";
import { markdown } from "@codemirror/lang-markdown";
import { html } from "@codemirror/lang-html";
import { css } from "@codemirror/lang-css";
import { yaml } from "@codemirror/lang-yaml";

const byExtension = {
  js: () => javascript(), mjs: () => javascript(), cjs: () => javascript(),
  ts: () => javascript({ typescript: true }), tsx: () => javascript({ typescript: true, jsx: true }), jsx: () => javascript({ jsx: true }),
  json: json, py: python, go: go, md: markdown, markdown: markdown,
  html: html, htm: html, css: css, yaml: yaml, yml: yaml,
};

// languageFor returns the language extension for a path, or [] for plain text.
export function languageFor(path) {
  const ext = (path.split("/").pop().split(".").pop() || "").toLowerCase();
  const f = byExtension[ext];
  return f ? f() : [];
}

// createEditor mounts an editor in parent; onSave runs on Ctrl/Cmd-S.
export function createEditor(parent, onSave) {
  const language = new Compartment();
  const view = new EditorView({
    parent,
    state: EditorState.create({ doc: "", extensions: [
      basicSetup,
      language.of([]),
      EditorView.contentAttributes.of({ "aria-label": "File content" }),
      EditorView.domEventHandlers({ keydown: (e) => {
        if ((e.ctrlKey || e.metaKey) && e.key === "s") { e.preventDefault(); onSave(); return true; }
        return false;
      } }),
    ] }),
  });
  return {
    view,
    set(path, text) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text }, effects: language.reconfigure(languageFor(path)) });
    },
    text: () => view.state.doc.toString(),
    destroy: () => view.destroy(),
  };
}
