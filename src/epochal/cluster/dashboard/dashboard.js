// The job's dashboard (served by cluster/endpoint.py): polls GET /status and GET /metrics.json
// every second and redraws the page from them. Vanilla JS, no build step, nothing from a CDN.
// Everything the job supplies (operator names, failures, records) goes in as text, never as HTML.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

// -- formatting ------------------------------------------------------------------------------------
function count(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}
function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s === 0) return "0";
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  if (s < 63072000) return (s / 86400).toFixed(1) + " days";
  return (s / 31557600).toFixed(1) + " years";
}
function percent(r) { return (r * 100).toFixed(0) + " %"; }
function clock(t) { return t ? new Date(t * 1000).toLocaleTimeString() : "–"; }
function watermark(w) {
  if (w === null || w === undefined) return "–";
  if (w === "end") return "end";
  if (w < 1e9) return w.toLocaleString(undefined, { maximumFractionDigits: 3 }); // the job's own clock
  return new Date(w * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "");
}
// green (never held back) to red (always held back by a full output)
function pressureColour(r) { return `hsl(${Math.round(120 * (1 - Math.min(1, Math.max(0, r))))}, 55%, 78%)`; }

// -- DOM helpers -----------------------------------------------------------------------------------
function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}
function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
  for (const cell of cells) {
    const td = document.createElement("td");
    if (typeof cell === "object" && cell !== null) {
      td.textContent = cell.text;
      if (cell.cls) td.className = cell.cls;
    } else {
      td.textContent = cell;
    }
    tr.appendChild(td);
  }
  return tr;
}
function fill(tbody, rows) { tbody.replaceChildren(...rows); }

// -- the job graph ---------------------------------------------------------------------------------
const NODE_W = 170, NODE_H = 62, GAP_X = 70, GAP_Y = 18, PAD = 12;

function layout(operators, edges) {
  // column = longest path from a source, ignoring the back-edges that close loops
  const depth = new Map(operators.map((o) => [o.name, 0]));
  const forward = edges.filter((e) => !e.kind.includes("loop"));
  for (let i = 0; i < operators.length; i += 1) {
    let moved = false;
    for (const e of forward) {
      const d = depth.get(e.source) + 1;
      if (depth.has(e.target) && d > depth.get(e.target)) { depth.set(e.target, d); moved = true; }
    }
    if (!moved) break;
  }
  const rows = new Map();
  const place = new Map();
  for (const o of operators) {
    const col = depth.get(o.name);
    const r = rows.get(col) || 0;
    rows.set(col, r + 1);
    place.set(o.name, { x: PAD + col * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) });
  }
  const cols = Math.max(1, ...[...depth.values()].map((d) => d + 1));
  const height = Math.max(1, ...rows.values());
  return { place, width: 2 * PAD + cols * NODE_W + (cols - 1) * GAP_X, height: 2 * PAD + height * NODE_H + (height - 1) * GAP_Y };
}

function drawGraph(m) {
  const graph = $("graph");
  const { place, width, height } = layout(m.operators, m.edges);
  graph.setAttribute("viewBox", `0 0 ${width} ${height}`);
  graph.style.maxWidth = `${width * 1.3}px`;
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" });
  marker.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a94a6" }));
  defs.appendChild(marker);
  const items = [defs];
  for (const e of m.edges) {
    const a = place.get(e.source), b = place.get(e.target);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const back = x2 <= x1;
    const d = back
      ? `M${a.x + NODE_W / 2},${a.y + NODE_H} C${a.x + NODE_W / 2},${a.y + NODE_H + 40} ${b.x + NODE_W / 2},${b.y + NODE_H + 40} ${b.x + NODE_W / 2},${b.y + NODE_H}`
      : `M${x1},${y1} C${x1 + GAP_X / 2},${y1} ${x2 - GAP_X / 2},${y2} ${x2},${y2}`;
    items.push(svg("path", { d, class: "edge" + (e.kind === "chain" ? " chain" : ""), "marker-end": "url(#arrow)", "data-kind": e.kind }));
    if (e.kind !== "chain" && !back) {
      items.push(svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 5, "text-anchor": "middle", class: "edge-label" }, e.kind.replace("_", " ")));
    }
  }
  for (const o of m.operators) {
    const p = place.get(o.name);
    const g = svg("g", { class: "node", transform: `translate(${p.x},${p.y})`, "data-operator": o.name,
      "data-backpressure": o.backpressured_ratio.toFixed(3) });
    g.appendChild(svg("title", {}, `${o.name} (${o.vertex}), parallelism ${o.parallelism}`));
    g.appendChild(svg("rect", { width: NODE_W, height: NODE_H, rx: 7, fill: pressureColour(o.backpressured_ratio) }));
    const name = o.name.length > 22 ? o.name.slice(0, 21) + "…" : o.name;
    g.appendChild(svg("text", { x: 9, y: 18, class: "name" }, `${name} ×${o.parallelism}`));
    g.appendChild(svg("text", { x: 9, y: 36, class: "rates" }, `in ${count(o.in_rate)}/s · out ${count(o.out_rate)}/s`));
    g.appendChild(svg("text", { x: 9, y: 53, class: "load" }, `busy ${percent(o.busy_ratio)} · bp ${percent(o.backpressured_ratio)}`));
    items.push(g);
  }
  graph.replaceChildren(...items);
}

