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

// ε and δ as they are: twelve significant digits (the ledger counts ε in units of 1e-9), in
// scientific notation below 0.001 (a δ of 1e-7 reads "1e-7", never "0"). Only 0 reads "0".
function fmt(x) {
  if (x === null || x === undefined) return "—";
  const v = Number(x);
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return "0";
  const p = Number(v.toPrecision(12));
  return Math.abs(p) < 1e-3 || Math.abs(p) >= 1e6 ? p.toExponential() : String(p);
}

// Characters that reorder displayed text (Unicode bidi embeddings, overrides, isolates, marks).
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

// A name chosen by someone else (site, dataset, study), shown inert: as text (never HTML),
// isolated in a <bdi> so it cannot reorder what surrounds it, and with every bidi control
// shown as its code point ([U+202E]) so it cannot disguise itself either.
function inertName(text, cls) {
  return inert(text, cls ? `name ${cls}` : "name");
}

// The same for a value the site declared in a spec (a label column, a class): class "value".
function inertValue(text, cls) {
  return inert(text, cls ? `value ${cls}` : "value");
}

function inert(text, cls) {
  const shown = String(text ?? "").replace(BIDI_CONTROLS,
    (ch) => `[U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}]`);
  return el("bdi", { class: cls, dir: "auto" }, shown);
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

// A weight or a metric, compactly: four significant digits (scientific notation outside
// [0.001, 1e6)); only 0 reads "0".
function num(x) {
  if (x === null || x === undefined) return "—";
  const v = Number(x);
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return "0";
  const p = Number(v.toPrecision(4));
  return Math.abs(p) < 1e-3 || Math.abs(p) >= 1e6 ? p.toExponential() : String(p);
}

const TASK_NAMES = { binary: "binary", multiclass: "multi-class", regression: "regression" };

// What a label holds, from a dataset spec's or a model's label and the task the API states:
// binary (positive, and negative when declared), the declared classes in their public order
// (class k is the k-th; an index starts at 0 as in the model's rows and scores), or the
// public bounds of a numeric label. Class names and the column are the site's: shown inert.
function labelInfo(label, task, clippedRows) {
  const kind = TASK_NAMES[task] || "binary";
  const parts = [el("span", { class: "task" }, kind)];
  if (label && label.column !== undefined) {
    parts.push(" label ", inertValue(label.column, "label-column"));
  }
  if (task === "multiclass" && label && Array.isArray(label.classes)) {
    parts.push(`, ${label.classes.length} classes in order: `,
      el("ol", { class: "label-classes", start: "0" },
        ...label.classes.map((c, k) => el("li", { class: "label-class" },
          el("span", { class: "class-index" }, String(k)), " ", inertValue(c)))));
  } else if (task === "regression" && label) {
    parts.push(", a number within ",
      el("span", { class: "label-bounds" }, `[${fmt(label.lower)}, ${fmt(label.upper)}]`));
    if (clippedRows !== undefined && clippedRows !== null) {
      parts.push("; ", el("span", { class: "label-clipped" }, String(clippedRows)),
        " rows clipped to the bounds at upload");
    }
  } else if (label && label.positive !== undefined) {
    parts.push(", positive ", inertValue(label.positive, "label-positive"));
    if (label.negative !== undefined && label.negative !== null) {
      parts.push(", negative ", inertValue(label.negative, "label-negative"));
    }
  }
  return el("div", { class: "label-info", "data-task": kind }, ...parts);
}

// The name of the design-matrix column j (by index when the model's width differs).
function featureName(names, j) {
  return names && j < names.length ? names[j] : `column ${j}`;
}

// A model's weights, by task, in a folded table:
// * binary: one weight per design column (score wᵀx; positive when > 0);
// * multi-class: a row per design column and a column per declared class (coef row k is
//   class k's weights; the predicted class is the highest score wₖᵀx);
// * regression: the weight w in the mapped [−1, 1] units and β = w·(U − L)/2 in the label's
//   units. The prediction is L + (clip(wᵀx, −1, 1) + 1)/2 · (U − L), which is exactly
//   clip((L + U)/2 + Σⱼ βⱼxⱼ, L, U), x the preprocessed row (intercept column included).
function weights(full) {
  const body = full.model || {}, names = full.feature_names || [];
  if (full.task === "multiclass" && body.kind === "multiclass" && Array.isArray(body.coef)) {
    const classes = (full.label && full.label.classes) || body.coef.map((_, k) => `class ${k}`);
    const d = Math.max(...body.coef.map((row) => row.length));
    const rows = [];
    for (let j = 0; j < d; j++) {
      rows.push([inertValue(featureName(names, j)), ...body.coef.map((row) => num(row[j]))]);
    }
    return el("details", { class: "weights multiclass-weights" },
      el("summary", {}, `${body.coef.length} × ${d} weights (a column per class)`),
      table(["Feature", ...classes.map((c) => inertValue(c, "weights-class"))], rows));
  }
  if (!Array.isArray(full.coefficients)) {
    // a stacked model (a study's feature aggregation) is not one linear map: GET the model
    return el("span", { class: "weights" },
      body.kind ? `${body.kind} model: not one linear map (its JSON is in GET /v1/models/{id})`
        : "—");
  }
  if (full.task === "regression" && full.label) {
    const { lower, upper } = full.label, half = (upper - lower) / 2;
    return el("details", { class: "weights regression-weights" },
      el("summary", {}, `${full.coefficients.length} weights, in label units`),
      el("p", { class: "weights-mapping" },
        `value = clip(${fmt((lower + upper) / 2)} + Σ βⱼ·xⱼ, ${fmt(lower)}, ${fmt(upper)}); `,
        `βⱼ = wⱼ·(${fmt(upper)} − ${fmt(lower)})/2, x the preprocessed row`),
      table(["Feature", "w (mapped [−1, 1] units)", "β (label units)"],
        full.coefficients.map((c) => [inertValue(c.feature), num(c.weight),
          el("span", { class: "weight-label-units" }, num(c.weight * half))])));
  }
  return el("details", { class: "weights binary-weights" },
    el("summary", {}, `${full.coefficients.length} weights`),
    table(["Feature", "Weight"],
      full.coefficients.map((c) => [inertValue(c.feature), num(c.weight)])));
}

// A bar: the spent share of the total ε in red, the rest in green.
function gauge(spent, total) {
  const width = 240, used = total > 0 ? Math.min(1, spent / total) * width : 0;
  return svg("svg", { class: "gauge", width, height: 16, role: "img",
                      "aria-label": `ε spent ${fmt(spent)} of ${fmt(total)}` },
    svg("rect", { class: "free", x: 0, y: 0, width, height: 16 }),
    svg("rect", { class: "used", x: 0, y: 0, width: used, height: 16 }));
}

// Cumulative ε charged (refunds excluded) against the charge number, oldest first, with the
// total as a dashed line; both axes are labelled and ticked (0 and the top of the scale).
function spendChart(charges, total) {
  const width = 360, height = 150, left = 46, right = 8, top = 10, bottom = 34;
  const kept = charges.filter((c) => c.state !== "refunded" && !c.refunded_at)
    .sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  let sum = 0;
  const points = [[0, 0]].concat(kept.map((c, i) => [i + 1, (sum += c.epsilon)]));
  const scale = Math.max(total, sum) || 1, steps = Math.max(points.length - 1, 1);
  const x = (i) => left + (i / steps) * (width - left - right);
  const y = (v) => height - bottom - (v / scale) * (height - top - bottom);
  const base = height - bottom;
  return svg("svg", { class: "spend", width, height, role: "img",
                      "aria-label": `ε spent over ${kept.length} charges: ${fmt(sum)} of ${fmt(total)}` },
    svg("line", { class: "axis", x1: left, x2: width - right, y1: base, y2: base }),
    svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: base }),
    svg("line", { class: "cap", x1: left, x2: width - right, y1: y(total), y2: y(total) }),
    svg("polyline", { points: points.map(([i, v]) => `${x(i)},${y(v)}`).join(" ") }),
    svg("text", { class: "tick y-tick", x: left - 4, y: base, "text-anchor": "end" }, "0"),
    svg("text", { class: "tick y-tick", x: left - 4, y: y(scale) + 8, "text-anchor": "end" }, fmt(scale)),
    svg("text", { class: "tick x-tick", x: left, y: base + 12, "text-anchor": "middle" }, "0"),
    ...(kept.length ? [svg("text", { class: "tick x-tick", x: x(steps), y: base + 12,
                                     "text-anchor": "middle" }, String(kept.length))] : []),
    svg("text", { class: "axis-label x-label", x: (left + width - right) / 2, y: height - 4,
                  "text-anchor": "middle" }, "charges, oldest first"),
    svg("text", { class: "axis-label y-label", x: 0, y: 0, "text-anchor": "middle",
                  transform: `translate(12 ${(top + base) / 2}) rotate(-90)` }, "ε spent (cumulative)"));
}

