// attnmt web page: translate, list results, draw the attention heatmap of the selected one.
// Plain DOM code, no libraries, no network beyond this server (works offline).
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];
let results = [];

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function loadModels() {
  try {
    const response = await fetch("/models");
    models = await response.json();
  } catch (err) {
    showError("cannot reach the server: " + err);
    return;
  }
  const select = $("model");
  select.textContent = "";
  for (const m of models) {
    const option = document.createElement("option");
    option.value = m.name;
    option.textContent = `${m.name} (${m.src}→${m.tgt})`;
    select.appendChild(option);
  }
  describeModel();
}

// The server describes each model (GET /models: its family, layers, attention), and its limits.
function describeModel() {
  const m = models.find((x) => x.name === $("model").value);
  $("model-info").textContent = m
    ? `${m.description}; ${m.tokenizer} tokens; search in ${m.precision} on ${m.device}`
    : "";
  if (m) $("beam").max = m.max_beam;
  limitNbest();
}

function limitNbest() {
  const beam = Math.max(1, Number($("beam").value) || 1);
  $("nbest").max = beam;
  if (Number($("nbest").value) > beam) $("nbest").value = beam;
}

// One line for every sentence, or one line per sentence; null when all are empty.
function perSentence(text, count, name) {
  const lines = text.split("\n").map((s) => s.trim());
  while (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  if (lines.every((s) => s === "")) return null;
  if (lines.length === 1) return new Array(count).fill(lines[0]);
  if (lines.length === count) return lines;
  throw new Error(`${name}: ${lines.length} lines for ${count} sentences; give one line for all, or one per sentence`);
}

async function translate(event) {
  if (event) event.preventDefault();
  const sentences = $("source").value.split("\n").map((s) => s.trim()).filter((s) => s.length > 0);
  if (sentences.length === 0) {
    showError("Type a sentence first.");
    return;
  }
  const request = {
    sentences, model: $("model").value, beam: Number($("beam").value) || 1,
    nbest: Number($("nbest").value) || 1, attention: true,
  };
  try {
    const prefix = perSentence($("prefix").value, sentences.length, "Starts with");
    const must = perSentence($("constraints").value, sentences.length, "Must contain");
    if (prefix) request.prefix = prefix;
    if (must) request.constraints = must.map((line) => line.split(";").map((p) => p.trim()).filter((p) => p));
  } catch (err) {
    showError(err.message);
    return;
  }
  showError("");
  const button = $("translate");
  button.disabled = true;
  $("status").textContent = "translating…";
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    const body = await response.json();
    if (!response.ok) {
      showError(`${response.status}: ${body.error || response.statusText}`);
      $("status").textContent = "";
      return;
    }
    results = body.translations;
    $("status").textContent = `${body.model}: ${body.time_ms.toFixed(0)} ms, ${body.precision}`;
    renderResults();
  } catch (err) {
    showError("request failed: " + err);
    $("status").textContent = "";
  } finally {
    button.disabled = false;
  }
}

function renderResults() {
  const list = $("translations");
  list.textContent = "";
  results.forEach((r, i) => {
    const item = document.createElement("li");
    item.className = "translation";
    item.appendChild(scored(r.text, r.score));
    item.addEventListener("click", () => select(i, 0));
    if (r.hypotheses.length > 1) {  // n-best: every hypothesis, best first, each with its attention
      const alternatives = document.createElement("ol");
      alternatives.className = "nbest";
      r.hypotheses.forEach((h, k) => {
        const hyp = document.createElement("li");
        hyp.className = "hyp";
        hyp.appendChild(scored(h.text, h.score));
        hyp.addEventListener("click", (event) => { event.stopPropagation(); select(i, k); });
        alternatives.appendChild(hyp);
      });
      item.appendChild(alternatives);
    }
    list.appendChild(item);
  });
  $("results").hidden = results.length === 0;
  select(0, 0);
}

function scored(text, value) {
  const span = document.createElement("span");
  span.textContent = text + " ";
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = value === null || value === undefined ? "" : `score ${value.toFixed(3)}`;
  span.appendChild(score);
  return span;
}

// Word-level attention: average over a target word's pieces, sum over a source word's pieces.
function wordAttention(h) {
  const nT = h.tgt_words.length, nS = h.src_words.length;
  const m = Array.from({ length: nT }, () => new Array(nS).fill(0));
  const count = new Array(nT).fill(0);
  h.attention.forEach((row, t) => {
    const tw = h.tgt_word_of_piece[t];
    if (tw === undefined || tw >= nT) return;
    count[tw] += 1;
    row.forEach((a, s) => {
      const sw = h.src_word_of_piece[s];
      if (sw !== undefined && sw < nS) m[tw][sw] += a;
    });
  });
  return m.map((row, t) => row.map((a) => (count[t] ? a / count[t] : 0)));
}

