/*
 * chronos-git — Hermes dashboard tab.
 *
 * A plain IIFE (no bundler, no JSX) that uses only what the dashboard exposes:
 *   window.__HERMES_PLUGIN_SDK__  React, hooks, fetchJSON (adds the session token), components
 *   window.__HERMES_PLUGINS__     register("chronos-git", Page)
 *
 * Backend: /api/plugins/chronos-git/* (api/router.py).  Every response is an
 * envelope; errors are {"status": "error", "error": ..., "message"?: ...} with a
 * 4xx/5xx status, which SDK.fetchJSON turns into Error("<code>: <body>").
 * Every POST is JSON (the API refuses anything else with 415).  Names that are
 * not UTF-8 arrive as `path` (display) + `path_b64` (exact): requests always
 * send the `_b64` form when there is one.  A restore is two requests: the dry
 * run (first click) returns the plan and a `plan_token`; the confirm click
 * sends the same request with that token.  The time machine's merging operations
 * (agent-only restore: POST /restore with agent_only; POST /revert, /undo, /redo)
 * work the same way: a dry run lists what is merged and what conflicts (`agent` /
 * `person` of each conflict), the second click confirms with the plan_token.
 *
 * The timeline is a tree: GET /checkpoints?all=true lists every checkpoint with its
 * `parents` in the timeline; the current line is the newest one and its parents, the
 * lines left behind by restores are dimmed (still selectable, still restorable); a
 * checkpoint two lines leave is marked as a branch point; `@N` (its `number`) and its
 * roles (`roles` where an answer carries it, else `role`) are shown.  A slider (and the
 * arrow keys, on it or on the list) scrubs through the checkpoints; the diff of each is
 * asked for once the scrub rests SCRUB_MS.
 *
 * The pane reads only what the OpenAPI schema declares for each route
 * (/api/plugins/chronos-git/openapi.json, the models of service/results.py):
 * tests/e2e/test_dashboard_browser.py records every field it reads and checks
 * them against that schema.  Answers are kept as they came (`{res, ...}` beside
 * the pane's own notes), never merged with local state.  A field an older API may
 * lack is read only where the schema declares it: a journal event's `tool` (Event is
 * open, so the served schema is looked up: probeSchema).
 *
 * Stable data-testid attributes are part of the contract with
 * tests/test_dashboard_browser.py — rename them only together with the tests.
 */
