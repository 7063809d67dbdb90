"""Inline CSS and JavaScript of the report (no external scripts, fonts or styles).

The JavaScript is plain ES2017 with no dependencies. It sorts the tables, filters the results table by
task and renders the example browser page by page from the JSON blob in ``#report-data``, building
every node with ``textContent`` (never ``innerHTML``), so data can never become markup. ``ERROR_JS``
runs first and records any JavaScript error, unhandled rejection, ``console.error`` or CSP violation
as an item of ``#js-errors`` (visible at the top of the page), which is how the browser test proves a
clean load; ``body[data-ready="1"]`` is set once the first page of examples has been rendered.
"""

from __future__ import annotations

__all__ = ["CSS", "ERROR_JS", "MAIN_JS", "CSP"]

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

CSS = """
:root { --fg:#1d2330; --muted:#5b6577; --line:#d9dee7; --bg:#ffffff; --soft:#f4f6fa; --ok:#1a7f45;
  --bad:#c0392b; --accent:#2f5da8; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; color:var(--fg); background:var(--bg); }
header.top { padding:16px 24px 8px; border-bottom:1px solid var(--line); background:var(--soft); }
header.top h1 { margin:0 0 4px; font-size:22px; }
.meta { color:var(--muted); font-size:13px; margin:2px 0; }
nav { position:sticky; top:0; z-index:5; background:#fff; border-bottom:1px solid var(--line); padding:6px 24px;
  height:34px; white-space:nowrap; overflow-x:auto; overflow-y:hidden; }
html { scroll-padding-top:46px; }  /* an in-page link lands below the sticky nav (34 px) */
nav a { margin-right:16px; color:var(--accent); text-decoration:none; font-weight:600; }
main { padding:0 24px 48px; max-width:1500px; }
section { margin-top:28px; }
h2 { font-size:19px; border-bottom:2px solid var(--line); padding-bottom:4px; }
h3 { font-size:15px; margin:18px 0 6px; }
.note { color:var(--muted); font-size:13px; max-width:1100px; }
#js-errors { background:#fde8e8; color:#8a1f11; border:1px solid #e0a0a0; padding:8px 8px 8px 28px; margin:8px 24px; }
table { border-collapse:collapse; font-size:12.5px; font-variant-numeric: tabular-nums; }
th, td { border-bottom:1px solid var(--line); padding:3px 8px; text-align:right; white-space:nowrap; }
th { background:var(--soft); position:sticky; top:0; cursor:pointer; user-select:none; z-index:1; }
th.l, td.l { text-align:left; }
th[aria-sort=ascending]::after { content:" \\25B2"; font-size:9px; }
th[aria-sort=descending]::after { content:" \\25BC"; font-size:9px; }
td .sd { color:var(--muted); font-size:11px; }
td.best { font-weight:700; color:var(--accent); }
tr.avg td { background:#fbfbf2; }
tr.not-ranked td { color:var(--muted); font-style:italic; }
td.why { white-space:normal; min-width:120px; max-width:240px; text-align:left; font-size:12px; }
details.not-ranked, details.more { margin:6px 0 14px; border:1px solid var(--line); border-radius:4px;
  padding:4px 10px; }
details.not-ranked > summary { color:var(--muted); cursor:pointer; }
details.more > summary { color:var(--accent); cursor:pointer; font-size:13px; }
#verdict .headline { font-size:17px; font-weight:600; margin:6px 0; }
#verdict ul { margin:4px 0 10px; padding-left:22px; }
.tablewrap { max-height:640px; overflow:auto; border:1px solid var(--line); margin:8px 0; }
td.rule { white-space:normal; min-width:260px; max-width:520px; text-align:left; font-size:12px; color:var(--muted); }
figure { margin:8px 0 20px; }
svg.figure { display:block; max-width:100%; height:auto; }
figcaption { color:var(--muted); font-size:12.5px; max-width:1100px; }
.controls { display:flex; flex-wrap:wrap; gap:10px 18px; align-items:center; margin:8px 0; padding:8px;
  background:var(--soft); border:1px solid var(--line); }
.controls label { font-size:13px; }
.controls input[type=search] { width:240px; }
.legend { display:flex; align-items:center; gap:8px; font-size:12px; color:var(--muted); }
.grad { display:inline-block; width:140px; height:12px; border:1px solid var(--line);
  background:linear-gradient(to right, #ffffff, #d73027); }
.pager { display:flex; gap:10px; align-items:center; margin:8px 0; }
article.ex { border:1px solid var(--line); border-left:5px solid var(--bad); padding:8px 12px; margin:10px 0;
  border-radius:4px; }
article.ex.ok { border-left-color:var(--ok); }
article.ex > header { display:flex; flex-wrap:wrap; gap:6px 14px; align-items:baseline; }
.badge { font-weight:700; }
.ok .badge { color:var(--ok); } .bad .badge { color:var(--bad); }
.exid { font-family:ui-monospace, Menlo, Consolas, monospace; font-size:12px; }
.tag { background:var(--soft); border:1px solid var(--line); border-radius:3px; padding:0 5px; font-size:12px; }
.confs { font-size:12px; color:var(--muted); }
.confs b { color:var(--fg); font-weight:600; }
dl.qa { display:grid; grid-template-columns:80px 1fr; gap:2px 10px; margin:6px 0; }
dl.qa dt { color:var(--muted); font-size:12px; padding-top:2px; }
dl.qa dd { margin:0; white-space:pre-wrap; word-break:break-word; }
.tokens { font-family:ui-monospace, Menlo, Consolas, monospace; font-size:13px; line-height:1.9;
  white-space:pre-wrap; word-break:break-all; margin:4px 0; }
.tok { padding:1px 0; border-radius:2px; min-width:4px; display:inline-block; }
.tok.pk { box-shadow: inset 0 -3px 0 #1f3f8a, inset 0 3px 0 #1f3f8a; }
.pknote { font-size:12px; color:var(--muted); }
.pkbox { display:inline-block; width:22px; height:12px; box-shadow: inset 0 -3px 0 #1f3f8a, inset 0 3px 0 #1f3f8a; }
.empty { color:var(--muted); font-style:italic; }
mark.risk { background:#ffc04d; color:inherit; border-bottom:2px solid #d46a00; border-radius:2px; padding:0 1px;
  cursor:help; }
mark.risk.r2 { background:#ffdb94; border-bottom-color:#e89a3c; }
mark.risk.r3 { background:#ffefcc; border-bottom-color:#f2c07f; }
.spantext { font-size:12px; color:var(--muted); margin-top:2px; }
"""