function heat(a) {
  return `rgba(var(--hot), ${Math.min(1, Math.max(0, a)).toFixed(3)})`;
}

// Source/target word highlight: background by weight, white text where the background is dark.
function light(el, a) {
  el.style.background = heat(a);
  el.style.color = a > 0.55 ? "#fff" : "";
}

function wordSpans(container, words, kind) {
  container.textContent = "";
  return words.map((w, i) => {
    const span = document.createElement("span");
    span.className = `w ${kind}`;
    span.dataset.index = i;
    span.textContent = w;
    container.appendChild(span);
    return span;
  });
}

function select(i, k) {
  document.querySelectorAll("#translations > li").forEach((li, j) => {
    li.classList.toggle("selected", i === j);
    li.querySelectorAll("li.hyp").forEach((hyp, m) => hyp.classList.toggle("selected", i === j && m === k));
  });
  const r = results[i];
  const h = r && r.hypotheses[k];
  if (!h || !h.attention) {
    $("view").hidden = true;
    return;
  }
  $("view").hidden = false;
  const words = wordAttention(h);
  const srcSpans = wordSpans($("src-words"), h.src_words, "src");
  const tgtSpans = wordSpans($("tgt-words"), h.tgt_words, "tgt");
  const table = $("heatmap");
  table.textContent = "";
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  const colHeads = h.src_pieces.map((p) => {
    const th = document.createElement("th");
    th.textContent = p;
    head.appendChild(th);
    return th;
  });
  const body = table.createTBody();
  const rowHeads = [];
  const cells = h.attention.map((row, t) => {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = h.tgt_pieces[t];
    tr.appendChild(th);
    rowHeads.push(th);
    return row.map((a, s) => {
      const td = tr.insertCell();
      td.className = "cell";
      td.style.background = heat(a);
      td.textContent = a.toFixed(2);
      td.title = `${h.tgt_pieces[t]} → ${h.src_pieces[s]}: ${a.toFixed(3)}`;
      td.addEventListener("mouseenter", () => focusPiece(t, s));
      td.addEventListener("mouseleave", clear);
      return td;
    });
  });

  function clear() {
    srcSpans.concat(tgtSpans).forEach((el) => {
      el.style.background = "";
      el.style.color = "";
      el.classList.remove("active");
    });
    rowHeads.concat(colHeads).forEach((el) => el.classList.remove("active"));
    cells.flat().forEach((td) => td.classList.remove("dim"));
  }
  function showRows(rows) {
    cells.forEach((row, t) => row.forEach((td) => td.classList.toggle("dim", !rows.includes(t))));
    rows.forEach((t) => rowHeads[t].classList.add("active"));
  }
  function focusTarget(j) {
    clear();
    tgtSpans[j].classList.add("active");
    const weights = words[j] || [];
    const top = Math.max(1e-9, ...weights);
    srcSpans.forEach((el, k) => light(el, (weights[k] || 0) / top));
    showRows(h.tgt_word_of_piece.map((w, t) => (w === j ? t : -1)).filter((t) => t >= 0));
  }
  function focusSource(k) {
    clear();
    srcSpans[k].classList.add("active");
    const column = words.map((row) => row[k] || 0);
    const top = Math.max(1e-9, ...column);
    tgtSpans.forEach((el, j) => light(el, column[j] / top));
    h.src_word_of_piece.forEach((w, s) => { if (w === k) colHeads[s].classList.add("active"); });
  }
  function focusPiece(t, s) {
    clear();
    rowHeads[t].classList.add("active");
    colHeads[s].classList.add("active");
    const tw = h.tgt_word_of_piece[t], sw = h.src_word_of_piece[s];
    if (tgtSpans[tw]) tgtSpans[tw].classList.add("active");
    if (srcSpans[sw]) srcSpans[sw].classList.add("active");
  }
  tgtSpans.forEach((el, j) => {
    el.addEventListener("mouseenter", () => focusTarget(j));
    el.addEventListener("mouseleave", clear);
  });
  srcSpans.forEach((el, k) => {
    el.addEventListener("mouseenter", () => focusSource(k));
    el.addEventListener("mouseleave", clear);
  });
  rowHeads.forEach((th, t) => {
    th.addEventListener("mouseenter", () => { const j = h.tgt_word_of_piece[t]; if (tgtSpans[j]) focusTarget(j); });
    th.addEventListener("mouseleave", clear);
  });
  $("alignment").textContent = h.pharaoh ? `word alignment (source-target): ${h.pharaoh}` : "";
}

$("form").addEventListener("submit", translate);
$("model").addEventListener("change", describeModel);
$("beam").addEventListener("input", limitNbest);
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translate(e);
});
loadModels();
