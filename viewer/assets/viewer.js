// hindsight credit viewer: reads the page's embedded JSON (Go: viewer.Page) and
// renders the rollout list, the histograms and one rollout's tokens. The token
// view is virtualised: only the rows in and near the viewport exist in the DOM.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("credit-data").textContent);
  const ROW_H = 20, OVERSCAN = 6, ROW_TOKENS = 48, ROW_CHARS = 100;
  const $ = (id) => document.getElementById(id);
  const fmt = (x) => (x === null || x === undefined ? "—" : Number(x.toPrecision(5)).toString());
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  const base = (p) => p.slice(p.lastIndexOf("/") + 1);
  // shortId keeps both ends of a long rollout id: ids often share a long prefix
  // (a run name, a date) and differ only at the end.
  const ID_HEAD = 8, ID_TAIL = 14;
  const shortId = (id) => (id.length <= ID_HEAD + ID_TAIL + 1 ? id : id.slice(0, ID_HEAD) + "…" + id.slice(-ID_TAIL));
  $("files").textContent = data.files.map(base).join(", ") + " · " + data.rollouts.length + " rollouts";
  $("files").title = data.files.join("\n");

  // ---- the list -----------------------------------------------------------
  const sortVal = {
    id: (r) => r.id,
    reward: (r) => (r.reward === null ? -Infinity : r.reward),
    outcome_advantage: (r) => r.outcome_advantage,
    sum_abs_delta: (r) => r.sum_abs_delta,
    clip_fraction: (r) => r.clip_fraction,
    hints: (r) => r.hints.length,
    tokens: (r) => r.ids.length,
  };
  let order = data.rollouts.map((_, i) => i), sortKey = null, sortDir = 1, current = -1;

  function renderList() {
    const tb = document.querySelector("#list tbody");
    tb.textContent = "";
    for (const i of order) {
      const r = data.rollouts[i];
      const tr = document.createElement("tr");
      tr.dataset.index = i;
      if (i === current) tr.className = "sel";
      tr.innerHTML = "<td class=id title=\"" + esc(r.id + "\n" + r.file) + "\">" + esc(shortId(r.id)) + "</td><td class=num>" + fmt(r.reward) +
        "</td><td class=num>" + fmt(r.outcome_advantage) + "</td><td class=num>" + fmt(r.sum_abs_delta) +
        "</td><td class=num>" + fmt(r.clip_fraction) + "</td><td class=num>" + r.hints.length +
        "</td><td class=num>" + r.ids.length + "</td>";
      tb.appendChild(tr);
    }
  }
  function sortBy(key, dir) {
    if (!sortVal[key]) throw new Error("no sort key " + key);
    sortDir = dir !== undefined ? dir : (sortKey === key ? -sortDir : -1);
    sortKey = key;
    const f = sortVal[key];
    order.sort((a, b) => {
      const x = f(data.rollouts[a]), y = f(data.rollouts[b]);
      return (x < y ? -1 : x > y ? 1 : a - b) * sortDir;
    });
    for (const th of document.querySelectorAll("#list th")) {
      th.className = (th.dataset.key === key ? (sortDir > 0 ? "sorted-asc" : "sorted-desc") : "") +
        (th.dataset.key !== "id" ? " num" : "");
    }
    renderList();
  }
  document.querySelector("#list thead").addEventListener("click", (e) => {
    const th = e.target.closest("th");
    if (th) sortBy(th.dataset.key);
  });
  document.querySelector("#list tbody").addEventListener("click", (e) => {
    const tr = e.target.closest("tr");
    if (tr) open(Number(tr.dataset.index));
  });

  // ---- histograms ---------------------------------------------------------
  function histogram(svg, values, bins) {
    const W = svg.width.baseVal.value, H = svg.height.baseVal.value, pad = 14;
    svg.textContent = "";
    const ns = "http://www.w3.org/2000/svg";
    const add = (tag, attrs, text) => {
      const el = document.createElementNS(ns, tag);
      for (const k in attrs) el.setAttribute(k, attrs[k]);
      if (text !== undefined) el.textContent = text;
      svg.appendChild(el);
    };
    if (values.length === 0) { add("text", { x: 8, y: H / 2 }, "no values"); return; }
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    if (hi === lo) { hi = lo + 1; }
    const counts = new Array(bins).fill(0);
    for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / (hi - lo) * bins))]++;
    const max = Math.max(...counts), bw = (W - 2) / bins;
    counts.forEach((c, i) => {
      const h = (H - 2 * pad) * c / max;
      add("rect", { x: 1 + i * bw, y: H - pad - h, width: Math.max(1, bw - 1), height: h, fill: "#4a78b5" }, undefined);
    });
    add("text", { x: 2, y: H - 2 }, fmt(lo));
    add("text", { x: W - 2, y: H - 2, "text-anchor": "end" }, fmt(hi));
    add("text", { x: 2, y: 10 }, "max " + max + " · n " + values.length);
  }
  const deltas = [], masses = [];
  for (const r of data.rollouts) {
    masses.push(r.credit_mass);
    if (r.delta) r.delta.forEach((d, t) => { if (d !== null && r.mask[t]) deltas.push(d); });
  }
  histogram($("hist-delta"), deltas, 30);
  histogram($("hist-mass"), masses, 30);

  // ---- one rollout --------------------------------------------------------
  let rows = [], tokRow = null, R = null, scale = 1; // tokRow[t]: the row holding token t
  // by is what colours the tokens: "a" (A_t, which the outcome term can dominate)
  // or "delta" (the hint's Δ_t alone); each has its own scale, max |value| over the
  // rollout's trained tokens.
  let by = "a";
  const shade = (t) => (R.mask[t] && R[by] ? R[by][t] : null);
  function buildRows(r) {
    const out = [], segAt = new Map(), hintsAt = new Map();
    r.segments.forEach((s, k) => segAt.set(s.Start, k));
    r.hints.forEach((h) => { if (!hintsAt.has(h.insert_at)) hintsAt.set(h.insert_at, []); hintsAt.get(h.insert_at).push(h); });
    let from = 0, chars = 0;
    tokRow = new Int32Array(r.ids.length);
    const flush = (t) => {
      if (t > from) { tokRow.fill(out.length, from, t); out.push({ kind: "tok", from: from, to: t }); }
      from = t; chars = 0;
    };
    for (let t = 0; t < r.ids.length; t++) {
      if (segAt.has(t) || hintsAt.has(t)) {
        flush(t);
        if (segAt.has(t)) out.push({ kind: "seg", seg: r.segments[segAt.get(t)], index: segAt.get(t) });
        for (const h of hintsAt.get(t) || []) out.push({ kind: "hint", hint: h });
      }
      chars += r.text[t].length;
      if (r.text[t].indexOf("\n") >= 0 || t + 1 - from >= ROW_TOKENS || chars >= ROW_CHARS) flush(t + 1);
    }
    flush(r.ids.length);
    for (const h of r.hints) if (h.insert_at >= r.ids.length) out.push({ kind: "hint", hint: h });
    return out;
  }
  // colour returns the background for value a on the current scale (blue,
  // white, red) and the text colour, black or white, that contrasts with it more.
  function colour(a) {
    const x = Math.max(-1, Math.min(1, a / scale));
    const lerp = (q) => Math.round(247 + (q - 247) * Math.abs(x)); // from the white midpoint
    const rgb = x >= 0 ? [lerp(178), lerp(24), lerp(43)] : [lerp(33), lerp(102), lerp(172)];
    const lin = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    const L = 0.2126 * lin(rgb[0]) + 0.7152 * lin(rgb[1]) + 0.0722 * lin(rgb[2]); // WCAG relative luminance
    // Contrast with black (L+0.05)/0.05, with white 1.05/(L+0.05): black wins above L ≈ 0.179.
    return { bg: "rgb(" + rgb.join(",") + ")", fg: (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) ? "#000" : "#fff" };
  }
  function setScale() {
    scale = 0;
    R.a.forEach((_, t) => { const v = shade(t); if (v !== null) scale = Math.max(scale, Math.abs(v)); });
    if (scale === 0) scale = 1;
    $("leg-lo").textContent = fmt(-scale);
    $("leg-hi").textContent = "+" + fmt(scale);
    $("leg-note").textContent = by === "a" ? "token colour: A_t (grey: not trained)"
      : R.delta ? "token colour: Δ_t, hinted tokens only (grey: not trained)" : "no Δ_t: credit schema v1";
  }
  // colourBy switches the token colours to "a" or "delta".
  function colourBy(k) {
    if (k !== "a" && k !== "delta") throw new Error("no colouring " + k);
    by = k;
    for (const el of document.querySelectorAll('input[name="by"]')) el.checked = el.value === k;
    if (R) { setScale(); render(); }
  }
  for (const el of document.querySelectorAll('input[name="by"]')) el.addEventListener("change", () => colourBy(el.value));
  function open(i) {
    current = i;
    R = data.rollouts[i];
    setScale();
    $("head").innerHTML = "<b>" + esc(R.id) + "</b> · <span title=\"" + esc(R.file) + "\">" + esc(base(R.file)) + "</span>" + (R.task_id ? " · task " + esc(R.task_id) : "") +
      " · step " + R.step + " · reward " + fmt(R.reward) + " · A_out " + fmt(R.outcome_advantage) +
      " · Σ|Δ| " + fmt(R.sum_abs_delta) + " · clip " + fmt(R.clip_fraction) + " · " + R.ids.length + " tokens · text: " +
      esc(R.decoding) + (R.tokenizer ? " (" + esc(R.tokenizer) + ")" : "") +
      (R.schema_v2 ? "" : " · <i>credit schema v1: no Δ, ρ, base or μ per token</i>");
    rows = buildRows(R);
    $("spacer").style.height = rows.length * ROW_H + "px";
    $("scroller").scrollTop = 0;
    renderList();
    render();
  }
  function tokSpan(t) {
    const s = document.createElement("span");
    s.className = R.mask[t] ? "tok" : "tok off";
    s.tabIndex = 0;
    s.dataset.t = t;
    s.textContent = R.text[t].replace(/\n/g, "↵").replace(/\t/g, "→");
    const v = shade(t);
    if (v !== null) {
      const c = colour(v);
      s.style.background = c.bg;
      s.style.color = c.fg;
    }
    return s;
  }
  function render() {
    const sc = $("scroller"), box = $("rows");
    const first = Math.max(0, Math.floor(sc.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(rows.length, Math.ceil((sc.scrollTop + sc.clientHeight) / ROW_H) + OVERSCAN);
    box.style.top = first * ROW_H + "px";
    box.textContent = "";
    for (let k = first; k < last; k++) {
      const row = rows[k], div = document.createElement("div");
      div.className = "row " + (row.kind === "tok" ? "text" : row.kind); // "tok" is the token class
      if (row.kind === "seg") {
        const s = row.seg;
        div.innerHTML = "§" + row.index + " " + esc(s.Kind) + (s.Tool ? " · tool " + esc(s.Tool) : "") +
          (s.Status ? " · <span class=\"" + (s.Status === "error" ? "err" : "") + "\">" + esc(s.Status) + "</span>" : "") +
          " · tokens " + s.Start + "–" + s.End;
      } else if (row.kind === "hint") {
        const h = row.hint;
        div.textContent = "▸ hint @" + h.insert_at + "–" + h.end + " (" + h.source + ", " + h.reason + ")" +
          (h.context || h.loss_mode ? " [" + hintHow(h) + "]" : "") + ": " + h.text;
        div.title = div.textContent;
      } else {
        for (let t = row.from; t < row.to; t++) div.appendChild(tokSpan(t));
      }
      box.appendChild(div);
    }
  }
  $("scroller").addEventListener("scroll", () => { if (R) render(); }, { passive: true });
  window.addEventListener("resize", () => { if (R) render(); });

  // ---- tooltip and keyboard ------------------------------------------------
  const tip = $("tip");
  const shown = (s) => "`" + s.replace(/\n/g, "↵").replace(/\t/g, "→") + "`";
  const prob = (p) => (p === null ? "—" : p.toFixed(2));
  // hintHow says what a hint's teacher saw and the loss it trained with (credit
  // schema v3): "sibling+hint · topk, jsd α 0.5".
  function hintHow(h) {
    let s = "context " + (h.context || "?");
    if (h.loss_mode) s += " · loss " + h.loss_mode + (h.divergence ? ", " + h.divergence : "") + (h.jsd_alpha ? " α " + fmt(h.jsd_alpha) : "");
    return s;
  }
  // teacherLines are the tooltip's lines on the teacher's view of token t: its
  // most likely tokens, the sampled token's probability, and the hint's context.
  function teacherLines(t) {
    const v = R.teacher ? R.teacher[t] : null;
    if (!v) return "";
    const alts = v.ids.map((_, j) => shown(v.text[j]) + " " + prob(v.p[j]));
    return "\nteacher " + (alts.length ? "preferred " + alts.join(", ") + "; " : "") +
      "sampled " + shown(R.text[t]) + " " + prob(v.sampled) + "\nhint " + v.hint + ": " + hintHow(R.hints[v.hint]);
  }
  function tipText(t) {
    const v = (arr) => (arr ? arr[t] : null);
    return "t " + t + "  id " + R.ids[t] + (R.mask[t] ? "" : "  (not trained)") +
      "\ns_t " + fmt(R.s[t]) + "\nq_t " + fmt(R.q[t]) + "\nΔ_t " + fmt(v(R.delta)) + "\nρ_t " + fmt(v(R.rho)) +
      "\nA_t " + fmt(R.a[t]) + "\nbase " + fmt(v(R.base)) + "\nμ_t " + fmt(v(R.mu)) + teacherLines(t);
  }
  function showTip(el) {
    const t = Number(el.dataset.t);
    tip.textContent = tipText(t);
    tip.dataset.t = t;
    tip.hidden = false;
    const b = el.getBoundingClientRect();
    tip.style.left = Math.min(b.left, window.innerWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = (b.bottom + tip.offsetHeight + 8 < window.innerHeight ? b.bottom + 4 : b.top - tip.offsetHeight - 4) + "px";
  }
  const rowsBox = $("rows");
  rowsBox.addEventListener("mouseover", (e) => { if (e.target.classList.contains("tok")) showTip(e.target); });
  rowsBox.addEventListener("mouseout", (e) => { if (e.target.classList.contains("tok")) tip.hidden = true; });
  rowsBox.addEventListener("focusin", (e) => { if (e.target.classList.contains("tok")) showTip(e.target); });
  rowsBox.addEventListener("focusout", () => { tip.hidden = true; });
  function focusToken(t) {
    if (!R || t < 0 || t >= R.ids.length) return;
    const sc = $("scroller"), y = tokRow[t] * ROW_H;
    if (y < sc.scrollTop || y + ROW_H > sc.scrollTop + sc.clientHeight) {
      sc.scrollTop = y - sc.clientHeight / 2;
      render(); // the scroll event would render too, but only after this returns
    }
    const el = rowsBox.querySelector('.tok[data-t="' + t + '"]');
    if (el) el.focus();
  }
  rowsBox.addEventListener("keydown", (e) => {
    if (!e.target.classList.contains("tok")) return;
    const t = Number(e.target.dataset.t);
    if (e.key === "ArrowRight") { focusToken(t + 1); e.preventDefault(); }
    if (e.key === "ArrowLeft") { focusToken(t - 1); e.preventDefault(); }
  });

  // For tests and the console.
  window.hindsightViewer = {
    data: data, open: open, sortBy: sortBy, focusToken: focusToken, colourBy: colourBy,
    order: () => order.slice(), tokenNodes: () => rowsBox.querySelectorAll(".tok").length, tipText: tipText,
  };
  renderList();
  if (data.rollouts.length > 0) open(0);
})();
