// qlower report page: inlined into the HTML by qlower/report/html.py. No network, no libraries.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("qlower-data").textContent);
  const G = { s: D.source, q: D.qnn };
  const page = { s: 0, q: 0 };
  const fmt = (n) => (n === undefined || n === null ? "" : Number(n).toLocaleString("en-US"));
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };
  const bytes = (n) => {
    if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
    return n + " B";
  };

  function showPage(g, k) {
    const panel = document.getElementById("panel-" + g);
    if (!panel) return;
    const svgs = panel.querySelectorAll("svg.graph");
    if (!svgs.length) return;
    k = Math.max(0, Math.min(svgs.length - 1, k));
    svgs.forEach((svg) => { svg.style.display = Number(svg.dataset.page) === k ? "" : "none"; });
    page[g] = k;
    const label = panel.querySelector(".pageno");
    if (label) label.textContent = "page " + (k + 1) + " of " + svgs.length;
  }

  function nodeEl(g, i) { return document.getElementById(g + i); }

  function clear() {
    document.querySelectorAll(".node.sel, .node.hl, .edge.hl, tr.sel").forEach((e) => e.classList.remove("sel", "hl"));
  }

  function reveal(g, i, scroll) {
    const n = G[g].nodes[i];
    if (!n) return;
    if (page[g] !== n.page) showPage(g, n.page);
    const e = nodeEl(g, i);
    if (e && scroll) {  // scroll the picture's own box only, not the page
      const canvas = e.closest(".canvas");
      const c = canvas.getBoundingClientRect(), r = e.getBoundingClientRect();
      canvas.scrollTop += r.top + r.height / 2 - (c.top + c.height / 2);
      canvas.scrollLeft += r.left + r.width / 2 - (c.left + c.width / 2);
    }
  }

  function select(g, i, scroll) {
    clear();
    const n = G[g].nodes[i];
    if (!n) return;
    const own = nodeEl(g, i);
    if (own) own.classList.add("sel");
    const other = g === "s" ? "q" : "s";
    const linked = g === "s" ? n.qnn : (n.src || []);
    if (linked.length) reveal(other, linked[0], scroll);
    for (const j of linked) { const e = nodeEl(other, j); if (e) e.classList.add("hl"); }
    document.querySelectorAll('#panel-' + g + ' .edge[data-to="' + i + '"], #panel-' + g + ' .edge[data-from="' + i + '"]')
      .forEach((e) => e.classList.add("hl"));
    reveal(g, i, scroll);
    if (g === "q") { const row = document.getElementById("row" + i); if (row) row.classList.add("sel"); }
    details(g, i);
  }

  function link(g, i, text) {
    const a = el("a", { class: "goto", href: "#", text: text });
    a.addEventListener("click", (ev) => { ev.preventDefault(); select(g, i, true); });
    return a;
  }

  function tensorList(list) {
    const ul = el("ul");
    for (const [name, dt, dims] of list || []) ul.append(el("li", { text: name + ": " + dt + " [" + dims.join(", ") + "]" }));
    return ul;
  }

  function diagList(ids) {
    const box = el("div");
    for (const k of ids || []) {
      const d = D.diagnostics[k];
      box.append(el("div", { class: "diag " + d.severity }, el("span", { class: "sev", text: d.severity }), d.message,
        d.hint ? el("div", { class: "muted", text: "hint: " + d.hint }) : null,
        ...(d.notes || []).map((n) => el("div", { class: "muted", text: "note: " + n }))));
    }
    return box;
  }

  function details(g, i) {
    const n = G[g].nodes[i];
    const body = document.getElementById("details-body");
    body.className = "";
    body.replaceChildren();
    const dl = el("dl");
    const row = (k, v) => { dl.append(el("dt", { text: k }), el("dd", {}, v)); };
    row("graph", g === "s" ? "source" : "QNN");
    row("name", n.name);
    row("type", n.type);
    if (g === "q" && n.kind === "op") {
      row("step", String(n.step));
      row("rule", n.rule ? n.rule : "(none: already a QNN op)");
      row("rule at", n.location || "");
      const srcs = el("span");
      (n.sources || []).forEach((s, k) => {
        const j = (n.src || [])[(n.src || []).findIndex((x) => D.source.nodes[x].name === s)];
        if (k) srcs.append(", ");
        srcs.append(j !== undefined ? link("s", j, s) : s);
      });
      row("source nodes", (n.sources || []).length ? srcs : "(none: inserted by a pass)");
      row("MACs", fmt(n.macs));
      row("output bytes", fmt(n.out_bytes) + " (" + bytes(n.out_bytes) + ")");
      row("static bytes", fmt(n.static_bytes) + " (" + bytes(n.static_bytes) + ")");
    }
    if (g === "q" && n.kind === "input") row("bytes", fmt(n.out_bytes));
    if (g === "s" && n.kind === "op") {
      const q = el("span");
      n.qnn.forEach((j, k) => { if (k) q.append(", "); q.append(link("q", j, D.qnn.nodes[j].name)); });
      row("QNN ops", n.qnn.length ? q : "(none)");
      row("outputs", (n.outs || []).map(([v, sh]) => v + (sh ? " [" + sh.join(", ") + "]" : "")).join("; "));
    }
    body.append(dl);
    if (g === "q" && n.ins) { body.append(el("h3", { text: "inputs" }), tensorList(n.ins)); }
    if (g === "q" && n.outs) { body.append(el("h3", { text: "outputs" }), tensorList(n.outs)); }
    if ((n.diags || []).length) { body.append(el("h3", { text: "diagnostics" }), diagList(n.diags)); }
  }

  function nodeTable() {
    const host = document.getElementById("node-table");
    const head = ["step", "name", "type", "rule", "rule at", "source nodes", "MACs", "output bytes", "static bytes", "diagnostics"];
    const table = el("table", { id: "qnn-table" });
    table.append(el("thead", {}, el("tr", {}, ...head.map((h, k) => el("th", { class: k >= 6 && k <= 8 ? "num" : "", text: h })))));
    const tbody = el("tbody");
    D.qnn.nodes.forEach((n, i) => {
      if (n.kind !== "op") return;
      const tr = el("tr", { id: "row" + i, "data-name": n.name, class: (n.diags || []).length ? "err" : "" },
        el("td", { class: "num", text: String(n.step) }), el("td", { text: n.name }), el("td", { text: n.type }),
        el("td", { text: n.rule || "" }), el("td", { text: n.location || "" }), el("td", { text: (n.sources || []).join(", ") }),
        el("td", { class: "num", text: fmt(n.macs) }), el("td", { class: "num", text: fmt(n.out_bytes) }),
        el("td", { class: "num", text: fmt(n.static_bytes) }), el("td", { text: String((n.diags || []).length || "") }));
      tr.addEventListener("click", () => select("q", i, true));
      tbody.append(tr);
    });
    table.append(tbody);
    host.replaceChildren(table);
    const filter = document.getElementById("filter");
    filter.addEventListener("input", () => {
      const q = filter.value.toLowerCase();
      tbody.querySelectorAll("tr").forEach((tr) => { tr.style.display = tr.textContent.toLowerCase().includes(q) ? "" : "none"; });
    });
  }

  function diagnostics() {
    const host = document.getElementById("diag-body");
    if (!D.diagnostics.length) { host.append(el("p", { class: "muted", text: "No diagnostics." })); return; }
    const owner = new Map();
    for (const g of ["q", "s"]) G[g].nodes.forEach((n, i) => (n.diags || []).forEach((k) => { if (!owner.has(k)) owner.set(k, [g, i]); }));
    D.diagnostics.forEach((d, k) => {
      const at = owner.get(k);
      host.append(el("div", { class: "diag " + d.severity }, el("span", { class: "sev", text: d.severity }),
        at ? link(at[0], at[1], G[at[0]].nodes[at[1]].name) : el("span", { class: "muted", text: d.where }),
        ": " + d.message, d.hint ? el("div", { class: "muted", text: "hint: " + d.hint }) : null,
        ...(d.notes || []).map((n) => el("div", { class: "muted", text: "note: " + n }))));
    });
  }

  // The per-op verification table: rows are dicts (source_op, rule, local_error, cumulative_error, tolerance, verdict, ...).
  function verification() {
    const host = document.getElementById("verify-body");
    const rows = D.verification;
    if (!rows) {
      host.append(el("p", { class: "muted", text: "No per-op verification data was given (see docs/report.md: the verify table is passed in as JSON rows)." }));
      return;
    }
    const keys = D.verify_columns.filter((k) => rows.some((r) => k in r));
    for (const r of rows) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
    const srcByName = new Map(D.source.nodes.map((n, i) => [n.name, i]));
    const table = el("table", { id: "verify-table" });
    table.append(el("thead", {}, el("tr", {}, ...keys.map((k) => el("th", { text: k })))));
    const tbody = el("tbody");
    for (const r of rows) {
      const tr = el("tr");
      for (const k of keys) {
        const v = r[k];
        const text = v === null || v === undefined ? "" : typeof v === "number" ? (Number.isInteger(v) ? fmt(v) : v.toExponential(3)) : String(v);
        const td = el("td", { class: k === "verdict" ? "verdict-" + text.toLowerCase() : typeof v === "number" ? "num" : "" });
        if (k === "source_op" && srcByName.has(text)) td.append(link("s", srcByName.get(text), text)); else td.textContent = text;
        tr.append(td);
      }
      tbody.append(tr);
    }
    table.append(tbody);
    host.append(table);
  }

  // Zoom: scale every page of a panel; "fit" (0) fits the current page to the panel's width.
  const zoom = { s: 1, q: 1 };
  function setZoom(g, factor) {
    const panel = document.getElementById("panel-" + g);
    const svgs = panel ? panel.querySelectorAll("svg.graph") : [];
    if (!svgs.length) return;
    if (factor === 0) {
      const cur = svgs[page[g]] || svgs[0];
      const avail = panel.querySelector(".canvas").clientWidth - 4;
      zoom[g] = Math.max(0.6, Math.min(1, avail / Number(cur.dataset.w || cur.getAttribute("width"))));
    } else {
      zoom[g] = Math.max(0.1, Math.min(3, zoom[g] * factor));
    }
    svgs.forEach((svg) => {
      if (!svg.dataset.w) { svg.dataset.w = svg.getAttribute("width"); svg.dataset.h = svg.getAttribute("height"); }
      svg.setAttribute("width", String(Math.round(svg.dataset.w * zoom[g])));
      svg.setAttribute("height", String(Math.round(svg.dataset.h * zoom[g])));
    });
  }

  document.querySelectorAll(".panel").forEach((panel) => {
    panel.addEventListener("click", (ev) => {
      const g = ev.target.closest && ev.target.closest("g.node");
      if (g) select(g.dataset.g, Number(g.dataset.i), false);
      const b = ev.target.closest && ev.target.closest(".pager button");
      if (!b) return;
      const key = b.closest(".pager").dataset.g;
      if (b.dataset.zoom !== undefined) setZoom(key, Number(b.dataset.zoom));
      else showPage(key, page[key] + Number(b.dataset.step));
    });
  });
  setZoom("s", 0);
  setZoom("q", 0);
  document.querySelectorAll("svg.chart .hit").forEach((r) => {
    r.addEventListener("click", () => {
      const step = Number(r.dataset.step);
      const i = D.qnn.nodes.findIndex((n) => n.kind === "op" && n.step === step);
      if (i >= 0) select("q", i, true);
    });
  });
  document.querySelectorAll("a.goto[data-name]").forEach((a) => {
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      const g = a.dataset.g, i = G[g].nodes.findIndex((n) => n.name === a.dataset.name);
      if (i >= 0) select(g, i, true);
    });
  });
  nodeTable();
  diagnostics();
  verification();
  // Deep links: #select=s12 or #select=q40 selects that node (source or QNN graph) on load.
  const m = /^#select=([sq])(\d+)$/.exec(window.location.hash);
  if (m && G[m[1]].nodes[Number(m[2])]) select(m[1], Number(m[2]), true);
  document.body.dataset.ready = "1";
})();