(function () {
  "use strict";
  var SDK = window.__HERMES_PLUGIN_SDK__;
  var PLUGINS = window.__HERMES_PLUGINS__;
  if (!SDK || !PLUGINS || !SDK.React) return;

  var React = SDK.React;
  var h = React.createElement;
  var hooks = SDK.hooks || React;
  var useState = hooks.useState, useEffect = hooks.useEffect, useCallback = hooks.useCallback,
      useRef = hooks.useRef;
  var C = SDK.components || {};

  var NAME = "chronos-git";
  var BASE = "/api/plugins/" + NAME;
  var POLL_MS = 5000;          // background refresh
  var ARM_MS = 5000;           // how long the first restore click stays armed
  var CHECKPOINT_LIMIT = 50;
  var EVENT_LIMIT = 15;
  var SCRUB_MS = 180;          // scrubbing: the diff of a checkpoint is asked for once it rests this long
  var LANE_W = 14, DOT_Y = 13; // the timeline tree: lane width, the dot's height in a row

  // ------------------------------------------------------------ components
  // SDK components when present, plain elements otherwise (older/newer hosts).
  function pick(name, tag) {
    return C[name] || function (props) {
      var p = Object.assign({}, props);
      delete p.outlined; delete p.ghost; delete p.destructive; delete p.size; delete p.tone;
      return h(tag, p);
    };
  }
  var Card = pick("Card", "section"), CardHeader = pick("CardHeader", "div"),
      CardTitle = pick("CardTitle", "h3"), CardContent = pick("CardContent", "div"),
      Badge = pick("Badge", "span"), Button = pick("Button", "button"), Input = pick("Input", "input"),
      Label = pick("Label", "label");

  /** Dropdown: the SDK Select (a custom listbox) or a native <select>. */
  function Choice(props) {
    var options = props.options || [];
    if (C.Select && C.SelectOption) {
      return h("div", { "data-testid": props.testid, style: { minWidth: props.minWidth || 160 } },
        h(C.Select, { value: props.value, onValueChange: props.onChange, placeholder: props.placeholder,
                      disabled: props.disabled },
          options.map(function (o) { return h(C.SelectOption, { key: o.value, value: o.value }, o.label); })));
    }
    return h("select", { "data-testid": props.testid, value: props.value || "", disabled: props.disabled,
                         onChange: function (e) { props.onChange(e.target.value); } },
      options.map(function (o) { return h("option", { key: o.value, value: o.value }, o.label); }));
  }

  // ------------------------------------------------------------------ api
  /** Error from an envelope: .status (HTTP), .code (envelope "error"), .body (the envelope). */
  function ApiError(status, body, fallback) {
    var b = body && typeof body === "object" ? body : {};
    var code = b.error || fallback || "request failed";
    var msg = typeof code === "string" ? code : JSON.stringify(code);
    if (b.message && b.message !== msg) msg = msg + ": " + b.message;
    var e = new Error(msg);
    e.status = status;
    e.code = typeof code === "string" ? code : "error";
    e.body = b;
    return e;
  }

  function toApiError(err) {
    if (err && err.body !== undefined && err.code) return err;
    var text = String((err && err.message) || err);
    var m = /^(\d{3}): ([\s\S]*)$/.exec(text);
    if (!m) return ApiError(0, null, text);
    var body = null;
    try { body = JSON.parse(m[2]); } catch (_e) { body = null; }
    if (body && typeof body.detail !== "undefined" && !body.error) {   // FastAPI validation error
      var d = body.detail;
      body = { status: "error", error: Array.isArray(d)
        ? d.map(function (x) { return (x.loc || []).slice(1).join(".") + ": " + x.msg; }).join("; ")
        : String(d) };
    }
    return ApiError(Number(m[1]), body, m[2] || ("HTTP " + m[1]));
  }

  function qs(params) {
    var parts = [];
    Object.keys(params || {}).forEach(function (k) {
      var v = params[k];
      if (v !== undefined && v !== null && v !== "") parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    });
    return parts.length ? "?" + parts.join("&") : "";
  }

  /** The forensic report (GET /report, HTML with its own CSP) opened as a blob in a new tab:
   *  a plain link could not carry the session token. */
  function openReport() {
    var fetcher = SDK.authedFetch || window.fetch.bind(window);
    var tab = window.open("", "_blank");
    fetcher(BASE + "/report").then(function (res) {
      if (!res.ok) throw new Error("report: HTTP " + res.status);
      return res.text();
    }).then(function (html) {
      var url = URL.createObjectURL(new Blob([html], { type: "text/html" }));
      if (tab) tab.location = url; else window.location.assign(url);
    }, function (e) {
      if (tab) tab.close();
      window.alert(String(e && e.message || e));
    });
  }

  function api(path, opts) {
    opts = opts || {};
    var init = { method: opts.method || "GET", headers: {} };
    if (init.method !== "GET") {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body || {});
    }
    return SDK.fetchJSON(BASE + path, init).then(function (data) {
      if (data && data.status === "error") throw ApiError(200, data);
      return data;
    }, function (err) { throw toApiError(err); });
  }

  // ------------------------------------------------------------- helpers
  function short(id, n) { return id ? String(id).slice(0, n || 12) : "—"; }

  function ago(seconds) {
    if (!seconds) return "";
    var d = Math.max(0, Date.now() / 1000 - seconds);
    if (d < 60) return Math.round(d) + "s ago";
    if (d < 3600) return Math.round(d / 60) + "m ago";
    if (d < 86400) return Math.round(d / 3600) + "h ago";
    return Math.round(d / 86400) + "d ago";
  }

  function fmtTime(seconds) {
    if (!seconds) return "—";
    var dt = new Date(seconds * 1000);
    return dt.toLocaleString() + " (" + ago(seconds) + ")";
  }

  /** The request fields naming workspace `root`: its exact bytes when they are not UTF-8. */
  function wsArgs(list, root) {
    var w = (list || []).filter(function (x) { return x.root === root; })[0];
    return w && w.root_b64 ? { workspace_b64: w.root_b64 } : { workspace: root };
  }

  /** Skipped entries (service.results.Skipped) as text. */
  function skippedText(list, sep) {
    return (list || []).map(function (s) { return s.path + " (" + s.reason + ")"; }).join(sep);
  }

  var ACTION_HELP = {   // every action the engine's plan can hold
    restore: "rewritten to the checkpoint's content", create: "created from the checkpoint",
    delete: "removed: not in the checkpoint", skip: "left untouched",
    keep: "left untouched: not captured by the safety checkpoint (ignored, too large or special)",
    failed: "could not be written",
    conflict: "left exactly as it is: the change taken back and a later one overlap (or their boundary is not known)"
  };

  var ROLE_LABEL = { baseline: "baseline", before_call: "before call", after_call: "after call",
                     turn_start: "turn start", safety: "safety", manual: "manual", restored: "restored",
                     boundary: "boundary" };
  var ROLE_TONE = { safety: "warning", restored: "success", manual: "secondary", baseline: "secondary", boundary: "warning" };

  /** The roles a checkpoint served: `roles` (a reused checkpoint serves several) when the answer
   *  carries it, else its `role`.  CheckpointInfo is a closed model (additionalProperties: false),
   *  so an answer carries `roles` only where the schema declares it: the `in` test reads nothing. */
  function rolesOf(c) {
    var list = "roles" in c && c.roles && c.roles.length ? c.roles : (c.role ? [c.role] : []);
    return list;
  }

  function numberText(c) { return c && c.number != null ? "@" + c.number : ""; }

  /** Optional fields the pane shows only when the OpenAPI schema declares them.  The schema
   *  document is read as text (it is the contract, not an answer of a route): our own
   *  (BASE/openapi.json, the standalone server), else the host's (/openapi.json: Hermes' app,
   *  which holds our routes), each looked up by route, never by a component's name. */
  var OPTIONAL = { eventTool: false, schema: null };   // schema: where it was found ("plugin", "host")
  var schemaProbe = null;

  function schemaBranches(doc, schema, out) {
    if (!schema || typeof schema !== "object") return out;
    if (schema.$ref) {
      var name = String(schema.$ref).split("/").pop();
      return schemaBranches(doc, ((doc.components || {}).schemas || {})[name], out);
    }
    var alts = schema.anyOf || schema.oneOf || schema.allOf;
    if (alts) { alts.forEach(function (a) { schemaBranches(doc, a, out); }); return out; }
    out.push(schema);
    return out;
  }

  /** Does the 200 answer of `method path` declare `fields` (["events", "[]", "tool"])? */
  function schemaDeclares(doc, method, path, fields) {
    var op = ((doc.paths || {})[path] || {})[method];
    var content = op && op.responses && op.responses["200"] && op.responses["200"].content;
    var cur = content && content["application/json"] ? [content["application/json"].schema] : [];
    fields.forEach(function (seg) {
      var next = [];
      cur.forEach(function (sc) {
        schemaBranches(doc, sc, []).forEach(function (b) {
          if (seg === "[]") { if (b.type === "array" && b.items) next.push(b.items); }
          else if (b.properties && b.properties[seg]) next.push(b.properties[seg]);
        });
      });
      cur = next;
    });
    return cur.length > 0;
  }

  function probeSchema() {
    if (schemaProbe) return schemaProbe;
    var fetcher = SDK.authedFetch || window.fetch.bind(window);
    function load(url) {
      return Promise.resolve().then(function () { return fetcher(url); })
        .then(function (res) { return res.ok ? res.text() : ""; })
        .then(function (text) {
          var doc = null;
          try { doc = JSON.parse(text); } catch (_e) { doc = null; }
          return doc && doc.paths && doc.paths[BASE + "/journal/log"] ? doc : null;
        }, function () { return null; });
    }
    schemaProbe = load(BASE + "/openapi.json").then(function (doc) {
      if (doc) { OPTIONAL.schema = "plugin"; return doc; }
      return load("/openapi.json").then(function (d2) { if (d2) OPTIONAL.schema = "host"; return d2; });
    })
      .then(function (doc) {
        if (doc) OPTIONAL.eventTool = schemaDeclares(doc, "get", BASE + "/journal/log", ["events", "[]", "tool"]);
        return OPTIONAL;
      });
    return schemaProbe;
  }

  /** The timeline as a tree, from GET /checkpoints?all=true (newest first, each with its
   *  `parents` in the timeline).  The current line is the newest checkpoint and its parents;
   *  it is always lane 0.  Lanes are laid out as `git log --graph` does: a lane waits for a
   *  checkpoint's parent; lanes waiting for the same one join there (a branch point). */
  function timelineLayout(list) {
    var byId = {}, children = {}, onLine = {}, rows = {}, lanes = [], width = 1;
    // an answer without `parents` (a listing from before the timeline branched): a straight line
    var linear = !list.some(function (c) { return Array.isArray(c.parents); });
    function parentsOf(c, i) { return linear ? (list[i + 1] ? [list[i + 1].id] : []) : (c.parents || []); }
    var parentList = {};
    list.forEach(function (c, i) { byId[c.id] = c; parentList[c.id] = parentsOf(c, i); });
    list.forEach(function (c) {
      parentList[c.id].forEach(function (p) { (children[p] = children[p] || []).push(c.id); });
    });
    var cur = list[0];
    while (cur && !onLine[cur.id]) { onLine[cur.id] = true; cur = byId[parentList[cur.id][0]] || null; }
    list.forEach(function (c) {
      var before = lanes.slice(), mine = [];
      lanes.forEach(function (x, i) { if (x === c.id) mine.push(i); });
      var lane = mine.length ? mine[0] : lanes.indexOf(null);
      if (lane < 0) { lane = lanes.length; lanes.push(null); }
      mine.forEach(function (i) { lanes[i] = null; });
      var parent = parentList[c.id][0];
      var hasParent = !!(parent && byId[parent]);
      if (hasParent) lanes[lane] = parent;
      while (lanes.length && lanes[lanes.length - 1] === null) lanes.pop();
      width = Math.max(width, before.length, lanes.length, lane + 1);
      rows[c.id] = { lane: lane, before: before, joins: mine.slice(1), tip: !mine.length, hasParent: hasParent,
                     onLine: !!onLine[c.id], children: (children[c.id] || []).length };
    });
    return { rows: rows, width: width, byId: byId };
  }

  /** One row's share of the tree: lines through, lines joining at this checkpoint, its dot. */
  function TreeCell(props) {
    var r = props.row, w = props.width * LANE_W + 6, parts = [];
    function x(i) { return i * LANE_W + LANE_W / 2; }
    function color(i) { return i === 0 ? "rgb(90,150,230)" : "rgba(150,150,150,0.8)"; }
    function line(key, i, top, bottom) {
      parts.push(h("div", { key: key, style: { position: "absolute", left: x(i) - 1, width: 2, top: top,
        bottom: bottom === null ? undefined : bottom, height: bottom === null ? DOT_Y : undefined,
        background: color(i), opacity: i === 0 ? 1 : 0.7 } }));
    }
    r.before.forEach(function (id, i) {
      if (id === null || id === undefined) return;
      if (i === r.lane || r.joins.indexOf(i) >= 0) line("in" + i, i, 0, null);   // down to the dot
      else line("through" + i, i, 0, 0);                                        // passes by
    });
    r.joins.forEach(function (i) {                                              // a line that left from here
      var a = Math.min(x(i), x(r.lane)), b = Math.max(x(i), x(r.lane));
      parts.push(h("div", { key: "join" + i, style: { position: "absolute", top: DOT_Y - 1, height: 2, left: a,
        width: b - a, background: color(i), opacity: 0.7 } }));
    });
    if (r.hasParent) line("out", r.lane, DOT_Y, 0);
    parts.push(h("div", { key: "dot", "data-testid": "tree-dot", "data-lane": r.lane, style: {
      position: "absolute", left: x(r.lane) - 5, top: DOT_Y - 5, width: 10, height: 10, borderRadius: 5,
      boxSizing: "border-box", background: r.onLine ? color(0) : "transparent",
      border: "2px solid " + (r.onLine ? color(0) : color(1)) } }));
    return h("div", { "aria-hidden": "true", "data-testid": "tree-cell",
                      style: { position: "absolute", left: 0, top: 0, bottom: 0, width: w } }, parts);
  }

  // a merging operation (agent-only restore, revert, undo, redo) takes changes back over the
  // workspace as it is: a file whose later changes are kept is `merged` (a three-way merge);
  // the others simply go back to what they were before the calls
  var MERGE_HELP = {
    merge: "merged: the change taken back, every later change in the file kept",
    restore: "taken back: as it was before the calls",
    create: "brought back: the change taken back had deleted it", delete: "removed: the change taken back had created it"
  };
  function actionLabel(it, merging) { return merging && it.action === "restore" && it.merged ? "merge" : it.action; }

  function actionCounts(items, merging) {
    var n = {};
    items.forEach(function (i) { var a = actionLabel(i, merging); n[a] = (n[a] || 0) + 1; });
    return Object.keys(n).map(function (a) { return n[a] + " " + a; }).join(" · ");
  }

  var KIND_TONE = { manual: "secondary", safety: "warning", full: "outline", declared: "outline" };
  var PROTECTION_TONE = { on: "success", ready: "secondary", degraded: "warning", off: "destructive" };
  var EVENT_TONE = { started: "outline", returned: "success", uncertain: "warning", resolved: "secondary",
                     recovered: "secondary", replayed: "secondary", maintenance: "outline", genesis: "outline" };

  var S = {   // inline styles: the plugin cannot rely on the host's Tailwind build having our classes
    page: { display: "flex", flexDirection: "column", gap: 16, padding: 16, width: "100%" },
    row: { display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap" },
    cols: { display: "grid", gridTemplateColumns: "minmax(320px, 1fr) minmax(360px, 1.3fr)", gap: 16,
            alignItems: "start" },
    muted: { opacity: 0.65, fontSize: 12 },
    mono: { fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace", fontSize: 12 },
    list: { display: "flex", flexDirection: "column", maxHeight: "max(520px, 70vh)", overflowY: "auto" },
    item: { display: "flex", flexDirection: "column", gap: 2, padding: "6px 8px", cursor: "pointer",
            borderLeft: "3px solid transparent", borderBottom: "1px solid rgba(127,127,127,0.15)",
            textAlign: "left", background: "transparent", color: "inherit", width: "100%" },
    itemSel: { borderLeft: "3px solid currentColor", background: "rgba(127,127,127,0.12)" },
    pre: { fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace", fontSize: 12, whiteSpace: "pre",
           overflow: "auto", maxHeight: 420, margin: 0, padding: 8, background: "rgba(127,127,127,0.08)" },
    error: { border: "1px solid rgba(220,60,60,0.6)", background: "rgba(220,60,60,0.12)", padding: 10,
             display: "flex", gap: 8, alignItems: "flex-start", justifyContent: "space-between" },
    notice: { border: "1px solid rgba(230,170,40,0.6)", background: "rgba(230,170,40,0.12)", padding: 10 },
    ok: { border: "1px solid rgba(60,170,90,0.6)", background: "rgba(60,170,90,0.12)", padding: 10 },
    table: { width: "100%", borderCollapse: "collapse", fontSize: 12 },
    td: { padding: "3px 6px", borderBottom: "1px solid rgba(127,127,127,0.15)", verticalAlign: "top" }
  };

  function DiffText(props) {
    var text = props.patch || "";
    if (!text) return h("div", { style: S.muted, "data-testid": "diff-empty" }, props.empty || "No textual changes.");
    var lines = text.split("\n");
    return h("pre", { style: S.pre, "data-testid": "diff-patch" }, lines.map(function (ln, i) {
      var color = null;
      if (/^(\+\+\+|---|diff --git|index )/.test(ln)) color = "rgba(127,127,127,0.9)";
      else if (ln.charAt(0) === "+") color = "rgb(70,180,100)";
      else if (ln.charAt(0) === "-") color = "rgb(225,90,90)";
      else if (ln.indexOf("@@") === 0) color = "rgb(90,150,230)";
      return h("div", { key: i, style: color ? { color: color } : null }, ln || " ");
    }));
  }

  function FileList(props) {
    var files = props.files || [];
    if (!files.length) return null;
    return h("ul", { "data-testid": "diff-files", style: Object.assign({ margin: "4px 0", paddingLeft: 18 }, S.mono) },
      files.map(function (f) {
        return h("li", { key: (f.path_b64 || f.path) + f.status, "data-path": f.path },
          f.status + "  " + (f.old_path ? f.old_path + " → " : "") + f.path +
          (f.additions || f.deletions ? "  (+" + (f.additions || 0) + " −" + (f.deletions || 0) + ")" : ""));
      }));
  }

  // ------------------------------------------------------------ sections
  function ErrorBanner(props) {
    var err = props.error;
    if (!err) return null;
    var body = err.body || {};
    return h("div", { role: "alert", "data-testid": "chronos-error", "data-code": err.code || "", style: S.error },
      h("div", null,
        h("strong", null, (err.context ? err.context + " failed" : "Request failed") +
          (err.status ? " (HTTP " + err.status + ")" : "") + ": "),
        h("span", { "data-testid": "chronos-error-message" }, err.code === "chronos_blocked"
          ? "the recovery gate is closed — resolve the unresolved operations in the journal panel first."
          : err.message),
        err.code === "chronos_blocked" && body.message
          ? h("div", { style: Object.assign({ marginTop: 6 }, S.muted) }, body.message) : null),
      h(Button, { ghost: true, size: "sm", onClick: props.onDismiss, "data-testid": "chronos-error-dismiss" }, "Dismiss"));
  }

  function CheckpointRow(props) {
    var c = props.cp, t = props.tree || null, layout = props.layout;
    var skipped = (c.skipped || []).length;
    var roles = rolesOf(c);
    var from = c.restored_from && layout ? layout.byId[c.restored_from] : null;
    var dim = t && !t.onLine;
    return h("button", {
      type: "button", "data-testid": "checkpoint-row", "data-checkpoint-id": c.id,
      "data-number": c.number != null ? c.number : "", "data-on-line": t ? (t.onLine ? "true" : "false") : "",
      "data-lane": t ? t.lane : "",
      "aria-pressed": props.selected ? "true" : "false",
      title: dim ? "Not on the line the workspace is on (left behind by a restore): still restorable" : undefined,
      style: Object.assign({}, S.item, props.selected ? S.itemSel : null,
        t ? { position: "relative", paddingLeft: layout.width * LANE_W + 12 } : null,
        dim ? { opacity: props.selected ? 0.8 : 0.5 } : null),
      onClick: function () { props.onSelect(c.id); }
    },
      t ? h(TreeCell, { row: t, width: layout.width }) : null,
      h("div", { style: S.row },
        c.number != null ? h("strong", { style: S.mono, "data-testid": "checkpoint-number" }, numberText(c)) : null,
        h("span", { style: S.mono, "data-testid": "checkpoint-id", title: c.id }, c.short_id || short(c.id)),
        roles.map(function (r) {
          return h(Badge, { key: r, tone: ROLE_TONE[r] || "outline", "data-testid": "checkpoint-role", "data-role": r },
            ROLE_LABEL[r] || r);
        }),
        roles.indexOf(c.kind) < 0   // the capture's kind, unless a role already says it ("manual", "safety")
          ? h(Badge, { tone: KIND_TONE[c.kind] || "outline", "data-testid": "checkpoint-kind" }, c.kind || "?") : null,
        c.tool ? h("span", { style: S.mono, "data-testid": "checkpoint-tool" }, c.tool) : null,
        skipped ? h(Badge, { tone: "warning", "data-testid": "checkpoint-skipped", title: skippedText(c.skipped, "\n") },
          skipped + " skipped") : null),
      h("div", { "data-testid": "checkpoint-description" }, c.description || "(no description)"),
      c.restored_from || (t && t.children > 1) || dim ? h("div", { style: S.row },
        c.restored_from ? h("span", { style: S.mono, "data-testid": "checkpoint-restored-from",
                                      "data-restored-from": c.restored_from },
          "↩ branches from " + (from && from.number != null ? "@" + from.number + " " : "") + short(c.restored_from, 10)) : null,
        t && t.children > 1 ? h(Badge, { tone: "secondary", "data-testid": "branch-marker", "data-branches": t.children },
          "branch point: " + t.children + " lines leave here") : null,
        dim ? h("span", { style: S.muted, "data-testid": "off-line" }, "line left behind · restorable") : null) : null,
      h("div", { style: S.muted },
        h("span", { "data-testid": "checkpoint-time", title: c.time_iso || "" }, fmtTime(c.time)),
        c.tool_call_id ? h("span", { style: S.mono, "data-testid": "checkpoint-call" }, "  · " + c.tool_call_id) : null,
        c.session_id ? h("span", { style: S.mono }, "  · session " + short(c.session_id, 15)) : null));
  }

  /** "abcdef12 “description”" for a RestoreResult's `target` (CheckpointInfo), else the id. */
  function targetText(r) {
    var t = r.target;
    return t ? t.short_id + (t.description ? " “" + t.description + "”" : "") : short(r.restored_checkpoint, 12);
  }

  function keptText(r) {
    return r.kept ? r.kept + " file(s) kept as they are: not captured by the safety checkpoint" : "";
  }

  // the time-machine operations: the route, what a plan of it is called, what its confirm button says
  var OPS = {
    restore: { endpoint: "/restore", title: "Restore plan", confirm: "Confirm restore", done: "Restored. " },
    agent: { endpoint: "/restore", title: "Agent-only restore plan", confirm: "Confirm agent-only restore",
             done: "Agent-only restore done. " },
    revert: { endpoint: "/revert", title: "Revert plan", confirm: "Confirm revert", done: "Reverted. " },
    undo: { endpoint: "/undo", title: "Undo plan", confirm: "Confirm undo", done: "Undone. " },
    redo: { endpoint: "/redo", title: "Redo plan", confirm: "Confirm redo", done: "Redone. " }
  };

  /** A conflict of a merging plan: what the agent's call did, what happened afterwards. */
  function ConflictText(props) {
    var it = props.item;
    return h("div", { "data-testid": "plan-conflict", "data-path": it.path,
                      style: { whiteSpace: "normal", margin: "2px 0 6px 0", paddingLeft: 8,
                               borderLeft: "2px solid rgba(230,170,40,0.8)" } },
      it.agent ? h("div", { "data-testid": "plan-conflict-agent" }, "agent: " + it.agent) : null,
      it.person ? h("div", { "data-testid": "plan-conflict-person" }, "since then: " + it.person) : null,
      it.reason ? h("div", { style: S.muted }, it.reason) : null);
  }

  /** props.plan: {res: RestoreResult of the dry run, request, kind (OPS), undo, selected}. */
  function RestorePlan(props) {
    if (!props.plan) return null;
    var p = props.plan.res, kind = props.plan.kind || "restore", op = OPS[kind];
    var items = p.plan || [];
    var conflicts = items.filter(function (i) { return i.action === "conflict"; });
    var merging = kind !== "restore";
    var title = props.plan.undo ? "Undo plan" : op.title;
    return h("div", { "data-testid": "restore-plan", "data-kind": kind,
                      style: props.armed ? S.notice : { padding: 10, border: "1px dashed rgba(127,127,127,0.4)" } },
      h("div", null, h("strong", null, title + (props.armed
          ? " (dry run) — click " + (kind === "restore" ? "Confirm restore" : op.confirm) + " to apply"
          : " (dry run) — not armed: click again to preview anew")),
        kind === "restore" || kind === "agent"
          ? h("span", { style: S.muted, "data-testid": "restore-plan-target" }, "  → " + targetText(p)) : null),
      h("div", { style: S.muted, "data-testid": "restore-plan-summary" },
        (items.length ? actionCounts(items, merging) : "no changes") + (p.clean || merging ? "" : " (no clean)") +
        (merging && p.calls ? " · takes back " + p.calls.length + " call(s)" : "")),
      conflicts.length ? h("div", { style: S.error, "data-testid": "restore-plan-conflicts", "data-count": conflicts.length },
        h("span", null, h("strong", null, conflicts.length + " conflict(s): "),
          "left exactly as they are — the change taken back and a later one overlap. " +
          "Everything else is merged.")) : null,
      p.kept ? h("div", { style: S.muted, "data-testid": "restore-plan-kept" }, keptText(p)) : null,
      merging && p.note ? h("div", { style: S.muted, "data-testid": "restore-plan-note" }, p.note) : null,
      items.length
        ? h("ul", { style: Object.assign({ margin: "4px 0", paddingLeft: 18 }, S.mono) }, items.map(function (it) {
            return h("li", { key: (it.path_b64 || it.path) + it.action, "data-testid": "restore-plan-item",
                             "data-action": it.action, "data-path": it.path,
                             title: (merging && MERGE_HELP[actionLabel(it, merging)]) || ACTION_HELP[it.action] || "" },
              actionLabel(it, merging) + "  " + it.path + (it.reason && it.action !== "conflict" ? "  (" + it.reason + ")" : ""),
              it.action === "conflict" ? h(ConflictText, { item: it }) : null);
          }))
        : h("div", { style: S.muted }, merging ? "Nothing to take back." : "Nothing to change: the working tree already matches."));
  }

  /** A revert, undo or redo previewed: its plan and the confirm button (two clicks, like a restore). */
  function OperationPlan(props) {
    var plan = props.plan;
    if (!plan || (plan.kind !== "revert" && plan.kind !== "undo" && plan.kind !== "redo")) return null;
    var op = OPS[plan.kind];
    return h("div", { "data-testid": "op-plan", "data-kind": plan.kind, style: { display: "flex", flexDirection: "column", gap: 6 } },
      h(RestorePlan, { plan: plan, armed: props.armed }),
      h("div", { style: S.row },
        h(Button, { destructive: props.armed, outlined: !props.armed, disabled: props.busy, "data-testid": "op-confirm-button",
                    "data-armed": props.armed ? "true" : "false", onClick: props.onConfirm },
          props.armed ? op.confirm : "Preview again"),
        h(Button, { ghost: true, size: "sm", "data-testid": "op-cancel-button", onClick: props.onCancel }, "Cancel"),
        props.armed ? h("span", { style: S.muted }, "Armed: click within " + Math.round(ARM_MS / 1000) +
          " s (a safety checkpoint is taken first).") : null));
  }

  /** props.result: {res: RestoreResult (an incomplete one arrives with HTTP 409), undo}. */
  function RestoreResult(props) {
    if (!props.result) return null;
    var r = props.result.res, kind = props.result.kind || "restore";
    var failed = (r.plan || []).filter(function (i) { return i.action === "failed"; });
    var conflicts = kind !== "restore" ? (r.plan || []).filter(function (i) { return i.action === "conflict"; }) : [];
    if (kind !== "restore") {     // a merging operation: what it took back, where the workspace is now
      return h("div", { "data-testid": "restore-result", "data-kind": kind, style: r.failed || conflicts.length ? S.notice : S.ok },
        h("div", null, h("strong", null, r.failed ? OPS[kind].title.replace(" plan", "") + " incomplete. " : OPS[kind].done),
          (r.calls ? r.calls.length + " call(s) taken back · " : "") + r.files_changed + " file(s) written, " +
          r.untracked_removed + " removed" + (conflicts.length ? ", " + conflicts.length + " conflict(s) left as they are" : "") +
          (r.failed ? ", " + r.failed + " failed" : "") + "."),
        h("div", { style: Object.assign({ marginTop: 6 }, S.row) },
          h("span", null, "Checkpoint after: "),
          h("span", { style: S.mono, "data-testid": "after-checkpoint-id", "data-checkpoint-id": r.after_checkpoint || "" },
            short(r.after_checkpoint, 12)),
          h("span", null, " · safety checkpoint: "),
          h("span", { style: S.mono, "data-testid": "safety-checkpoint-id", "data-checkpoint-id": r.safety_checkpoint || "" },
            short(r.safety_checkpoint, 12)),
          h("span", { style: S.muted }, " · Undo / Redo above the timeline take it back")),
        r.note ? h("div", { style: S.muted }, r.note) : null,
        conflicts.length ? h("ul", { "data-testid": "restore-conflicts", style: Object.assign({ margin: "4px 0", paddingLeft: 18 }, S.mono) },
          conflicts.map(function (it) {
            return h("li", { key: it.path_b64 || it.path }, "conflict  " + it.path, h(ConflictText, { item: it }));
          })) : null,
        r.operation_id ? h("div", { style: S.muted }, "journal operation " + short(r.operation_id, 12)) : null);
    }
    return h("div", { "data-testid": "restore-result", "data-kind": kind, style: r.failed ? S.notice : S.ok },
      h("div", null, h("strong", null, r.failed ? "Restore incomplete. " : props.result.undo ? "Undone. " : "Restored. "),
        "Workspace is now at checkpoint ",
        h("span", { style: S.mono, "data-testid": "restored-checkpoint-id" }, short(r.restored_checkpoint, 12)),
        h("span", { "data-testid": "restored-target" }, r.target && r.target.description ? " “" + r.target.description + "”" : ""),
        " — " + r.files_changed + " file(s) written, " + r.untracked_removed + " removed" +
        (r.skipped ? ", " + r.skipped + " skipped" : "") + (r.failed ? ", " + r.failed + " failed" : "") + "."),
      r.kept ? h("div", { style: S.muted, "data-testid": "restore-kept" }, keptText(r)) : null,
      h("div", { style: Object.assign({ marginTop: 6 }, S.row) },
        h("span", null, "Safety checkpoint of the previous state: "),
        h("span", { style: S.mono, "data-testid": "safety-checkpoint-id", "data-checkpoint-id": r.safety_checkpoint || "",
                    title: r.safety_checkpoint || "" }, short(r.safety_checkpoint, 12)),
        r.safety_checkpoint
          ? h(Button, { outlined: true, size: "sm", disabled: props.busy, "data-testid": "undo-button",
                        onClick: function () { props.onUndo(r.safety_checkpoint); } }, "Undo (restore it)")
          : null),
      failed.length ? h("ul", { "data-testid": "restore-failed", style: Object.assign({ margin: "4px 0", paddingLeft: 18 }, S.mono) },
        failed.map(function (it) {
          return h("li", { key: it.path_b64 || it.path }, "failed  " + it.path + (it.reason ? "  (" + it.reason + ")" : ""));
        })) : null,
      r.operation_id ? h("div", { style: S.muted }, "journal operation " + short(r.operation_id, 12)) : null);
  }

  /** Protection (service.results.Protection) OFF or DEGRADED: a banner with the reason and the fix. */
  function ProtectionBanner(props) {
    var p = props.protection;
    if (!p || (p.state !== "off" && p.state !== "degraded")) return null;
    return h("div", { role: "alert", "data-testid": "protection-banner", "data-state": p.state,
                      style: p.state === "off" ? S.error : S.notice },
      h("div", null,
        h("strong", null, "Protection " + p.state.toUpperCase() + ": "),
        h("span", { "data-testid": "protection-reason" }, p.reason || "no reason given"),
        p.fix ? h("div", { style: { marginTop: 4 } }, "Fix: ", h("span", { style: S.mono, "data-testid": "protection-fix" }, p.fix)) : null));
  }

  function CheckpointDetail(props) {
    var cp = props.checkpoint, mode = props.mode;
    if (!cp) return h("div", { style: S.muted, "data-testid": "checkpoint-detail-empty" }, "Select a checkpoint to see its diff.");
    // props.detail: {mode, res}: a ShowResult ("changes") or a DiffResult ("worktree")
    var d = props.detail && props.detail.mode === mode && props.detail.id === cp.id ? props.detail.res : null;
    var armedRestore = props.armedKind === "restore", armedAgent = props.armedKind === "agent";
    var planHere = props.plan && (props.plan.kind === "restore" || props.plan.kind === "agent") ? props.plan : null;
    var diff = d && (mode === "changes" ? d.changes : d);
    return h("div", { "data-testid": "checkpoint-detail", "data-checkpoint-id": cp.id, style: { display: "flex", flexDirection: "column", gap: 10 } },
      h("div", null,
        h("div", { style: S.row },
          cp.number != null ? h("strong", { style: S.mono, "data-testid": "detail-number" }, numberText(cp)) : null,
          h("strong", { style: S.mono, "data-testid": "detail-id" }, cp.id),
          rolesOf(cp).map(function (r) { return h(Badge, { key: r, tone: ROLE_TONE[r] || "outline", "data-testid": "detail-role" }, ROLE_LABEL[r] || r); }),
          rolesOf(cp).indexOf(cp.kind) < 0     // as in the list: not "manual" twice
            ? h(Badge, { tone: KIND_TONE[cp.kind] || "outline", "data-testid": "detail-kind" }, cp.kind) : null),
        h("div", null, cp.description),
        h("div", { style: S.muted }, fmtTime(cp.time) + (cp.tool ? " · tool " + cp.tool : "") +
          (cp.tool_call_id ? " · call " + cp.tool_call_id : "") + (cp.files != null ? " · " + cp.files + " files" : "")),
        (cp.skipped || []).length
          ? h("div", { style: S.notice, "data-testid": "detail-skipped" }, "Not captured (too large / unreadable): " + skippedText(cp.skipped, ", "))
          : null,
        cp.note ? h("div", { style: S.muted }, cp.note) : null),
      h("div", { style: S.row },
        h(Button, { size: "sm", outlined: mode !== "changes", ghost: false, "data-testid": "diff-mode-changes",
                    onClick: function () { props.onMode("changes"); } }, "Changes in this checkpoint"),
        h(Button, { size: "sm", outlined: mode !== "worktree", "data-testid": "diff-mode-worktree",
                    onClick: function () { props.onMode("worktree"); } }, "Checkpoint → working tree")),
      props.loading ? h("div", { style: S.muted, "data-testid": "diff-loading" }, "Loading diff…") : null,
      !props.loading && d && mode === "changes" && !d.changes
        ? h("div", { style: S.muted, "data-testid": "diff-empty" }, "First checkpoint of this workspace: nothing earlier to compare with.")
        : null,
      diff ? h("div", { "data-testid": "diff-view", "data-mode": mode },
        h("div", { style: S.muted }, (diff.stats ? diff.stats.files + " file(s), +" + diff.stats.additions + " −" + diff.stats.deletions : "") +
          "  " + short(diff.from) + " → " + (diff.to === "working tree" ? "working tree" : short(diff.to))),
        h(FileList, { files: diff.files }),
        h(DiffText, { patch: diff.patch, empty: mode === "worktree" ? "The working tree equals this checkpoint." : null }),
        diff.patch_truncated ? h("div", { style: S.muted }, "(patch truncated)") : null) : null,
      h("div", { style: { display: "flex", flexDirection: "column", gap: 8 } },
        h("div", { style: S.row },
          h(Button, {
            destructive: armedRestore, outlined: !armedRestore, disabled: props.busy, "data-testid": "restore-button",
            "data-armed": armedRestore ? "true" : "false", onClick: props.onRestoreClick
          }, armedRestore ? "Confirm restore" : "Restore this checkpoint…"),
          h(Button, {
            destructive: armedAgent, outlined: !armedAgent, disabled: props.busy, "data-testid": "agent-restore-button",
            "data-armed": armedAgent ? "true" : "false", onClick: props.onAgentClick,
            title: "Take back only what tool calls changed since this checkpoint; your own edits stay"
          }, armedAgent ? "Confirm agent-only restore" : "Agent-only restore…"),
          props.armedKind === "restore" || props.armedKind === "agent" ? h("span", { style: S.muted, "data-testid": "restore-armed" },
            "Armed: click again within " + Math.round(ARM_MS / 1000) + " s to " +
            (armedAgent ? "take the agent's changes back" : "restore") + " (a safety checkpoint is taken first).") : null,
          props.busy ? h("span", { style: S.muted, "data-testid": "restore-busy" }, "Working…") : null),
        h(RestorePlan, { plan: planHere, armed: props.armedKind !== null && planHere !== null })));
  }

  function ResolveForm(props) {
    var op = props.op;
    var st = useState("completed"), outcome = st[0], setOutcome = st[1];
    var ev = useState(""), evidence = ev[0], setEvidence = ev[1];
    var er = useState(null), err = er[0], setErr = er[1];
    var bz = useState(false), busy = bz[0], setBusy = bz[1];
    function submit(e) {
      if (e && e.preventDefault) e.preventDefault();
      if (!evidence.trim()) { setErr("Evidence is required: what shows the outcome?"); return; }
      setBusy(true); setErr(null);
      api("/journal/resolve", { method: "POST", body: { operation_id: op.operation_id, outcome: outcome, evidence: evidence.trim() } })
        .then(function (res) { setEvidence(""); props.onResolved(res); },
              function (e2) { setErr(e2.message); })
        .then(function () { setBusy(false); });
    }
    return h("form", { onSubmit: submit, "data-testid": "resolve-form", style: Object.assign({ marginTop: 6 }, S.row) },
      h(Choice, { testid: "resolve-outcome", value: outcome, onChange: setOutcome, minWidth: 150, options: [
        { value: "completed", label: "completed" }, { value: "not_applied", label: "not_applied" }] }),
      h(Input, { "data-testid": "resolve-evidence", value: evidence, placeholder: "evidence (required)",
                 onChange: function (e) { setEvidence(e.target.value); }, style: { minWidth: 220, flex: 1 } }),
      h(Button, { type: "submit", size: "sm", disabled: busy || !evidence.trim(), "data-testid": "resolve-submit" }, "Resolve"),
      err ? h("div", { style: Object.assign({ width: "100%", color: "rgb(225,90,90)" }, S.mono), "data-testid": "resolve-error" }, err) : null);
  }

  function JournalPanel(props) {
    var st = props.status, events = props.events || [];
    var unresolved = (st && st.unresolved) || [], settled = (st && st.settled_at_start) || [];
    return h(Card, { "data-testid": "journal-panel" },
      h(CardHeader, null, h(CardTitle, null, "Tool-call journal")),
      h(CardContent, null,
        !st ? h("div", { style: S.muted }, "Loading…") : h("div", { style: { display: "flex", flexDirection: "column", gap: 10 } },
          h("div", { style: S.row },
            h("span", null, "Integrity"),
            h(Badge, { tone: st.integrity === "ok" ? "success" : "destructive", "data-testid": "journal-integrity" }, st.integrity),
            h("span", null, "Gate"),
            h(Badge, { tone: st.gate === "open" ? "success" : "destructive", "data-testid": "journal-gate" }, st.gate),
            h("span", { style: S.muted, "data-testid": "journal-events-count" }, st.events + " events · head " + short(st.head, 10)),
            h(Button, { size: "sm", outlined: true, disabled: props.verifying, onClick: props.onVerify, "data-testid": "verify-button" },
              props.verifying ? "Verifying…" : "Verify chain"),
            h(Button, { size: "sm", outlined: true, onClick: openReport, "data-testid": "report-button" },
              "Forensic report")),
          props.verify ? h("div", { "data-testid": "verify-result", "data-integrity": props.verify.integrity,
                                    style: props.verify.integrity === "ok" ? S.ok : S.error },
            props.verify.integrity === "ok"
              ? "Verified " + props.verify.events + " events: chain intact" + (props.verify.seconds != null ? " (" + props.verify.seconds + " s)" : "") + "."
              : "Verification failed: " + props.verify.integrity + ((props.verify.problems || []).length ? " — " + props.verify.problems.join("; ") : ""))
            : null,
          (st.remotes || []).map(function (r) {
            return h("div", { key: r.name, style: S.row, "data-testid": "remote-state", "data-remote": r.name },
              h("span", null, "Remote " + r.name),
              h(Badge, { tone: r.diverged ? "destructive" : r.last_error ? "warning" : r.last_push ? "success" : "secondary" },
                r.diverged ? "diverged" : r.last_error && r.failing_since ? "failing" : r.last_error ? "incomplete" : r.last_push ? "pushed" : "not pushed yet"),
              h("span", { style: S.muted }, r.diverged || r.last_error ||
                (r.last_push ? (r.behind || 0) + " event(s) behind, last push " + new Date(r.last_push * 1000).toLocaleString() : "")));
          }),
          st.gate !== "open" ? h("div", { style: S.notice, "data-testid": "gate-closed-notice" },
            "The recovery gate is closed: protected tool calls and restores are refused until every unresolved operation is reconciled.") : null,
          h("div", { "data-testid": "journal-unresolved", "data-count": unresolved.length },
            h("strong", null, "Unresolved operations (" + unresolved.length + ")"),
            unresolved.length === 0 ? h("div", { style: S.muted }, "None.") : unresolved.map(function (op) {
              return h("div", { key: op.operation_id, "data-testid": "unresolved-op", "data-operation-id": op.operation_id,
                                style: { padding: 8, marginTop: 6, border: "1px solid rgba(127,127,127,0.3)" } },
                h("div", { style: S.row },
                  h("span", { style: S.mono }, short(op.operation_id, 12)),
                  h(Badge, { tone: "warning" }, op.state),
                  h("span", { style: S.mono }, op.tool),
                  op.tool_call_id ? h("span", { style: S.mono }, op.tool_call_id) : null),
                h("div", { style: S.muted }, (op.workspace || "") + (op.pre_checkpoint ? " · pre-checkpoint " + short(op.pre_checkpoint, 10) : "") +
                  (op.reason ? " · " + op.reason : "")),
                h(ResolveForm, { op: op, onResolved: props.onResolved }));
            })),
          (st.running || []).length ? h("div", { style: S.muted }, (st.running || []).length + " operation(s) currently running") : null,
          settled.length ? h("div", { "data-testid": "journal-settled", "data-count": settled.length },
            h("strong", null, "Settled by evidence at start (" + settled.length + ")"),
            settled.map(function (x) {
              return h("div", { key: x.operation_id, "data-testid": "settled-op", "data-result": x.result, style: S.mono },
                short(x.operation_id, 12) + "  " + (x.tool || "?") + "  → " + x.result + (x.why ? "  (" + x.why + ")" : ""));
            })) : null,
          h("div", null,
            h("strong", null, "Recent events"),
            h("table", { style: S.table, "data-testid": "journal-events", "data-tool-declared": props.eventTool ? "true" : "false",
                         "data-schema": props.schema || "none" },
              h("tbody", null, events.map(function (e) {   // only the fields Event declares
                // its tool: only where the schema declares Event.tool (OPTIONAL, from openapi.json)
                var tool = props.eventTool && e.kind === "started" ? e.tool : null;
                return h("tr", { key: e.id || e.seq, "data-testid": "journal-event", "data-kind": e.kind, "data-seq": e.seq },
                  h("td", { style: Object.assign({}, S.td, S.mono) }, "#" + e.seq),
                  h("td", { style: S.td }, h(Badge, { tone: EVENT_TONE[e.kind] || "outline" }, e.kind)),
                  h("td", { style: Object.assign({}, S.td, S.mono), "data-testid": "journal-event-tool" }, tool || ""),
                  h("td", { style: Object.assign({}, S.td, S.mono) }, e.operation_id ? short(e.operation_id, 10) : ""),
                  h("td", { style: Object.assign({}, S.td, S.muted) }, e.timestamp_ns ? ago(e.timestamp_ns / 1e9) : ""),
                  h("td", { style: S.td }, e.kind === "started" && e.operation_id && !(tool && tool.indexOf("chronos.") === 0)
                    ? h(Button, { size: "sm", ghost: true, disabled: props.busy, "data-testid": "revert-button",
                                  "data-operation-id": e.operation_id, title: "Take back this one call (previewed first)",
                                  onClick: function () { props.onRevert(e.operation_id); } }, "Revert…") : null));
              })))))));
  }

  // ----------------------------------------------------------------- page
  function Page() {
    var s1 = useState([]), workspaces = s1[0], setWorkspaces = s1[1];
    var sH = useState(null), health = sH[0], setHealth = sH[1];
    var s2 = useState(null), ws = s2[0], setWs = s2[1];
    var s3 = useState(null), checkpoints = s3[0], setCheckpoints = s3[1];
    var s4 = useState(null), selected = s4[0], setSelected = s4[1];
    var s5 = useState("changes"), mode = s5[0], setMode = s5[1];
    var s6 = useState(null), detail = s6[0], setDetail = s6[1];
    var s7 = useState(false), detailLoading = s7[0], setDetailLoading = s7[1];
    var s8 = useState(null), plan = s8[0], setPlan = s8[1];
    var s9 = useState(false), armed = s9[0], setArmed = s9[1];
    var s10 = useState(false), busy = s10[0], setBusy = s10[1];
    var s11 = useState(null), result = s11[0], setResult = s11[1];
    var s12 = useState(null), jstatus = s12[0], setJstatus = s12[1];
    var s13 = useState([]), events = s13[0], setEvents = s13[1];
    var s14 = useState(null), verify = s14[0], setVerify = s14[1];
    var s15 = useState(false), verifying = s15[0], setVerifying = s15[1];
    var s16 = useState(null), error = s16[0], setError = s16[1];
    var s17 = useState(null), updated = s17[0], setUpdated = s17[1];
    var s18 = useState(null), offProtection = s18[0], setOffProtection = s18[1];
    var s19 = useState(OPTIONAL), optional = s19[0], setOptional = s19[1];

    var wsRef = useRef(null); wsRef.current = ws;
    var listRef = useRef([]); listRef.current = workspaces;
    var armTimer = useRef(null);
    var inflight = useRef(null);     // the refresh in progress (a promise) ...
    var again = useRef(false);       // ... and whether another was asked for meanwhile
    var refreshRef = useRef(null);
    var detailSeq = useRef(0);
    var scrubbing = useRef(false);   // the selection moved by scrubbing: its diff is asked for debounced
    var reveal = useRef(false);      // ... and its row scrolled into view

    var fail = useCallback(function (context) {
      return function (e) { setError(Object.assign(toApiError(e), { context: context })); };
    }, []);

    var loadJournal = useCallback(function () {
      return Promise.all([
        api("/journal/status").then(setJstatus),
        api("/journal/log" + qs({ limit: EVENT_LIMIT })).then(function (r) { setEvents(r.events || []); })
      ]);
    }, []);

    var loadCheckpoints = useCallback(function (root) {
      if (!root) { setCheckpoints([]); return Promise.resolve(); }
      // every checkpoint, the lines left behind by restores too: the tree is drawn from `parents`
      return api("/checkpoints" + qs(Object.assign(wsArgs(listRef.current, root), { limit: CHECKPOINT_LIMIT, all: true }))).then(function (r) {
        if (wsRef.current === root) setCheckpoints(r.checkpoints || []);
      });
    }, []);

    var refresh = useCallback(function () {
      if (inflight.current) { again.current = true; return inflight.current; }
      var run = api("/workspaces").then(function (r) {
        var list = r.workspaces || [];
        listRef.current = list;
        setWorkspaces(list);
        var root = wsRef.current;
        if (!root && list.length) { root = list[0].root; wsRef.current = root; setWs(root); }
        return Promise.all([loadCheckpoints(root), loadJournal(),
                            api("/health").then(setHealth, function () { setHealth(null); })]);
      }).then(function () {
        setUpdated(Date.now());
        setOffProtection(null);
        // a failed poll's banner goes away by itself once polling works again
        setError(function (cur) { return cur && cur.context === "Refresh" ? null : cur; });
      }, function (e) {
        fail("Refresh")(e);
        // never silently off: when the API did not load, its /health still says why (503)
        return api("/health").then(function (hr) { setOffProtection(hr.protection); }, function (e2) {
          var b = toApiError(e2).body;
          setOffProtection(b && b.protection ? b.protection : null);
        });
      })
        .then(function () {
          inflight.current = null;
          if (again.current) { again.current = false; return refreshRef.current(); }
        });
      inflight.current = run;
      return run;
    }, [loadCheckpoints, loadJournal, fail]);
    refreshRef.current = refresh;

    // initial load + polling (skipped while the tab is hidden)
    useEffect(function () {
      probeSchema().then(function (o) { setOptional(Object.assign({}, o)); });
      refresh();
      var t = setInterval(function () { if (!document.hidden) refresh(); }, POLL_MS);
      return function () { clearInterval(t); if (armTimer.current) clearTimeout(armTimer.current); };
    }, [refresh]);

    // workspace switch
    useEffect(function () {
      setSelected(null); setDetail(null); setPlan(null); setArmed(false); setCheckpoints(null);
      if (ws) loadCheckpoints(ws).catch(fail("Loading checkpoints"));
    }, [ws, loadCheckpoints, fail]);

    // selected checkpoint / diff mode -> diff (debounced while scrubbing: one request once it rests)
    useEffect(function () {
      if (!selected || !ws) { setDetail(null); return; }
      var seq = ++detailSeq.current;
      var delay = scrubbing.current ? SCRUB_MS : 0;
      scrubbing.current = false;
      setDetailLoading(true);
      var timer = setTimeout(function () {
        if (seq !== detailSeq.current) return;
        var req = mode === "changes"
          ? api("/checkpoints/" + encodeURIComponent(selected) + qs(wsArgs(listRef.current, ws)))
          : api("/diff" + qs(Object.assign(wsArgs(listRef.current, ws), { from: selected })));
        req.then(function (r) { if (seq === detailSeq.current) setDetail({ mode: mode, id: selected, res: r }); },
                 function (e) { if (seq === detailSeq.current) { setDetail(null); fail("Loading the diff")(e); } })
          .then(function () { if (seq === detailSeq.current) setDetailLoading(false); });
      }, delay);
      return function () { clearTimeout(timer); };
    }, [selected, mode, ws, fail]);

    function disarm() {
      if (armTimer.current) { clearTimeout(armTimer.current); armTimer.current = null; }
      setArmed(false);
    }

    function select(id) {
      if (id !== selected) { disarm(); setPlan(null); }
      setSelected(id);
    }

    /** Second click: the dry run's request again, with its plan_token (and a restore's full id). */
    function doRestore(p) {
      var kind = p.kind || "restore", endpoint = OPS[kind].endpoint;
      var extra = { dry_run: false, plan_token: p.res.plan_token };
      if (endpoint === "/restore") extra.checkpoint = p.res.restored_checkpoint;
      setBusy(true);
      return api(endpoint, { method: "POST", body: Object.assign({}, p.request, extra) })
        .then(function (r) {
          setResult({ res: r, undo: p.undo, kind: kind });
          setPlan(null);
          setError(null);
          // the working tree changed: the resultKey effect below re-fetches the diff
          return refresh();
        }, function (e) {
          var err = toApiError(e);
          // an incomplete restore (HTTP 409) is still a RestoreResult: show what failed, offer undo
          if (err.body && err.body.safety_checkpoint && err.body.plan) { setResult({ res: err.body, undo: p.undo, kind: kind }); setPlan(null); }
          // the workspace changed since the preview (HTTP 409, nothing restored): the new plan, armed
          if (err.body && err.body.code === "plan_changed" && err.body.plan_token) arm(Object.assign({}, p, { res: err.body }));
          fail(p.undo ? "Undo" : kind === "restore" ? "Restore" : OPS[kind].title.replace(" plan", ""))(err);
          return refresh();
        })
        .then(function () { setBusy(false); });
    }

    /** First click: the dry run, which arms the confirm button for ARM_MS. */
    function preview(checkpointId, isUndo) {
      var request = Object.assign({ checkpoint: checkpointId }, wsArgs(listRef.current, ws));
      setBusy(true);
      return api("/restore", { method: "POST", body: Object.assign({ dry_run: true }, request) })
        .then(function (p) {
          arm({ res: p, request: request, undo: !!isUndo, selected: checkpointId, kind: "restore" });
        }, fail(isUndo ? "Undo preview" : "Restore preview"))
        .then(function () { setBusy(false); });
    }

    /** First click of an agent-only restore, a revert, an undo or a redo: the dry run, armed. */
    function previewOp(kind, fields, checkpointId) {
      var request = Object.assign({}, fields, wsArgs(listRef.current, ws));
      setBusy(true);
      return api(OPS[kind].endpoint, { method: "POST", body: Object.assign({ dry_run: true }, request) })
        .then(function (p) {
          arm({ res: p, request: request, undo: false, selected: checkpointId || null, kind: kind });
        }, fail(OPS[kind].title.replace(" plan", "") + " preview"))
        .then(function () { setBusy(false); });
    }

    function onAgentClick() {
      if (!selected || busy) return;
      if (armed && plan && plan.kind === "agent" && plan.selected === selected) { disarm(); doRestore(plan); return; }
      disarm();
      previewOp("agent", { checkpoint: selected, agent_only: true }, selected);
    }

    /** Undo / redo (the toolbar) and revert (a journal row): previewed, then confirmed in the plan panel. */
    function onOp(kind, fields) {
      if (busy) return;
      disarm();
      setPlan(null);
      previewOp(kind, fields || {});
    }

    function onOpConfirm() {
      if (!plan || busy) return;
      if (armed) { disarm(); doRestore(plan); return; }
      previewOp(plan.kind, Object.assign({}, plan.request));   // expired: preview anew
    }

    /** Show a plan and arm the confirm button for ARM_MS. */
    function arm(plan) {
      setPlan(plan);
      setArmed(true);
      if (armTimer.current) clearTimeout(armTimer.current);
      armTimer.current = setTimeout(function () { armTimer.current = null; setArmed(false); }, ARM_MS);
    }

    function onRestoreClick() {
      if (!selected || busy) return;
      if (armed && plan && plan.kind === "restore" && plan.selected === selected) {   // second click: apply
        disarm();
        doRestore(plan);
        return;
      }
      disarm();
      preview(selected, false);
    }

    /** Scrub: move the selection through the timeline; each checkpoint is previewed as it passes. */
    function scrubTo(id) {
      if (!id || id === selected) return;
      scrubbing.current = true;
      reveal.current = true;
      select(id);
    }

    useEffect(function () {
      if (!reveal.current || !selected) return;
      reveal.current = false;
      var el = document.querySelector('[data-testid="checkpoint-row"][data-checkpoint-id="' + selected + '"]');
      if (el && el.scrollIntoView) el.scrollIntoView({ block: "nearest" });
    }, [selected]);

    function onListKey(e) {
      var list = checkpoints || [];
      if (!list.length || (e.key !== "ArrowUp" && e.key !== "ArrowDown")) return;
      e.preventDefault();
      var i = list.map(function (c) { return c.id; }).indexOf(selected);
      var j = i < 0 ? 0 : e.key === "ArrowUp" ? Math.max(0, i - 1) : Math.min(list.length - 1, i + 1);
      scrubTo(list[j].id);
      var el = document.querySelector('[data-testid="checkpoint-row"][data-checkpoint-id="' + list[j].id + '"]');
      if (el && el.focus) el.focus();
    }

    /** Undo = restore the safety checkpoint, previewed and confirmed like any restore. */
    function onUndo(id) {
      disarm();
      setPlan(null);
      setSelected(id);
      preview(id, true);
    }

    function onVerify() {
      setVerifying(true);
      api("/journal/verify", { method: "POST", body: {} })
        .then(function (r) { setVerify(r); },
              function (e) { var err = toApiError(e); if (err.body && err.body.integrity) setVerify(err.body); else fail("Verify")(err); })
        .then(function () { setVerifying(false); });
    }

    function onResolved() { refresh(); }

    var cp = (checkpoints || []).filter(function (c) { return c.id === selected; })[0] || null;
    if (!cp && selected && detail && detail.mode === "changes" && detail.res.checkpoint.id === selected) cp = detail.res.checkpoint;

    // refetch the diff after a restore (working tree changed)
    var resultKey = result ? result.res.safety_checkpoint : null;
    useEffect(function () {
      if (!resultKey || !selected || !ws) return;
      var seq = ++detailSeq.current;
      var req = mode === "changes"
        ? api("/checkpoints/" + encodeURIComponent(selected) + qs(wsArgs(listRef.current, ws)))
        : api("/diff" + qs(Object.assign(wsArgs(listRef.current, ws), { from: selected })));
      req.then(function (r) { if (seq === detailSeq.current) setDetail({ mode: mode, id: selected, res: r }); }, function () {});
    }, [resultKey]);  // eslint-disable-line

    var layout = checkpoints && checkpoints.length ? timelineLayout(checkpoints) : null;
    var oldestFirst = (checkpoints || []).slice().reverse();
    var scrubIndex = oldestFirst.map(function (c) { return c.id; }).indexOf(selected);
    var previewRes = detail && detail.id === selected && detail.mode === mode ? detail.res : null;
    var previewDiff = previewRes && (mode === "changes" ? previewRes.changes : previewRes);
    var armedKind = armed && plan ? plan.kind || "restore" : null;
    var protection = offProtection || (jstatus && jstatus.protection) || null;
    var wsOptions = workspaces.map(function (w) {
      return { value: w.root, label: w.root + "  (" + w.checkpoints + ")" + (w.exists === false ? " — missing" : "") };
    });

    return h("div", { "data-testid": "chronos-root", style: S.page },
      h("div", { style: Object.assign({ justifyContent: "space-between" }, S.row) },
        h("div", { style: S.row },
          h("strong", { style: { fontSize: 16 } }, "Chronos"),
          h("span", { style: S.muted }, "checkpoints · diffs · rollback · journal")),
        h("div", { style: S.row },
          protection ? h(Badge, { tone: PROTECTION_TONE[protection.state] || "outline", "data-testid": "header-protection",
                                  "data-state": protection.state, title: protection.reason || "" },
            "protection " + (protection.state === "on" || protection.state === "ready" ? protection.state : protection.state.toUpperCase())) : null,
          jstatus ? h(Badge, { tone: jstatus.gate === "open" ? "success" : "destructive", "data-testid": "header-gate" },
            "gate " + jstatus.gate) : null,
          health && health.store_exists ? h("span", { style: S.muted, "data-testid": "header-store",
                                                      title: storeTitle(health) }, storeText(health)) : null,
          h("span", { style: S.muted, "data-testid": "last-updated" }, updated ? "updated " + new Date(updated).toLocaleTimeString() : "loading…"),
          h(Button, { size: "sm", outlined: true, onClick: function () { refresh(); }, "data-testid": "refresh-button" }, "Refresh"))),
      h(ProtectionBanner, { protection: protection }),
      h(ErrorBanner, { error: error, onDismiss: function () { setError(null); } }),
      h(RestoreResult, { result: result, busy: busy, onUndo: onUndo }),
      h(OperationPlan, { plan: plan, armed: armed && plan && (plan.kind === "revert" || plan.kind === "undo" || plan.kind === "redo"),
                         busy: busy, onConfirm: onOpConfirm, onCancel: function () { disarm(); setPlan(null); } }),
      h("div", { style: S.row },
        h(Label, null, "Workspace"),
        workspaces.length
          ? h(Choice, { testid: "workspace-select", value: ws, options: wsOptions, minWidth: 360,
                        onChange: function (v) { setResult(null); wsRef.current = v; setWs(v); } })
          : h("span", { style: S.muted, "data-testid": "no-workspaces" }, "No workspace has checkpoints yet."),
        ws ? h("span", { style: S.mono, "data-testid": "workspace-root" }, ws) : null),
      h("div", { style: S.cols },
        h(Card, { "data-testid": "timeline" },
          h(CardHeader, null,
            h("div", { style: Object.assign({ justifyContent: "space-between" }, S.row) },
              h(CardTitle, null, "Checkpoints" + (checkpoints ? " (" + checkpoints.length + ")" : "")),
              h("div", { style: S.row },
                h(Button, { size: "sm", outlined: true, disabled: busy || !ws, "data-testid": "tm-undo-button",
                            title: "Take back the newest restore, revert or agent-only restore (previewed first)",
                            onClick: function () { onOp("undo"); } }, "↶ Undo"),
                h(Button, { size: "sm", outlined: true, disabled: busy || !ws, "data-testid": "tm-redo-button",
                            title: "Take back the newest undo (previewed first)",
                            onClick: function () { onOp("redo"); } }, "↷ Redo")))),
          h(CardContent, { style: { padding: 0 } },
            checkpoints && checkpoints.length > 1 ? h("div", { "data-testid": "timeline-scrub", style: { padding: "8px 10px",
                borderBottom: "1px solid rgba(127,127,127,0.2)", display: "flex", flexDirection: "column", gap: 4 } },
              h("div", { style: S.row },
                h("span", { style: S.muted }, "oldest"),
                h("input", { type: "range", min: 0, max: oldestFirst.length - 1, step: 1, "data-testid": "timeline-scrubber",
                             "aria-label": "Scrub through the checkpoints (arrow keys step one)",
                             value: scrubIndex < 0 ? oldestFirst.length - 1 : scrubIndex, style: { flex: 1, minWidth: 160 },
                             onChange: function (e) { var c = oldestFirst[Number(e.target.value)]; if (c) scrubTo(c.id); } }),
                h("span", { style: S.muted }, "newest")),
              cp ? h("div", { style: Object.assign({}, S.mono, { whiteSpace: "normal" }), "data-testid": "scrub-preview",
                              "data-checkpoint-id": cp.id, "data-loaded": previewDiff || (previewRes && mode === "changes") ? "true" : "false" },
                h("strong", null, numberText(cp) + " "), rolesOf(cp).map(function (r) { return ROLE_LABEL[r] || r; }).join(" + ") +
                  " · " + (cp.description || "") + " · " +
                  (previewDiff && previewDiff.stats ? previewDiff.stats.files + " file(s) +" + previewDiff.stats.additions + " −" +
                    previewDiff.stats.deletions + (previewDiff.files && previewDiff.files.length ? ": " +
                    previewDiff.files.map(function (f) { return f.path; }).join(", ") : "")
                    : previewRes && mode === "changes" && !previewRes.changes ? "first checkpoint" : "…"))
                : h("div", { style: S.muted }, "Drag the slider, or select a checkpoint and use ↑ ↓, to preview each one.")) : null,
            checkpoints === null ? h("div", { style: Object.assign({ padding: 12 }, S.muted) }, "Loading…")
              : checkpoints.length === 0 ? h("div", { style: Object.assign({ padding: 12 }, S.muted), "data-testid": "no-checkpoints" }, "No checkpoints.")
              : h("div", { style: S.list, "data-testid": "checkpoint-list", onKeyDown: onListKey }, checkpoints.map(function (c) {
                  return h(CheckpointRow, { key: c.id, cp: c, selected: c.id === selected, onSelect: select,
                                            tree: layout ? layout.rows[c.id] : null, layout: layout });
                })))),
        h(Card, { "data-testid": "detail" },
          h(CardHeader, null, h(CardTitle, null, "Diff & restore")),
          h(CardContent, null, h(CheckpointDetail, {
            checkpoint: cp, detail: detail, mode: mode, loading: detailLoading,
            onMode: setMode, plan: plan, armedKind: armedKind, busy: busy, onRestoreClick: onRestoreClick,
            onAgentClick: onAgentClick })))),
      h(JournalPanel, { status: jstatus, events: events, verify: verify, verifying: verifying,
                        onVerify: onVerify, onResolved: onResolved, eventTool: optional.eventTool, schema: optional.schema, busy: busy,
                        onRevert: function (opId) { onOp("revert", { operation: opId }); } }));
  }

  function mib(n) { return (n / 1048576).toFixed(n < 10485760 ? 1 : 0) + " MiB"; }

  // store size and the profile-wide budget (store_budget_mb), as `health` reports them
  function storeText(hr) {
    var b = hr.store_budget, out = "store " + mib(hr.store_bytes || 0);
    if (b && b.budget_bytes) out += " · budget " + Math.round(100 * b.used_bytes / b.budget_bytes) + "%";
    if (b && b.orphans) out += " · " + b.orphans + " folder(s) gone";
    if (hr.consolidation && hr.consolidation.pending_packs) out += " · compressing first import";
    return out;
  }
  function storeTitle(hr) {
    var b = hr.store_budget;
    return b ? mib(b.used_bytes) + " new bytes kept across workspaces" +
      (b.budget_bytes ? " of store_budget_mb " + mib(b.budget_bytes) : " (no store budget)") : "";
  }

  PLUGINS.register(NAME, Page);
})();