ERROR_JS = """
(function () {
  "use strict";
  var pending = [];
  function record(msg) {
    var ul = document.getElementById("js-errors");
    if (!ul) { pending.push(msg); return; }
    ul.hidden = false;
    var li = document.createElement("li");
    li.textContent = String(msg);
    ul.appendChild(li);
  }
  window.__reportError = record;
  window.addEventListener("error", function (e) {
    var where = e.filename ? " (line " + e.lineno + ")" : "";
    record("error: " + (e.message || (e.target && e.target.tagName) || e.type) + where);
  }, true);
  window.addEventListener("unhandledrejection", function (e) { record("unhandled rejection: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    record("CSP violation: " + e.violatedDirective + " " + e.blockedURI);
  });
  var origError = console.error;
  console.error = function () {
    record("console.error: " + Array.prototype.join.call(arguments, " "));
    return origError.apply(console, arguments);
  };
  document.addEventListener("DOMContentLoaded", function () { pending.splice(0).forEach(record); });
})();
"""

MAIN_JS = """
(function () {
  "use strict";
  function byId(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  /* ---------------------------------------------------------------- sortable tables */
  function sortKey(td, num) {
    var v = td.getAttribute("data-v");
    if (v === null) v = td.textContent;
    if (num) { return v === "" ? null : parseFloat(v); }
    return v.toLowerCase();
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var ths = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(ths, function (th, col) {
      th.title = th.title || "click to sort";
      th.addEventListener("click", function () {
        var num = th.getAttribute("data-type") === "num";
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(ths, function (o) { o.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = sortKey(a.cells[col], num), y = sortKey(b.cells[col], num);
          if (x === null || x !== x) { return (y === null || y !== y) ? 0 : 1; }
          if (y === null || y !== y) { return -1; }
          var c = x < y ? -1 : (x > y ? 1 : 0);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var taskFilter = byId("results-task");
  if (taskFilter) {
    taskFilter.addEventListener("change", function () {
      Array.prototype.forEach.call(byId("results-table").tBodies[0].rows, function (r) {
        r.hidden = taskFilter.value !== "" && r.getAttribute("data-task") !== taskFilter.value;
      });
    });
  }

  /* ---------------------------------------------------------------- example browser */
  var blob = byId("report-data");
  if (!blob) { document.body.setAttribute("data-ready", "1"); return; }
  var D = JSON.parse(blob.textContent);
  var F = { TASK: 0, ID: 1, Q: 2, G: 3, GN: 4, A: 5, C: 6, STOP: 7, SPLIT: 8, TOK: 9, S: 10, H: 11, WS: 12,
            WL: 13, P: 14, SP: 15, TX: 16 };
  var ex = D.ex;
  var PAGE = D.page_size || 20;
  var state = { task: "", correct: "", q: "", sort: "order", mode: "s", page: 0 };
  var hay = null;
  var view = [];

  function haystack() {
    if (hay === null) {
      hay = ex.map(function (r) {
        return (r[F.ID] + "\\n" + r[F.Q] + "\\n" + r[F.A] + "\\n" + r[F.G].join("\\n")).toLowerCase();
      });
    }
    return hay;
  }
  function conf(r) { var p = r[F.P]; return (p && p.length && p[0] !== null) ? p[0] : null; }

  function refilter() {
    var q = state.q.trim().toLowerCase();
    var h = q ? haystack() : null;
    var task = state.task === "" ? -1 : parseInt(state.task, 10);
    view = [];
    for (var i = 0; i < ex.length; i++) {
      var r = ex[i];
      if (task >= 0 && r[F.TASK] !== task) continue;
      if (state.correct !== "" && String(r[F.C]) !== state.correct) continue;
      if (h && h[i].indexOf(q) < 0) continue;
      view.push(i);
    }
    if (state.sort !== "order") {
      var sign = state.sort === "asc" ? 1 : -1;
      view.sort(function (a, b) {
        var x = conf(ex[a]), y = conf(ex[b]);
        if (x === null) return y === null ? a - b : 1;
        if (y === null) return -1;
        return x === y ? a - b : sign * (x - y);
      });
    }
    state.page = 0;
  }

  function colour(v, scale) {
    var t = Math.max(0, Math.min(1, v / scale));
    var r = Math.round(255 - t * (255 - 215)), g = Math.round(255 - t * (255 - 48)),
        b = Math.round(255 - t * (255 - 39));
    return "rgb(" + r + "," + g + "," + b + ")";
  }

  function tokenView(r) {
    var box = el("div", "tokens");
    var toks = r[F.TOK];
    if (toks === null) { box.appendChild(el("span", "empty", "(no trace found for this answer)")); return box; }
    if (!toks.length) { box.appendChild(el("span", "empty", "(empty answer: no tokens)")); return box; }
    var vals = state.mode === "s" ? r[F.S] : r[F.H];
    var scale = state.mode === "s" ? D.scale.s : D.scale.h;
    var ws = r[F.WS], we = r[F.WS] + r[F.WL];
    for (var i = 0; i < toks.length; i++) {
      var v = vals[i] / 100;
      var sp = el("span", i >= ws && i < we ? "tok pk" : "tok", toks[i].replace(/\\n/g, "\\u21b5\\n"));
      sp.style.background = colour(v, scale);
      if (v / scale > 0.65) sp.style.color = "#fff";
      sp.title = "token " + (i + 1) + ": surprisal " + (r[F.S][i] / 100).toFixed(2) + " nats, entropy " +
                 (r[F.H][i] / 100).toFixed(2) + " nats";
      box.appendChild(sp);
    }
    return box;
  }

  /* risky spans: [char_start, char_end, risk x100, operator, token_start, token_end], code-point offsets */
  function spanTitle(sp, k, n) {
    var op = D.ops[sp[3]] || ["?", "?"];
    return "risky span " + (k + 1) + " of " + n + ": risk " + (sp[2] / 100).toFixed(2) +
           " nats (its largest token risk 0.8\u00b7H + 0.2\u00b7s) \u00b7 flagged by " + op[0] + ": " + op[1] +
           " \u00b7 tokens " + (sp[4] + 1) + "\u2013" + sp[5];
  }
  function highlighted(tag, cls, text, spans) {
    var box = el(tag, cls);
    var cps = Array.from(text);
    var order = (spans || []).map(function (sp, k) { return [sp, k]; });
    order.sort(function (a, b) { return a[0][0] - b[0][0]; });
    var at = 0;
    order.forEach(function (x) {
      var sp = x[0], a = Math.max(sp[0], at), b = Math.min(sp[1], cps.length);
      if (b <= a) return;
      if (a > at) box.appendChild(document.createTextNode(cps.slice(at, a).join("")));
      var m = el("mark", "risk r" + Math.min(x[1] + 1, 3), cps.slice(a, b).join(""));
      m.title = spanTitle(sp, x[1], spans.length);
      m.setAttribute("data-rank", String(x[1] + 1));
      box.appendChild(m);
      at = b;
    });
    if (at < cps.length) box.appendChild(document.createTextNode(cps.slice(at).join("")));
    return box;
  }
  function answerView(r) {
    if (r[F.TX] === null) return highlighted("dd", "answer", r[F.A], r[F.SP]);
    var dd = el("dd", "answer", r[F.A]);  /* the trace's text differs from the stored answer: spans shown apart */
    if (r[F.SP] && r[F.SP].length) {
      var note = highlighted("div", "spantext", r[F.TX], r[F.SP]);
      note.insertBefore(document.createTextNode("risky spans in the trace's text: "), note.firstChild);
      dd.appendChild(note);
    }
    return dd;
  }

  function card(r) {
    var ok = r[F.C] === 1;
    var art = el("article", ok ? "ex ok" : "ex bad");
    art.setAttribute("data-id", r[F.ID]);
    var hd = el("header");
    hd.appendChild(el("span", "badge", ok ? "\\u2713 correct" : "\\u2717 incorrect"));
    hd.appendChild(el("span", "exid", r[F.ID]));
    hd.appendChild(el("span", "tag", D.tasks[r[F.TASK]]));
    var nt = r[F.TOK] ? r[F.TOK].length : 0;
    hd.appendChild(el("span", "tag", nt + " tokens \\u00b7 stop: " + r[F.STOP]));
    var cs = el("span", "confs");
    if (r[F.SPLIT] !== "eval") {
      cs.textContent = "calibration split (seed 0): no held-out confidence";
    } else {
      D.est.forEach(function (name, k) {
        var p = r[F.P][k];
        cs.appendChild(document.createTextNode((k ? " \\u00b7 " : "") + name + " "));
        cs.appendChild(el("b", null, p === null ? "\\u2014" : p.toFixed(3)));
      });
    }
    hd.appendChild(cs);
    art.appendChild(hd);
    var dl = el("dl", "qa");
    dl.appendChild(el("dt", null, "Question"));
    dl.appendChild(el("dd", "q", r[F.Q]));
    dl.appendChild(el("dt", null, "Gold"));
    var more = r[F.GN] > r[F.G].length ? "  \\u2026 (+" + (r[F.GN] - r[F.G].length) + " more)" : "";
    dl.appendChild(el("dd", "gold", r[F.G].join("  \\u00b7  ") + more));
    dl.appendChild(el("dt", null, "Answer"));
    dl.appendChild(answerView(r));
    dl.appendChild(el("dt", null, state.mode === "s" ? "Surprisal" : "Entropy"));
    var dd = el("dd");
    dd.appendChild(tokenView(r));
    if (r[F.TOK] && r[F.TOK].length) {
      var hsum = 0;
      for (var i = r[F.WS]; i < r[F.WS] + r[F.WL]; i++) hsum += r[F.H][i] / 100;
      var txt = "TRACE peak window: tokens " + (r[F.WS] + 1) + "\\u2013" + (r[F.WS] + r[F.WL]) +
                ", mean entropy " + (hsum / Math.max(1, r[F.WL])).toFixed(2) + " nats";
      dd.appendChild(el("div", "pknote", txt));
    }
    dl.appendChild(dd);
    art.appendChild(dl);
    return art;
  }

  function render() {
    var list = byId("ex-list");
    var pages = Math.max(1, Math.ceil(view.length / PAGE));
    state.page = Math.max(0, Math.min(state.page, pages - 1));
    var frag = document.createDocumentFragment();
    var a = state.page * PAGE, b = Math.min(view.length, a + PAGE);
    for (var i = a; i < b; i++) frag.appendChild(card(ex[view[i]]));
    if (!view.length) frag.appendChild(el("p", "empty", "No answers match the filters."));
    list.textContent = "";
    list.appendChild(frag);
    var info = "page " + (state.page + 1) + " / " + pages + " \\u00b7 " + view.length + " of " + ex.length +
               " answers";
    byId("ex-page").textContent = info;
    byId("ex-page-bottom").textContent = info;
    byId("ex-legend-name").textContent = state.mode === "s" ? "surprisal" : "entropy";
    byId("ex-legend-max").textContent = (state.mode === "s" ? D.scale.s : D.scale.h).toFixed(1) + " nats";
    ["ex-prev", "ex-prev-bottom"].forEach(function (id) { byId(id).disabled = state.page === 0; });
    ["ex-next", "ex-next-bottom"].forEach(function (id) { byId(id).disabled = state.page >= pages - 1; });
  }

  function on(id, ev, fn) { byId(id).addEventListener(ev, fn); }
  on("ex-task", "change", function (e) { state.task = e.target.value; refilter(); render(); });
  on("ex-correct", "change", function (e) { state.correct = e.target.value; refilter(); render(); });
  on("ex-sort", "change", function (e) { state.sort = e.target.value; refilter(); render(); });
  on("ex-mode", "change", function (e) { state.mode = e.target.value; render(); });
  var timer = null;
  on("ex-search", "input", function (e) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.q = e.target.value; refilter(); render(); }, 150);
  });
  function go(d, top) {
    return function () {
      state.page += d;
      render();
      if (top) byId("examples").scrollIntoView();
    };
  }
  on("ex-prev", "click", go(-1, false));
  on("ex-next", "click", go(1, false));
  on("ex-prev-bottom", "click", go(-1, true));
  on("ex-next-bottom", "click", go(1, true));
  refilter();
  render();
  document.body.setAttribute("data-ready", "1");
})();
"""
