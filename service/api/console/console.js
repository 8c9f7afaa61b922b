// PrivFit console: read-only views of one site's datasets, jobs, models and studies; with the
// admin key, which reaches no site's data, the list of sites only.
// The key stays in sessionStorage (this tab only); every request goes to this origin.
"use strict";

const KEY = "privfit.key";
const SVG = "http://www.w3.org/2000/svg";
const UNFINISHED = new Set(["queued", "running"]);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child);
  return node;
}

function fmt(x) {
  return x === null || x === undefined ? "—" : Number(x).toFixed(4).replace(/\.?0+$/, "");
}

function status(text, isError) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

async function api(path) {
  const response = await fetch(path, {
    headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY), Accept: "application/json" },
  });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(response.status + " " + detail);
  }
  return response.json();
}

function table(headings, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, ...headings.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))));
}

// A bar: the spent share of the total ε in red, the rest in green.
function gauge(spent, total) {
  const width = 240, used = total > 0 ? Math.min(1, spent / total) * width : 0;
  return svg("svg", { class: "gauge", width, height: 16, role: "img",
                      "aria-label": `ε spent ${fmt(spent)} of ${fmt(total)}` },
    svg("rect", { class: "free", x: 0, y: 0, width, height: 16 }),
    svg("rect", { class: "used", x: 0, y: 0, width: used, height: 16 }));
}

// Cumulative ε charged (refunds excluded) over time, against the total (dashed line).
function spendChart(charges, total) {
  const width = 320, height = 90, pad = 4;
  const kept = charges.filter((c) => c.state !== "refunded" && !c.refunded_at)
    .sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  let sum = 0;
  const points = [[0, 0]].concat(kept.map((c, i) => [i + 1, (sum += c.epsilon)]));
  const top = Math.max(total, sum) || 1, steps = Math.max(points.length - 1, 1);
  const x = (i) => pad + (i / steps) * (width - 2 * pad);
  const y = (v) => height - pad - (v / top) * (height - 2 * pad);
  return svg("svg", { class: "spend", width, height, role: "img",
                      "aria-label": `ε spent over ${kept.length} charges` },
    svg("line", { x1: pad, x2: width - pad, y1: y(total), y2: y(total) }),
    svg("polyline", { points: points.map(([i, v]) => `${x(i)},${y(v)}`).join(" ") }));
}

async function showDatasets() {
  const list = await api("/v1/datasets?limit=200");
  const box = document.getElementById("datasets");
  const cards = [];
  for (const d of list.items) {
    const b = await api(`/v1/datasets/${encodeURIComponent(d.id)}/budget`);
    cards.push(el("div", { class: "card dataset", "data-id": d.id },
      el("strong", { class: "name" }, d.name), " ", el("code", {}, d.id),
      el("div", {}, `${d.n_rows} rows, ${d.n_features} features`),
      el("div", { class: "budget" },
        "ε spent ", el("span", { class: "eps-spent" }, fmt(b.epsilon_spent)),
        " of ", el("span", { class: "eps-total" }, fmt(b.epsilon_total)),
        ", remaining ", el("span", { class: "eps-remaining" }, fmt(b.epsilon_remaining)),
        "; δ spent ", fmt(b.delta_spent), " of ", fmt(b.delta_total)),
      gauge(b.epsilon_spent, b.epsilon_total),
      el("div", {}, spendChart(b.charges, b.epsilon_total))));
  }
  box.replaceChildren(...(cards.length ? cards : [el("p", {}, "No datasets.")]));
}

async function showJobs() {
  const list = await api("/v1/jobs?limit=200");
  const rows = list.items.map((j) => [
    el("code", {}, j.id), j.kind, el("span", { class: "job-status" }, j.status),
    el("progress", { max: 1, value: j.progress ?? 0 }),
    j.model_id ? el("code", {}, j.model_id) : "—",
  ]);
  document.getElementById("jobs").replaceChildren(
    rows.length ? table(["Job", "Kind", "Status", "Progress", "Model"], rows) : el("p", {}, "No jobs."));
  return list.items.filter((j) => UNFINISHED.has(j.status));
}

async function showModels() {
  const list = await api("/v1/models?limit=200");
  const rows = [];
  for (const m of list.items) {
    const full = await api(`/v1/models/${encodeURIComponent(m.id)}`);
    rows.push([el("code", { class: "model-id" }, m.id), m.mechanism ?? m.source,
      `ε = ${fmt(m.epsilon)}, δ = ${fmt(m.delta)}` + (m.verified === false ? " (claimed)" : ""),
      el("details", {}, el("summary", {}, "privacy receipt"),
        el("pre", { class: "receipt" }, JSON.stringify(full.privacy, null, 2)))]);
  }
  document.getElementById("models").replaceChildren(
    rows.length ? table(["Model", "Mechanism", "Guarantee", "Receipt"], rows) : el("p", {}, "No models."));
}

async function showStudies() {
  const list = await api("/v1/studies?limit=200");
  const rows = list.items.map((s) => [el("code", {}, s.id), s.name,
    (s.members || []).map((m) => `${m.site_id} (${m.role})`).join(", "),
    String((s.results || []).length)]);
  document.getElementById("studies").replaceChildren(
    rows.length ? table(["Study", "Name", "Members", "Results"], rows) : el("p", {}, "No studies."));
}

async function showSites() {
  const list = await api("/v1/sites?limit=200");
  const rows = list.items.map((s) => [el("code", {}, s.id), el("bdi", { class: "site-name" }, s.name),
    s.created_at, s.deactivated_at ? `deactivated ${s.deactivated_at}` : "active"]);
  document.getElementById("sites").replaceChildren(
    rows.length ? table(["Site", "Name", "Created", "State"], rows) : el("p", {}, "No sites."));
}

// The admin sees the sites section only; a site sees its data sections only.
function showRole(isAdmin) {
  document.getElementById("sites-section").hidden = !isAdmin;
  for (const section of document.querySelectorAll(".site-data")) section.hidden = isAdmin;
}

let generation = 0;

async function refresh() {
  const mine = ++generation;
  try {
    const isAdmin = (await api("/v1/sites/whoami")).role === "admin";
    showRole(isAdmin);
    if (isAdmin) {
      await showSites();
      status(`Updated ${new Date().toLocaleTimeString()}`, false);
      return;
    }
    const [, running] = await Promise.all([showDatasets(), showJobs(), showModels(), showStudies()]);
    status(`Updated ${new Date().toLocaleTimeString()}`, false);
    if (running.length && mine === generation) {
      // Long poll the first unfinished job: the answer comes when it ends (or after 20 s).
      await api(`/v1/jobs/${encodeURIComponent(running[0].id)}?wait=20`);
      if (mine === generation) refresh();
    }
  } catch (error) {
    status(String(error.message || error), true);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("key");
    if (input.value.trim()) sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    refresh();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    generation++;
    for (const id of ["sites", "datasets", "jobs", "models", "studies"]) document.getElementById(id).replaceChildren();
    status("Key forgotten.", false);
  });
  if (sessionStorage.getItem(KEY)) refresh();
});
