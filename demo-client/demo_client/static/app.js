// inferline demo client: the live web view. Plain JavaScript and SVG, no library.
// Reads the Server-Sent Events feed at /events: one JSON snapshot a message (the demo client's
// web_state.py says what is in it), a few times a second.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const TOTAL_COLOR = "#1d2330";
const PALETTE = ["#1f77b4", "#e8710a", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const CHART = { width: 960, height: 340, left: 68, right: 20, top: 16, bottom: 48 };
const MIN_SPAN_S = 10;

const colors = new Map(); // replica address -> its colour, kept for the page's life

function colorOf(address) {
  if (!colors.has(address)) colors.set(address, PALETTE[colors.size % PALETTE.length]);
  return colors.get(address);
}

function $(id) {
  return document.getElementById(id);
}

function fmt(value, digits = 1) {
  if (value === null || value === undefined) return "–";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function svg(name, attrs, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function html(name, attrs, text) {
  const node = document.createElement(name);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// A step of 1, 2 or 5 times a power of ten giving about `ticks` intervals over `range`.
function niceStep(range, ticks) {
  const raw = range / ticks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / magnitude;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
}

function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}

function drawChart(history) {
  const chart = $("chart");
  const { width: W, height: H, left, right, top, bottom } = CHART;
  chart.replaceChildren();
  const t = history.t;
  // The total is a wide band under the replica lines: with one replica both stay visible.
  const series = [{ kind: "total", key: "total", values: history.total, color: TOTAL_COLOR, width: 6 }];
  for (const [address, values] of Object.entries(history.replicas)) {
    series.push({ kind: "replica", key: address, values, color: colorOf(address), width: 2.5 });
  }
  const x0 = t.length ? t[0] : 0;
  const x1 = Math.max(t.length ? t[t.length - 1] : 0, x0 + MIN_SPAN_S);
  let peak = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > peak) peak = v;
  const yStep = niceStep(Math.max(peak, 1) * 1.1, 5);
  const yTop = Math.ceil((Math.max(peak, 1) * 1.1) / yStep) * yStep;
  const x = (s) => left + ((s - x0) / (x1 - x0)) * (W - left - right);
  const y = (v) => H - bottom - (v / yTop) * (H - top - bottom);

  for (let v = 0; v <= yTop + 1e-9; v += yStep) {
    chart.append(svg("line", { class: "grid", x1: left, x2: W - right, y1: y(v), y2: y(v) }));
    chart.append(svg("text", { class: "tick", x: left - 8, y: y(v) + 4, "text-anchor": "end" }, fmt(v, yStep < 1 ? 1 : 0)));
  }
  const xStep = niceStep(x1 - x0, 8);
  for (let s = Math.ceil(x0 / xStep) * xStep; s <= x1 + 1e-9; s += xStep) {
    chart.append(svg("line", { class: "grid", x1: x(s), x2: x(s), y1: top, y2: H - bottom }));
    chart.append(svg("text", { class: "tick", x: x(s), y: H - bottom + 18, "text-anchor": "middle" }, fmt(s, 0)));
  }
  chart.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: H - bottom }));
  chart.append(svg("line", { class: "axis", x1: left, x2: W - right, y1: H - bottom, y2: H - bottom }));
  chart.append(svg("text", { class: "title", x: (left + W - right) / 2, y: H - 8, "text-anchor": "middle" }, `seconds since the ${unit === "frames" ? "video" : "load"} started`));
  chart.append(svg("text", { class: "title", x: 16, y: (top + H - bottom) / 2, "text-anchor": "middle", transform: `rotate(-90 16 ${(top + H - bottom) / 2})` }, `${unit}/s`));

  if (!t.length) {
    chart.append(svg("text", { class: "empty", x: (left + W - right) / 2, y: (top + H - bottom) / 2, "text-anchor": "middle" }, "waiting for the first images…"));
  }
  // A gap in a replica's line where it was not in the cluster.
  for (const s of series) {
    let d = "";
    let pen = false;
    let points = 0;
    s.values.forEach((v, i) => {
      if (v === null) {
        pen = false;
        return;
      }
      d += `${pen ? "L" : "M"}${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
      points += 1;
    });
    const attrs = {
      class: "series",
      d: d || "M0,0",
      stroke: s.color,
      "stroke-width": s.width,
      "data-series": s.kind,
      "data-last": lastValue(s.values) ?? "",
      "data-points": points,
    };
    if (s.kind === "total") attrs["stroke-opacity"] = 0.8;
    if (s.kind === "replica") attrs["data-replica"] = s.key;
    const path = svg("path", attrs);
    path.append(svg("title", {}, s.kind === "total" ? `total ${unit}/s` : `${s.key} ${unit}/s`));
    chart.append(path);
  }
}

function drawReplicas(snapshot) {
  const { replicas, run } = snapshot;
  const body = $("replicas").tBodies[0];
  body.replaceChildren();
  const total = html("tr", { class: "total" });
  const swatch = html("span", { class: "swatch total" });
  swatch.style.background = TOTAL_COLOR;
  total.append(html("td"), html("td", {}, "total (measured by this client)"), html("td"), html("td", { class: "num" }, "100 %"), html("td", { class: "num" }, fmt(snapshot.images_per_s)));
  total.cells[0].append(swatch);
  body.append(total);
  for (const line of replicas.lines) {
    const state = line.state === "healthy" ? "healthy" : line.state === "draining" ? "draining" : "failing";
    const row = html("tr", { class: state, "data-replica": line.address });
    const mark = html("span", { class: "swatch" });
    mark.style.background = colorOf(line.address);
    const name = line.hostname ? `${line.address} (${line.hostname})` : line.address;
    row.append(html("td"), html("td", {}, name), html("td", {}, line.state), html("td", { class: "num" }, `${fmt(line.share * 100)} %`), html("td", { class: "num" }, fmt(line.images_per_s)));
    row.cells[0].append(mark);
    body.append(row);
  }
  const note = $("replica-note");
  if (replicas.available) {
    note.className = "note";
    note.textContent =
      `A replica's ${unit}/s is its share of Triton requests (Envoy's admin ${run.envoy_admin}, ` +
      `cluster ${run.cluster}, last ${run.window_s} s) times the ${unit}/s measured here; with ` +
      "the batcher in front of Triton a request is a batch of images.";
  } else {
    note.className = "note unavailable";
    note.textContent = `Per-replica lines unavailable: ${replicas.note || "no Envoy admin"}. Everything else is measured by this client.`;
  }
}

function drawErrors(errors) {
  $("errors-total").textContent = errors.total.toLocaleString("en-US");
  $("errors-total").parentElement.classList.toggle("some", errors.total > 0);
  const body = $("errors").tBodies[0];
  body.replaceChildren();
  for (const [code, n] of Object.entries(errors.by_code)) {
    const row = html("tr", { "data-code": code });
    row.append(html("td", {}, code), html("td", { class: "n" }, n.toLocaleString("en-US")));
    body.append(row);
  }
}

let recentKey = "";

function drawRecent(recent) {
  const key = recent.map((r) => `${r.elapsed_s}:${r.image}`).join(",");
  if (key === recentKey) return;
  recentKey = key;
  const list = $("recent");
  list.replaceChildren();
  if (!recent.length) {
    list.append(html("li", { class: "placeholder" }, "the pipeline's labels appear here as the load runs"));
    return;
  }
  for (const r of recent) {
    const item = html("li", { title: `${r.name}: ${r.label} (${r.score})` });
    item.append(
      html("img", { src: `/images/${r.image}`, alt: r.name }),
      html("div", { class: "label" }, r.label || "(no label)"),
      html("div", { class: "score" }, `score ${fmt(r.score, 3)}`),
    );
    list.append(item);
  }
}

let framesKey = "";
let unit = "images"; // "frames" for a video streamed in chunks

function drawVideo(video) {
  $("video-section").hidden = !video;
  $("recent-section").hidden = Boolean(video);
  if (!video) return;
  const mib = (n) => (n / 1048576).toFixed(1);
  const share = video.total_bytes ? Math.round((100 * video.bytes_sent) / video.total_bytes) : 0;
  $("video-progress").textContent =
    `${video.file}: ${mib(video.bytes_sent)} of ${mib(video.total_bytes)} MiB sent (${share} %), ` +
    `${video.frames.length ? "frames answered while the upload goes on" : "waiting for the first frame"}`;
  const key = video.frames.map((f) => f.index).join(",");
  if (key === framesKey) return;
  framesKey = key;
  const body = $("frames").querySelector("tbody");
  body.replaceChildren();
  for (const f of video.frames) {
    const row = html("tr", { "data-frame": f.index });
    row.append(
      html("td", { class: "num" }, f.index),
      html("td", { class: "num" }, `${fmt(f.timestamp_s, 2)} s`),
      html("td", {}, f.label || "(no label)"),
      html("td", { class: "num" }, fmt(f.score, 3)),
      html("td", { class: "num" }, `${fmt(f.elapsed_s, 2)} s`),
    );
    body.append(row);
  }
}

// Where the time went: the timer's requests as stacked bars of each hop's own time (the
// segments come in `timing.hops` order; widths are set through the CSSOM, which the page's
// Content-Security-Policy allows, unlike style attributes).
const SEGMENT_COLORS = ["#1f77b4", "#e8710a", "#9467bd", "#8c564b", "#2ca02c", "#d62728", "#b8c2cc"];
let timingKey = "";

function segmentColor(hops, name) {
  return SEGMENT_COLORS[hops.indexOf(name) % SEGMENT_COLORS.length];
}

function breakdown(timed, hops) {
  const parts = hops.filter((name) => name in timed.segments).map((name) => `${name} ${fmt(timed.segments[name])} ms`);
  return `${fmt(timed.total_ms)} ms in all, ${fmt(timed.elapsed_s)} s into the run: ${parts.join(", ")}`;
}

// One request's row: when, the stacked bar (its length in proportion to `scaleMs`), its total.
function timingRow(tag, timed, hops, scaleMs) {
  const row = html(tag, { class: "bar-row", "data-trace-id": timed.trace_id, title: breakdown(timed, hops) });
  const track = html("div", { class: "track" });
  const bar = html("div", { class: "bar" });
  const sum = hops.reduce((total, name) => total + (timed.segments[name] || 0), 0);
  const span = Math.max(timed.total_ms, sum, 1e-9);
  bar.style.width = `${Math.min(100, (100 * span) / scaleMs).toFixed(2)}%`;
  for (const name of hops) {
    const ms = timed.segments[name];
    if (!(ms > 0)) continue;
    const segment = html("div", { class: "segment", "data-segment": name, title: `${name}: ${fmt(ms)} ms of ${fmt(timed.total_ms)} ms` });
    segment.style.width = `${((100 * ms) / span).toFixed(2)}%`;
    segment.style.background = segmentColor(hops, name);
    bar.append(segment);
  }
  track.append(bar);
  row.append(html("span", { class: "when" }, `${fmt(timed.elapsed_s)} s`), track, html("span", { class: "total" }, `${fmt(timed.total_ms)} ms`));
  return row;
}

function drawTiming(timing) {
  $("timing-section").hidden = !timing;
  if (!timing) return;
  const { hops, recent, slowest } = timing;
  $("timing-every").textContent = fmt(timing.every_s);
  const notes = [];
  if (timing.failed) notes.push(`${timing.failed.toLocaleString("en-US")} timed request${timing.failed === 1 ? "" : "s"} failed`);
  if (timing.note) notes.push(timing.note);
  if (!timing.trace_view) notes.push("no trace view given (--trace-view): trace ids without links");
  $("timing-note").textContent = notes.join("; ");
  const key = JSON.stringify([recent.map((p) => p.trace_id), slowest.map((p) => p.trace_id)]);
  if (key === timingKey) return;
  timingKey = key;
  const legend = $("timing-legend");
  legend.replaceChildren();
  for (const name of hops) {
    const item = html("li", { "data-segment": name, title: timing.about[name] || "" });
    const swatch = html("span", { class: "swatch" });
    swatch.style.background = segmentColor(hops, name);
    item.append(swatch, document.createTextNode(name));
    legend.append(item);
  }
  const scaleMs = Math.max(1e-9, ...recent.map((p) => p.total_ms), ...slowest.map((p) => p.total_ms));
  const bars = $("timing-bars");
  bars.replaceChildren();
  if (!recent.length) bars.append(html("p", { class: "placeholder" }, "the timer's requests appear here as the load runs"));
  for (const timed of recent) bars.append(timingRow("div", timed, hops, scaleMs));
  const list = $("slowest");
  list.replaceChildren();
  if (!slowest.length) list.append(html("li", { class: "placeholder" }, "none yet"));
  for (const timed of slowest) {
    const row = timingRow("li", timed, hops, scaleMs);
    const trace = html("span", { class: "trace" });
    const id = html("code", {}, timed.trace_id);
    if (timed.trace_url) {
      const link = html("a", { href: timed.trace_url, target: "_blank", rel: "noopener", title: "this request's trace" });
      link.append(document.createTextNode("trace "), id);
      trace.append(link);
    } else {
      trace.append(document.createTextNode("trace "), id);
    }
    row.append(trace);
    list.append(row);
  }
}

function describeRun(run) {
  if (run.video) return `${run.target} · model ${run.model} · video ${run.video}, chunks of ${run.chunk_bytes} bytes`;
  const parts = [`${run.target}`, `model ${run.model}`, `concurrency ${run.concurrency} × batch ${run.batch}`];
  if (run.rate) parts.push(`open loop at ${run.rate}/s`);
  if (run.duration_s) parts.push(`${run.duration_s} s`);
  if (run.count) parts.push(`${run.count} requests`);
  return parts.join(" · ");
}

function setPhase(text, kind) {
  const phase = $("phase");
  phase.textContent = text;
  phase.className = `phase ${kind}`;
}

function render(snapshot) {
  const { phase, run } = snapshot;
  if (phase === "waiting") setPhase(snapshot.message || "waiting", "waiting");
  else if (phase === "running") setPhase("running", "running");
  else setPhase(snapshot.message || "finished", "finished");
  $("run").textContent = describeRun(run);
  $("rate-now").textContent = fmt(snapshot.images_per_s);
  $("window").textContent = `(last ${run.window_s} s)`;
  $("rate-avg").textContent = fmt(snapshot.average_images_per_s);
  $("p50").textContent = fmt(snapshot.latency_ms.p50);
  $("p95").textContent = fmt(snapshot.latency_ms.p95);
  $("p99").textContent = fmt(snapshot.latency_ms.p99);
  unit = snapshot.video ? "frames" : "images";
  for (const span of document.querySelectorAll(".unit")) span.textContent = unit;
  if (snapshot.video) $("latency-label").textContent = "p50 / p95 / p99 time between frames' answers, ms";
  $("images").textContent = snapshot.images.toLocaleString("en-US");
  $("counts").textContent = snapshot.video
    ? `frames classified, ${fmt(snapshot.elapsed_s, 0)} s`
    : `images in ${snapshot.requests.toLocaleString("en-US")} requests, ${fmt(snapshot.elapsed_s, 0)} s`;
  drawErrors(snapshot.errors);
  drawChart(snapshot.history);
  drawReplicas(snapshot);
  drawRecent(snapshot.recent);
  drawVideo(snapshot.video);
  drawTiming(snapshot.timing);
  document.title = `${fmt(snapshot.images_per_s)} ${unit}/s · inferline demo`;
}

function connect() {
  const source = new EventSource("/events");
  let finished = false;
  source.onmessage = (event) => {
    const snapshot = JSON.parse(event.data);
    render(snapshot);
    if (snapshot.phase === "finished") {
      finished = true;
      source.close(); // the demo client stops serving after the run
    }
  };
  source.onerror = () => {
    if (!finished) setPhase("connection lost: retrying…", "lost");
  };
}

connect();