async function showDatasets() {
  const list = await api("/v1/datasets?limit=200");
  const box = document.getElementById("datasets");
  const cards = [];
  for (const d of list.items) {
    const b = await api(`/v1/datasets/${encodeURIComponent(d.id)}/budget`);
    cards.push(el("div", { class: "card dataset", "data-id": d.id },
      el("strong", {}, inertName(d.name)), " ", el("code", { class: "dataset-id" }, d.id),
      el("div", {}, `${d.n_rows} rows, ${d.n_features} features`),
      labelInfo(d.spec && d.spec.label, d.task, d.ingest && d.ingest.label_clipped_rows),
      el("div", { class: "budget" },
        "ε spent ", el("span", { class: "eps-spent" }, fmt(b.epsilon_spent)),
        " of ", el("span", { class: "eps-total" }, fmt(b.epsilon_total)),
        ", remaining ", el("span", { class: "eps-remaining" }, fmt(b.epsilon_remaining)),
        "; δ spent ", el("span", { class: "delta-spent" }, fmt(b.delta_spent)),
        " of ", el("span", { class: "delta-total" }, fmt(b.delta_total)),
        ", remaining ", el("span", { class: "delta-remaining" }, fmt(b.delta_remaining))),
      gauge(b.epsilon_spent, b.epsilon_total),
      el("div", {}, spendChart(b.charges, b.epsilon_total))));
  }
  box.replaceChildren(...(cards.length ? cards : [el("p", {}, "No datasets.")]));
}

