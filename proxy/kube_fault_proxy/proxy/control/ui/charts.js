// Plain SVG line charts for the dashboard: no library, no network.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function niceCeiling(value) {
  if (!(value > 0)) return 1;
  const magnitude = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (value <= step * magnitude) return step * magnitude;
  }
  return 10 * magnitude;
}

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function formatValue(v) {
  if (v >= 100 || Number.isInteger(v)) return String(Math.round(v));
  return v.toFixed(1);
}

// points: [{t: seconds, values: {key: number}}]; series: [{key, label, cls}]; windowSeconds: x span.
function drawChart(svg, points, series, windowSeconds) {
  const W = 600, H = 150, left = 44, right = 8, top = 8, bottom = 18;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const now = points.length ? points[points.length - 1].t : 0;
  let max = 0;
  for (const p of points) for (const s of series) max = Math.max(max, p.values[s.key] || 0);
  const yMax = niceCeiling(max);
  const x = (t) => left + (W - left - right) * (1 - (now - t) / windowSeconds);
  const y = (v) => top + (H - top - bottom) * (1 - v / yMax);
  for (const frac of [0, 0.5, 1]) {
    const yy = y(yMax * frac);
    svg.appendChild(svgEl("line", {x1: left, x2: W - right, y1: yy, y2: yy, class: "grid"}));
    svg.appendChild(svgEl("text", {x: left - 4, y: yy + 4, class: "axis", "text-anchor": "end"},
      formatValue(yMax * frac)));
  }
  svg.appendChild(svgEl("text", {x: left, y: H - 4, class: "axis"}, `-${windowSeconds}s`));
  svg.appendChild(svgEl("text", {x: W - right, y: H - 4, class: "axis", "text-anchor": "end"}, "now"));
  for (const s of series) {
    const coords = points.filter((p) => now - p.t <= windowSeconds)
      .map((p) => `${x(p.t).toFixed(1)},${y(p.values[s.key] || 0).toFixed(1)}`);
    if (coords.length) svg.appendChild(svgEl("polyline", {points: coords.join(" "), class: `line ${s.cls}`}));
  }
  const legend = document.querySelector(`.legend[data-chart="${svg.id}"]`);
  if (legend) {
    legend.textContent = "";
    const last = points.length ? points[points.length - 1].values : {};
    for (const s of series) {
      const item = document.createElement("span");
      item.className = `key ${s.cls}`;
      item.dataset.series = s.key;
      item.textContent = `${s.label} ${formatValue(last[s.key] || 0)}`;
      legend.appendChild(item);
    }
  }
}

window.kfpCharts = {drawChart, niceCeiling};