// -- line charts -----------------------------------------------------------------------------------
const CHART = { left: 60, right: 12, top: 26, bottom: 24 };
const SHOWN_CHECKPOINTS = 15;

function lineChart(el, lines, format, empty) {
  const [w, h] = el.getAttribute("viewBox").split(" ").slice(2).map(Number);
  const { left, right, top, bottom } = CHART;
  const points = lines.flatMap((l) => l.points);
  const items = [];
  if (!points.length) {
    items.push(svg("line", { x1: left, x2: w - right, y1: h - bottom, y2: h - bottom, class: "axis" }));
    items.push(svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty" }, empty));
    el.replaceChildren(...items);
    return;
  }
  const x0 = points.length ? Math.min(...points.map((p) => p[0])) : 0;
  const x1 = points.length ? Math.max(...points.map((p) => p[0]), x0 + 1) : 1;
  const yMax = Math.max(1e-9, ...points.map((p) => p[1])) * 1.1;
  const X = (t) => left + ((t - x0) / (x1 - x0)) * (w - left - right);
  const Y = (v) => h - bottom - (v / yMax) * (h - top - bottom);
  for (let i = 0; i <= 4; i += 1) {
    const v = (yMax * i) / 4;
    items.push(svg("line", { x1: left, x2: w - right, y1: Y(v), y2: Y(v), class: i ? "grid" : "axis" }));
    items.push(svg("text", { x: left - 6, y: Y(v) + 4, "text-anchor": "end" }, format(v)));
  }
  items.push(svg("text", { x: left, y: h - 6 }, clock(x0)));
  items.push(svg("text", { x: w - right, y: h - 6, "text-anchor": "end" }, clock(x1)));
  lines.forEach((l, i) => {
    items.push(svg("text", { x: left + 8 + i * 140, y: 14, style: `fill: ${l.colour}` }, "— " + l.name));
    if (l.points.length) {
      const d = l.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
      const attrs = { points: d, class: "series", stroke: l.colour, "data-series": l.name };
      if (l.dashed) attrs["stroke-dasharray"] = "6 4";
      items.push(svg("polyline", attrs));
    }
  });
  el.replaceChildren(...items);
}

function drawCharts(m) {
  const series = m.series || [];
  lineChart($("throughput-chart"), [
    { name: "into the job", colour: "#2f5fd0", points: series.map((p) => [p.at, p.in_rate]) },
    { name: "out of it", colour: "#1c9a5b", dashed: true, points: series.map((p) => [p.at, p.out_rate]) },
  ], count, "waiting for the second report");
  lineChart($("lag-chart"), [
    { name: "largest lag", colour: "#c0392b",
      points: series.filter((p) => typeof p.max_lag_s === "number").map((p) => [p.at, p.max_lag_s]) },
  ], seconds, "no event-time watermark yet (a job without event time has none)");
  const done = m.checkpoints.filter((c) => c.status === "completed");
  lineChart($("checkpoint-chart"), [
    { name: "duration", colour: "#7b4bd0", points: done.map((c) => [c.triggered_at, c.duration_s]) },
    { name: "alignment", colour: "#d08a1c", dashed: true, points: done.map((c) => [c.triggered_at, c.alignment_s]) },
  ], seconds, "no checkpoint has completed yet");
}

// -- tables ----------------------------------------------------------------------------------------
function drawOperators(m) {
  fill($("operators").tBodies[0], m.operators.map((o) => row([
    o.name, o.parallelism, count(o.records_in), count(o.in_rate), count(o.records_out), count(o.out_rate),
    percent(o.busy_ratio), percent(o.backpressured_ratio), percent(o.input_fill), watermark(o.watermark),
    seconds(o.watermark_lag_s), count(o.late_records), count(o.skipped_records), bytes(o.state_bytes),
  ], { "data-operator": o.name })));
}

function drawCheckpoints(m) {
  $("checkpoint-counts").textContent = `${m.checkpoints_completed} completed, ${m.checkpoints_aborted} aborted`;
  const rows = m.checkpoints.slice(-SHOWN_CHECKPOINTS).reverse().map((c) => row([
    c.checkpoint_id, c.status, clock(c.triggered_at), seconds(c.duration_s), seconds(c.alignment_s),
    c.status === "completed" ? bytes(c.full_bytes) : "–", c.status === "completed" ? bytes(c.delta_bytes) : "–",
    c.is_final ? "yes" : "", { text: c.reason, cls: "text" },
  ], { "data-checkpoint": c.checkpoint_id, class: c.status + (c.is_final ? " final" : "") }));
  fill($("checkpoints").tBodies[0], rows);
}

function drawRestarts(m) {
  const rows = [...m.restarts].reverse().map((r) => row([
    r.attempt, clock(r.at), { text: r.cause, cls: "text" }, r.operator || "", { text: r.record || "", cls: "text" },
  ], { "data-attempt": r.attempt }));
  fill($("restart-table").tBodies[0], rows);
  $("no-restarts").hidden = rows.length > 0;
}

// -- the page --------------------------------------------------------------------------------------
let failedPolls = 0;

function drawStatus(s) {
  $("job").textContent = s.job;
  document.title = `${s.job} · Epochal`;
  const state = $("state");
  state.textContent = s.state;
  state.dataset.state = s.state;
  $("attempt").textContent = s.attempt;
  $("restarts").textContent = s.restarts;
  $("parallelism").textContent = s.parallelism;
  $("last-checkpoint").textContent = s.last_checkpoint === null ? "none yet" : s.last_checkpoint;
  const ended = s.archived || ["finished", "failed", "cancelled"].includes(s.state);
  for (const id of ["cancel", "savepoint", "rescale"]) $(id).disabled = ended;
  if (s.archived) {  // served by `epochal history DIR`: what the job recorded last
    const note = $("history");
    note.hidden = false;
    note.textContent = `The history of run ${s.run}, kept in the job's checkpoint directory` +
      (s.summary ? `: ${s.summary}` : " (recorded while it ran: its driver may have died)");
  }
}

function drawMetrics(m) {
  if (!m || !m.operators) return;
  $("uptime").textContent = seconds(m.uptime_s);
  $("in-rate").textContent = count(m.in_rate) + "/s";
  $("out-rate").textContent = count(m.out_rate) + "/s";
  drawGraph(m);
  drawCharts(m);
  drawOperators(m);
  drawCheckpoints(m);
  drawRestarts(m);
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

async function poll() {
  try {
    const [status, metrics] = await Promise.all([getJson("/status"), getJson("/metrics.json")]);
    failedPolls = 0;
    $("connection").hidden = true;
    drawStatus(status);
    drawMetrics(metrics);
    $("updated").textContent = new Date().toLocaleTimeString();
  } catch (err) {
    failedPolls += 1;
    const box = $("connection");
    box.hidden = false;
    box.textContent = `The job's endpoint does not answer (${err.message}): the job may have ended. ` +
      "Showing what it last reported.";
  }
}

async function cancelJob() {
  const token = window.prompt("Cancel the job: the token for actions (printed when the job started)");
  if (token === null || token.trim() === "") return;
  const result = $("action-result");
  try {
    result.textContent = "Cancelling…";
    // ?wait: the answer comes once the job ended, with its final state: the endpoint then closes
    const response = await fetch("/cancel?wait=20", { method: "POST", headers: { Authorization: `Bearer ${token.trim()}` } });
    result.textContent = {
      202: "Cancelled.",
      401: "Refused: that is not the job's token.",
      409: "The job has already ended.",
    }[response.status] || `HTTP ${response.status}`;
    const body = await response.json();
    if (body.status) drawStatus(body.status);
    if (response.status === 401) poll();
  } catch (err) {
    result.textContent = `Cancel failed: ${err.message}`;
  }
}

async function command(kind, question, name) {
  const given = window.prompt(question);
  if (given === null || given.trim() === "") return;
  const token = window.prompt(`${kind}: the token for actions (printed when the job started)`);
  if (token === null || token.trim() === "") return;
  const result = $("action-result");
  try {
    result.textContent = kind === "rescale" ? "Rescaling…" : "Taking a savepoint…";
    const query = new URLSearchParams({ [name]: given.trim() });
    const response = await fetch(`/${kind}?${query}`, { method: "POST", headers: { Authorization: `Bearer ${token.trim()}` } });
    const body = await response.json();
    if (response.status === 200) {
      result.textContent = kind === "rescale" ? `Rescaled from checkpoint ${body.rescale}.` : `Savepoint at ${body.savepoint}.`;
    } else {
      result.textContent = response.status === 401 ? "Refused: that is not the job's token." : `Refused: ${body.error}`;
    }
    poll();
  } catch (err) {
    result.textContent = `${kind} failed: ${err.message}`;
  }
}

$("cancel").addEventListener("click", cancelJob);
$("savepoint").addEventListener("click", () => command("savepoint", "Savepoint into which (new or empty) directory?", "target"));
$("rescale").addEventListener("click", () => command("rescale", "New parallelism?", "parallelism"));
poll();
setInterval(() => { if (failedPolls < 30 || failedPolls % 10 === 0) poll(); else failedPolls += 1; }, POLL_MS);