// Warnings fixed at submission (e.g. below_majority_baseline), as text: code and message.
function warnings(list) {
  if (!list || !list.length) return "—";
  return el("ul", { class: "warnings" }, ...list.map((w) => el("li", { class: "warning" },
    el("strong", { class: "warning-code" }, String(w.code ?? "warning")), ": ",
    el("span", { class: "warning-message" }, String(w.message ?? "")))));
}

// The expected accuracy band next to the majority-class baseline, with auto's choice.
function expectation(params) {
  const e = params && params.expected_accuracy;
  if (!e) return "—";
  if (e.metric === "rmse") {  // a numeric label: RMSE against predicting the mean
    return el("span", {}, el("span", { class: "expected-accuracy" },
      `RMSE ${Number(e.mean).toPrecision(4)} [${Number(e.p10).toPrecision(4)}, `
      + `${Number(e.p90).toPrecision(4)}]`),
    " vs mean ", el("span", { class: "majority-baseline" },
      Number(e.mean_baseline_rmse).toPrecision(4)));
  }
  const base = e.majority_baseline === null || e.majority_baseline === undefined
    ? "unknown" : Number(e.majority_baseline).toFixed(3);
  const parts = [el("span", { class: "expected-accuracy" },
    `${Number(e.mean).toFixed(3)} [${Number(e.p10).toFixed(3)}, ${Number(e.p90).toFixed(3)}]`),
    " vs majority ", el("span", { class: "majority-baseline" }, base)];
  if (params.requested_mechanism === "auto") {
    parts.push(el("div", { class: "auto-choice" }, `auto chose ${params.mechanism}`,
      ` (λ = ${fmt(params.regularization)})`));
  }
  return el("span", {}, ...parts);
}

