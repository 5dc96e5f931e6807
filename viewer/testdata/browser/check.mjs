// Browser checks of the credit viewer, driven over the Chrome DevTools protocol
// (--remote-debugging-pipe: no npm package, no WebSocket). Run by the Go test
// TestViewerInBrowser (viewer/browser_test.go), which writes the pages and
// spec.json:
//
//   node check.mjs CHROMIUM SPEC.json
//
// spec (each part optional): {small: PAGE, tokens: [{rollout, t, id, s, q, delta, rho, a}],
//        teacherTips: [{rollout, t, lines: [LINE…]}], hintRow: TEXT, sortKey, sortedIDs, long: PAGE, longTokens, longLastID, maxTokenNodes,
//        colours: {page, ids: [ID…], outcomeRollouts: [I…], minContrast},
//        screenshot: {page, out, rollout, t, by}}  (docs/gen_viewer_screenshot.sh)
// Prints one line per check and exits 1 on the first failure.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [chromium, specPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, "utf8"));
const profile = mkdtempSync(join(tmpdir(), "hindsight-chromium-"));
const proc = spawn(chromium, ["--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
  "--no-first-run", "--no-default-browser-check", "--window-size=1280,800", "--user-data-dir=" + profile, "about:blank"],
  { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
let stderr = "";
proc.stderr.on("data", (d) => { stderr += d; });
const toBrowser = proc.stdio[3], fromBrowser = proc.stdio[4];

let nextID = 1, buffered = "";
const pending = new Map(), waiters = [];
fromBrowser.on("data", (chunk) => {
  buffered += chunk.toString("utf8");
  let i;
  while ((i = buffered.indexOf("\0")) >= 0) {
    const msg = JSON.parse(buffered.slice(0, i));
    buffered = buffered.slice(i + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
    } else if (msg.method) {
      for (const w of waiters.slice()) if (w.method === msg.method) { waiters.splice(waiters.indexOf(w), 1); w.resolve(msg.params); }
    }
  }
});
function send(method, params = {}, sessionId) {
  const id = nextID++;
  toBrowser.write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const waitEvent = (method) => new Promise((resolve) => waiters.push({ method, resolve }));

// finish stops the browser, removes its profile once it has exited, and exits.
function finish(code) {
  proc.once("exit", () => {
    try { rmSync(profile, { recursive: true, force: true }); } catch (e) { console.log("rm " + profile + ": " + e); }
    process.exit(code);
  });
  proc.kill();
}
function fail(msg) {
  console.log("FAIL " + msg);
  const useful = stderr.split("\n").filter((l) => l && !/dbus|DBus|UPower/.test(l));
  if (useful.length) console.log("chromium stderr (tail):\n" + useful.slice(-20).join("\n"));
  finish(1);
}
class CheckFailed extends Error {}
function check(cond, msg) {
  if (!cond) { fail(msg); throw new CheckFailed(msg); }
  console.log("ok   " + msg);
}
const close = (got, want) => (want === null ? got === null : got !== null && Math.abs(got - want) <= 1e-4 * Math.max(1, Math.abs(want)));

const timer = setTimeout(() => fail("timed out after 90 s"), 90000);
try {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  const S = (m, p) => send(m, p, sessionId);
  const evaluate = async (expr) => {
    const r = await S("Runtime.evaluate", { expression: expr, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) fail("evaluate " + expr + ": " + JSON.stringify(r.exceptionDetails));
    return r.result.value;
  };
  const frame = () => evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))");
  await S("Page.enable");
  await S("Runtime.enable");
  const load = async (path) => {
    const loaded = waitEvent("Page.loadEventFired");
    await S("Page.navigate", { url: pathToFileURL(path).href });
    await loaded;
    await frame();
  };
  const centre = async (selector) => evaluate(`(() => { const el = document.querySelector(${JSON.stringify(selector)});
    if (!el) return null; const b = el.getBoundingClientRect(); return {x: b.left + b.width / 2, y: b.top + b.height / 2}; })()`);
  const tipNumbers = async () => evaluate(`(() => { const tip = document.getElementById("tip");
    if (tip.hidden) return null; const out = {}; const txt = tip.textContent;
    const num = (k) => { const m = txt.match(new RegExp("(?:^|\\\\n|  )" + k + " (\\\\S+)")); return m ? (m[1] === "—" ? null : Number(m[1])) : undefined; };
    return {t: num("t"), id: num("id"), s: num("s_t"), q: num("q_t"), delta: num("Δ_t"), rho: num("ρ_t"), a: num("A_t"), text: txt}; })()`);

  if (spec.small) {
  // 1. Hover tokens: the tooltip shows the file's numbers.
  await load(spec.small);
  for (const want of spec.tokens) {
    await evaluate(`hindsightViewer.open(${want.rollout})`);
    await frame();
    const c = await centre(`.tok[data-t="${want.t}"]`);
    check(c !== null, `rollout ${want.rollout} token ${want.t} is rendered`);
    await S("Input.dispatchMouseEvent", { type: "mouseMoved", x: 1, y: 1 });
    await S("Input.dispatchMouseEvent", { type: "mouseMoved", x: c.x, y: c.y });
    const got = await tipNumbers();
    check(got !== null, `hovering token ${want.t} shows the tooltip`);
    for (const k of ["t", "id", "s", "q", "delta", "rho", "a"]) {
      check(close(got[k], want[k]), `token ${want.t}: tooltip ${k} ${got[k]} = file ${want[k]}`);
    }
  }
  // Hover a hinted token: the tooltip names the teacher's alternatives, the sampled
  // token's teacher probability, and the hint's context and loss (credit schema v3).
  for (const want of spec.teacherTips || []) {
    await evaluate(`hindsightViewer.open(${want.rollout})`);
    await frame();
    const c = await centre(`.tok[data-t="${want.t}"]`);
    check(c !== null, `rollout ${want.rollout} token ${want.t} is rendered`);
    await S("Input.dispatchMouseEvent", { type: "mouseMoved", x: 1, y: 1 });
    await S("Input.dispatchMouseEvent", { type: "mouseMoved", x: c.x, y: c.y });
    const got = await tipNumbers();
    check(got !== null, `hovering token ${want.t} shows the tooltip`);
    const lines = got.text.split("\n");
    for (const line of want.lines) check(lines.includes(line), `token ${want.t}: tooltip has the line "${line}" (tooltip: ${JSON.stringify(got.text)})`);
  }
  if (spec.hintRow) {
    await evaluate(`hindsightViewer.open(0)`);
    await frame();
    const rowText = await evaluate(`[...document.querySelectorAll(".row.hint")].map((e) => e.textContent)`);
    check(rowText.some((x) => x.includes(spec.hintRow)), `a hint row shows "${spec.hintRow}" (rows: ${JSON.stringify(rowText)})`);
  }
  // Keyboard: focus a token, arrow right moves focus and the tooltip to the next one.
  await S("Input.dispatchMouseEvent", { type: "mouseMoved", x: 1, y: 1 }); // hover would show its own token
  const first = spec.tokens[0];
  await evaluate(`hindsightViewer.open(${first.rollout}); hindsightViewer.focusToken(${first.t})`);
  await S("Input.dispatchKeyEvent", { type: "rawKeyDown", key: "ArrowRight", code: "ArrowRight", windowsVirtualKeyCode: 39 });
  await S("Input.dispatchKeyEvent", { type: "keyUp", key: "ArrowRight", code: "ArrowRight", windowsVirtualKeyCode: 39 });
  await frame();
  const kb = await tipNumbers();
  check(kb !== null && kb.t === first.t + 1, `ArrowRight moves keyboard focus to token ${first.t + 1} (tooltip t ${kb && kb.t})`);

  // 2. Sort the list by clicking a column header.
  const th = await centre(`#list th[data-key="${spec.sortKey}"]`);
  await S("Input.dispatchMouseEvent", { type: "mousePressed", x: th.x, y: th.y, button: "left", clickCount: 1 });
  await S("Input.dispatchMouseEvent", { type: "mouseReleased", x: th.x, y: th.y, button: "left", clickCount: 1 });
  await frame();
  const ids = await evaluate(`[...document.querySelectorAll("#list tbody tr td:first-child")].map((td) => td.textContent)`);
  check(JSON.stringify(ids) === JSON.stringify(spec.sortedIDs), `sorted by ${spec.sortKey}: ${ids.join(",")}`);

  }
  if (spec.long) {
  // 3. A long rollout keeps a bounded number of token nodes wherever it is scrolled.
  const t0 = Date.now();
  await load(spec.long);
  console.log(`info ${spec.longTokens}-token page loaded and drawn in ${Date.now() - t0} ms (reported, not asserted)`);
  const n0 = await evaluate(`document.querySelectorAll(".tok").length`);
  check(n0 > 0 && n0 <= spec.maxTokenNodes, `${spec.longTokens}-token rollout: ${n0} token nodes at the top (bound ${spec.maxTokenNodes})`);
  for (const frac of [0.5, 0.999]) {
    await evaluate(`(() => { const sc = document.getElementById("scroller"); sc.scrollTop = sc.scrollHeight * ${frac}; })()`);
    await frame();
    const r = await evaluate(`(() => { const t = [...document.querySelectorAll(".tok")].map((e) => +e.dataset.t);
      return {n: t.length, min: Math.min(...t), max: Math.max(...t), bad: t.filter((x) => !(x >= 0)).length}; })()`);
    check(r.n > 0 && r.bad === 0 && r.n <= spec.maxTokenNodes && r.max >= spec.longTokens * frac * 0.9,
      `scrolled to ${frac}: ${r.n} token nodes, tokens ${r.min}–${r.max}, ${r.bad} without a token index`);
  }
  const last = spec.longTokens - 1;
  await evaluate(`hindsightViewer.focusToken(${last})`);
  await frame();
  const lastTip = await tipNumbers();
  check(lastTip !== null && lastTip.t === last && lastTip.id === spec.longLastID, `the last token (${last}) takes focus and shows id ${spec.longLastID}`);
  }
  if (spec.colours) {
  // 4. Ids with a long common prefix stay distinguishable in the list, unclipped,
  // with the full id in the cell's title.
  const co = spec.colours;
  await load(co.page);
  const cells = await evaluate(`[...document.querySelectorAll("#list tbody td.id")].map((td) =>
    ({text: td.textContent, title: td.title, clipped: td.scrollWidth > td.clientWidth}))`);
  check(cells.length === co.ids.length, `${cells.length} id cells for ${co.ids.length} rollouts`);
  check(new Set(cells.map((c) => c.text)).size === cells.length, `the id cells differ: ${cells.map((c) => c.text).join(", ")}`);
  cells.forEach((c, i) => {
    check(c.title.split("\n")[0] === co.ids[i], `id cell ${i}: title holds the full id ${co.ids[i]}`);
    check(!c.clipped, `id cell ${i} "${c.text}" is not clipped`);
  });
  const left = await evaluate(`(() => { const el = document.getElementById("left"); return {scroll: el.scrollWidth, client: el.clientWidth}; })()`);
  check(left.scroll <= left.client, `the list fits its panel: ${left.scroll} px wide in ${left.client} px`);
  // 5. Contrast: every rendered token's computed text colour against the background
  // it is drawn on (its own, else the nearest ancestor's), both colourings.
  const contrast = async () => evaluate(`(() => {
    const parse = (c) => { const m = c.match(/[\\d.]+/g).map(Number); return {rgb: m.slice(0, 3), a: m.length > 3 ? m[3] : 1}; };
    const lin = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    const lum = (c) => 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
    const bg = (el) => { for (; el; el = el.parentElement) { const c = parse(getComputedStyle(el).backgroundColor); if (c.a > 0) return c.rgb; } return [255, 255, 255]; };
    let worst = null;
    for (const el of document.querySelectorAll(".tok, #list td")) {
      const f = lum(parse(getComputedStyle(el).color).rgb), b = lum(bg(el));
      const r = (Math.max(f, b) + 0.05) / (Math.min(f, b) + 0.05);
      if (!worst || r < worst.ratio) worst = {ratio: r, t: el.dataset.t, text: el.textContent, fg: getComputedStyle(el).color, bg: String(bg(el))};
    }
    return worst; })()`);
  for (const by of ["a", "delta"]) {
    await evaluate(`hindsightViewer.colourBy(${JSON.stringify(by)})`);
    for (let i = 0; i < co.ids.length; i++) {
      await evaluate(`hindsightViewer.open(${i})`);
      await frame();
      const w = await contrast();
      check(w !== null && w.ratio >= co.minContrast, `colour by ${by}, rollout ${i}: lowest text contrast ${w && w.ratio.toFixed(2)} ≥ ${co.minContrast} (${JSON.stringify(w)})`);
    }
  }
  // 6. On the rollouts whose A_t is the outcome term ± a small Δ_t, colouring by A_t
  // paints the hinted span in one hue; a click on "hint Δ_t" gives it both hues
  // (Δ_t has both signs) and many shades.
  const hues = (cs) => { const s = new Set(cs.map((c) => c.bg)); const rgb = cs.map((c) => c.bg.match(/\d+/g).map(Number));
    return {shades: s.size, red: rgb.filter((c) => c[0] > c[2]).length, blue: rgb.filter((c) => c[2] > c[0]).length}; };
  const hinted = (i) => `[...document.querySelectorAll(".tok")].filter((el) => hindsightViewer.data.rollouts[${i}].delta[+el.dataset.t] !== null)
    .map((el) => ({bg: getComputedStyle(el).backgroundColor}))`;
  for (const i of co.outcomeRollouts) {
    await evaluate(`hindsightViewer.colourBy("a"); hindsightViewer.open(${i})`);
    await frame();
    const byA = hues(await evaluate(hinted(i)));
    check(byA.red === 0 || byA.blue === 0, `rollout ${i} by A_t: one hue over the hinted span (${JSON.stringify(byA)})`);
    const radio = await centre(`input[name="by"][value="delta"]`);
    await S("Input.dispatchMouseEvent", { type: "mousePressed", x: radio.x, y: radio.y, button: "left", clickCount: 1 });
    await S("Input.dispatchMouseEvent", { type: "mouseReleased", x: radio.x, y: radio.y, button: "left", clickCount: 1 });
    await frame();
    const byD = hues(await evaluate(hinted(i)));
    check(byD.red > 0 && byD.blue > 0 && byD.shades >= 10, `rollout ${i} by Δ_t: both hues and ${byD.shades} shades (${JSON.stringify(byD)})`);
    const legend = await evaluate(`document.getElementById("leg-hi").textContent`);
    check(legend === "+0.019", `rollout ${i} by Δ_t: the legend's scale is Δ's own, ${legend}`);
  }
  }
  if (spec.screenshot) {
    // A picture for the docs: spec.screenshot = {page, out, rollout, t, by ("a", the default, or "delta")}.
    const sh = spec.screenshot;
    await load(sh.page);
    await evaluate(`hindsightViewer.colourBy(${JSON.stringify(sh.by || "a")}); hindsightViewer.open(${sh.rollout}); hindsightViewer.focusToken(${sh.t})`);
    await frame();
    const png = await S("Page.captureScreenshot", { format: "png" });
    writeFileSync(sh.out, Buffer.from(png.data, "base64"));
    check(true, `screenshot ${sh.out}`);
  }
} catch (e) {
  if (!(e instanceof CheckFailed)) fail(String(e && e.stack || e));
  await new Promise(() => {}); // finish exits
}
clearTimeout(timer);
console.log("PASS");
finish(0);