async function showJobs() {
  const list = await api("/v1/jobs?limit=200");
  const rows = list.items.map((j) => [
    el("code", {}, j.id), j.kind, el("span", { class: "job-status" }, j.status),
    el("progress", { max: 1, value: j.progress ?? 0 }),
    j.model_id ? el("code", {}, j.model_id) : "—",
    expectation(j.params),
    el("div", { class: "job-warnings" }, warnings(j.warnings)),
  ]);
  document.getElementById("jobs").replaceChildren(
    rows.length ? table(["Job", "Kind", "Status", "Progress", "Model",
                         "Expected accuracy", "Warnings"], rows) : el("p", {}, "No jobs."));
  return list.items.filter((j) => UNFINISHED.has(j.status));
}

function guarantee(epsilon, delta) {
  return el("span", { class: "guarantee" }, "ε = ", el("span", { class: "model-eps" }, fmt(epsilon)),
    ", δ = ", el("span", { class: "model-delta" }, fmt(delta)));
}

// A metric with its interval, to four significant digits (an unbounded end reads ±∞).
function metric(m) {
  return m ? `${num(m.estimate)} ${interval(m, num)}` : "—";
}

// An interval end that the release leaves unbounded (null) reads −∞ or ∞.
function interval(m, digits) {
  const [lo, hi] = (m && m.interval) || [];
  const end = (v, inf) => (v === null || v === undefined ? inf : digits(v));
  return `[${end(lo, "−∞")}, ${end(hi, "∞")}]`;
}

function estimate(m) {
  return m ? el("span", { class: "estimate" }, metric(m)) : "—";
}

// A multi-class evaluation: the noisy K × K confusion matrix (rows the true class, columns
// the class of highest score; the counts carry discrete Laplace noise, so one may be
// negative), then each class's precision, recall and F1 with their intervals.
function multiclassEvaluation(r) {
  const classes = r.classes || [], counts = (r.confusion_matrix && r.confusion_matrix.counts) || [];
  const matrix = el("table", { class: "confusion-matrix" },
    el("thead", {}, el("tr", {}, el("th", {}, "true ╲ predicted"),
      ...classes.map((c) => el("th", { class: "cm-predicted" }, inertValue(c))))),
    el("tbody", {}, ...counts.map((row, k) => el("tr", {},
      el("th", { class: "cm-true" }, inertValue(classes[k])),
      ...row.map((v, j) => el("td", { class: k === j ? "cm-count cm-diagonal" : "cm-count" },
        String(v)))))));
  const perClass = table(["Class", "Precision", "Recall", "F1"],
    (r.per_class || []).map((p) => [inertValue(p.class), estimate(p.precision),
      estimate(p.recall), estimate(p.f1)]));
  perClass.classList.add("metrics", "per-class");
  return el("details", { class: "evaluation-details multiclass-evaluation", open: "" },
    el("summary", {}, `${classes.length} × ${classes.length} confusion matrix (noisy counts, `,
      `${r.n ?? "?"} rows) and per-class metrics`), matrix, perClass);
}

// A regression evaluation: RMSE and MAE in the label's units, R², each with its interval.
function regressionEvaluation(r) {
  const m = r.metrics || {}, b = r.label_bounds || {};
  const rows = [["RMSE", estimate(m.rmse), "label units"], ["MAE", estimate(m.mae), "label units"],
    ["R²", estimate(m.r2), "share of the label's variance explained"]];
  const body = table(["Metric", "Estimate [interval]", "Units"], rows);
  body.classList.add("metrics", "regression-metrics");
  return el("div", { class: "evaluation-details regression-evaluation" }, body,
    el("div", { class: "evaluation-note" },
      `${r.n ?? "?"} rows; label bounds [${fmt(b.lower)}, ${fmt(b.upper)}]`));
}

function evaluationDetails(r) {
  if (r.task === "multiclass") return multiclassEvaluation(r);
  if (r.task === "regression") return regressionEvaluation(r);
  return null;
}

async function showModels() {
  const list = await api("/v1/models?limit=200");
  const rows = [], evaluations = [];
  for (const m of list.items) {
    const full = await api(`/v1/models/${encodeURIComponent(m.id)}`);
    rows.push([el("code", { class: "model-id" }, m.id), m.mechanism ?? m.source,
      labelInfo(full.label, full.task), weights(full),
      el("span", {}, guarantee(m.epsilon, m.delta), m.verified === false ? " (claimed)" : ""),
      el("div", { class: "model-warnings" }, warnings(full.privacy && full.privacy.warnings)),
      el("details", {}, el("summary", {}, "privacy receipt"),
        el("pre", { class: "receipt" }, JSON.stringify(full.privacy, null, 2)))]);
    const evals = await api(`/v1/models/${encodeURIComponent(m.id)}/evaluations?limit=100`);
    evaluations.push(...evals.items);
  }
  document.getElementById("models").replaceChildren(
    rows.length ? table(["Model", "Mechanism", "Predicts", "Weights", "Guarantee", "Warnings",
                           "Receipt"], rows)
      : el("p", {}, "No models."));
  // One row per evaluation; a multi-class or regression release gets a full-width row of
  // its own below it (the confusion matrix and per-class metrics, or the error metrics).
  const headings = ["Evaluation", "Model", "Dataset", "ε", "Task", "Accuracy [interval]",
    "F1 [interval]", "AUC"];
  const evalRows = evaluations.flatMap((e) => {
    const r = e.result || {}, metrics = r.metrics || {};
    const f1 = metrics.f1 ? metric(metrics.f1)
      : metrics.macro_f1 ? `${metric(metrics.macro_f1)} (macro)` : "—";
    const cells = [el("code", { class: "evaluation-id" }, e.id), el("code", {}, e.model_id),
      el("code", {}, e.dataset_id), el("span", { class: "evaluation-eps" }, fmt(e.epsilon)),
      el("span", { class: "evaluation-task" }, TASK_NAMES[r.task] || "binary"),
      el("span", { class: "evaluation-accuracy" }, metric(metrics.accuracy)),
      el("span", { class: "evaluation-f1" }, f1),
      el("span", { class: "evaluation-auc" }, fmt(r.roc?.auc))];
    const rows = [el("tr", { class: "evaluation", "data-id": e.id },
      ...cells.map((c) => el("td", {}, c)))];
    const details = evaluationDetails(r);
    if (details) {
      rows.push(el("tr", { class: "evaluation-details-row", "data-id": e.id },
        el("td", { colspan: String(headings.length) }, details)));
    }
    return rows;
  });
  const ci = evaluations.length ? Math.round(100 * (evaluations[0].result?.confidence ?? 0.95)) : 95;
  headings[5] = `Accuracy [${ci} % interval]`;
  headings[6] = `F1 [${ci} % interval]`;
  document.getElementById("evaluations").replaceChildren(evalRows.length
    ? el("table", {}, el("thead", {}, el("tr", {}, ...headings.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...evalRows))
    : el("p", {}, "No evaluations."));
}

async function showStudies() {
  const list = await api("/v1/studies?limit=200");
  const rows = list.items.map((s) => [el("code", {}, s.id), inertName(s.name, "study-name"),
    (s.members || []).map((m) => `${m.site_id} (${m.role})`).join(", "),
    String((s.results || []).length)]);
  document.getElementById("studies").replaceChildren(
    rows.length ? table(["Study", "Name", "Members", "Results"], rows) : el("p", {}, "No studies."));
}

async function showSite() {
  const me = await api("/v1/sites/me");
  document.getElementById("site").replaceChildren("Site: ", inertName(me.name, "site-name"));
}

async function showSites() {
  const list = await api("/v1/sites?limit=200");
  const rows = list.items.map((s) => [el("code", {}, s.id), inertName(s.name, "site-name"),
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
      document.getElementById("site").replaceChildren("Operator (admin key): the sites only");
      await showSites();
      status(`Updated ${new Date().toLocaleTimeString()}`, false);
      return;
    }
    const [, running] = await Promise.all(
      [showDatasets(), showJobs(), showModels(), showStudies(), showSite()]);
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
    for (const id of ["site", "sites", "datasets", "jobs", "models", "evaluations", "studies"]) {
      document.getElementById(id).replaceChildren();
    }
    status("Key forgotten.", false);
  });
  if (sessionStorage.getItem(KEY)) refresh();
});
