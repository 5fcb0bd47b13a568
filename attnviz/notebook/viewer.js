// attnviz's views in a notebook's output cell (attnviz.notebook.assets puts this after head_grid.js's code, as
// `drawGrid`, in one classic script): a payload (attnviz.notebook.payload) becomes the layer x head grid, drawn by
// the app's own code, one head large on a canvas in the grid's colours, its statistics, the lines between tokens for
// a short text, and the sentence A/B selector. Offline: the maps arrive in the payload, zlib-compressed, and the
// browser's own DecompressionStream opens them. Each output keeps its state on its own element: several outputs on
// one page, or this script run twice, do not meet.
// Words the payload may translate (English below where it does not): layer, head, mean, query, key, weight,
// queries, keys, max_over, mean_over, masked, map, lines, all, a_to_a, b_to_b, a_to_b, b_to_a, statistic, value,
// flags, no_stats, no_decoder, emphasise.
// The colour scale: the payload's "gamma", 1 (a cell's colour is its weight's level, as the grid's) or 0.5 (its
// √weight's: the Heads page's "emphasise small weights", where a long text's tiny weights would draw a dark square);
// the "√ weight" toggle swaps it, with the grid drawn at the same scale (each kind's "grids").
const WORDS = {
  layer: "Layer",
  head: "Head",
  mean: "mean of the heads",
  query: "query",
  key: "key",
  weight: "weight",
  queries: "queries",
  keys: "keys",
  max_over: "max",
  mean_over: "mean of the heads' max",
  masked: "masked (no visible key)",
  map: "Map",
  lines: "Lines",
  all: "All",
  a_to_a: "A→A",
  b_to_b: "B→B",
  a_to_b: "A→B",
  b_to_a: "B→A",
  statistic: "statistic",
  value: "value",
  flags: "flags",
  no_stats: "no statistics for the mean",
  no_decoder: "this browser cannot open the maps (it has no DecompressionStream)",
  emphasise: "√ weight",
};
const MASKED = 65535; // a cell with no visible key (maps.data's own marker)
const MAP_FONT = '11px "Open Sans", verdana, arial, sans-serif';
const LABEL_CHARS = 18; // an axis label longer than this is cut (its full text is in the hover)
const MAP_MAX_CELL = 28; // px: a short text's cells stop growing here
const MAP_MAX_SIDE = 640; // px: the map's height cap (its width is the pane's)
const LINE_ROW = 18; // px per token in the lines view
const SCALE_BAR = 14; // px: the colour bar's thickness
// px: the bar's least length: every one of its 255 levels at least a pixel long, so a tick sits on its own colour
const SCALE_MIN = 256;
const SCALE_TICKS = [1, 0, 0.5, 0.25, 0.1, 0.05, 0.01]; // weights named on the bar, the first kept where labels touch
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function node(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text; // user text is data, never markup
  return el;
}

function bytesOf(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

// The grid's own palette (its PNG's PLTE chunk: attnviz.figures.grid_picture.grid_palette), so the large map and the
// grid give a weight the same colour: levels 0..254 are weights, 255 is the masked grey.
function paletteOf(png) {
  const bytes = bytesOf(png);
  const view = new DataView(bytes.buffer);
  for (let at = 8; at + 8 <= bytes.length; ) {
    const length = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    if (type === "PLTE") return bytes.slice(at + 8, at + 8 + length);
    at += 12 + length;
  }
  throw new Error("attnviz: the grid's picture has no palette");
}

function levelOf(weight, gamma) {
  // attnviz.figures.heads.quantize_grid's levels: round(255 * weight ** gamma), 255 kept for the masked grey
  return Math.min(254, Math.max(0, Math.round(255 * Math.pow(weight, gamma))));
}

// the kind's grid drawn at `gamma` (payload "grids": {"1.0": ..., "0.5": ...}; "grid": the one at the first gamma)
function gridPicture(kind, gamma) {
  const found = Object.entries(kind.grids ?? {}).find(([key]) => Number(key) === gamma);
  return found ? found[1] : kind.grid;
}

// maps.data: base64 of zlib(uint16 little-endian (n_layer, n_head, q, k)) -> Uint16Array
function decodeMaps(maps) {
  if (typeof DecompressionStream === "undefined") return Promise.reject(new Error("no DecompressionStream"));
  const stream = new Blob([bytesOf(maps.data)]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Response(stream).arrayBuffer().then((buffer) => {
    if (LITTLE_ENDIAN) return new Uint16Array(buffer);
    const view = new DataView(buffer);
    return Uint16Array.from({ length: buffer.byteLength / 2 }, (_, i) => view.getUint16(2 * i, true));
  });
}

// One head's cells as weights (NaN where masked); the mean column: the mean over heads of each cell's visible values
function headCells(values, maps, row, head) {
  const size = maps.q * maps.k;
  const cells = new Float64Array(size);
  if (head !== "mean") {
    const base = (row * maps.n_head + head) * size;
    for (let i = 0; i < size; i++) {
      const v = values[base + i];
      cells[i] = v === MASKED ? NaN : v / 65534;
    }
    return cells;
  }
  for (let i = 0; i < size; i++) {
    let sum = 0;
    let n = 0;
    for (let h = 0; h < maps.n_head; h++) {
      const v = values[(row * maps.n_head + h) * size + i];
      if (v !== MASKED) {
        sum += v / 65534;
        n += 1;
      }
    }
    cells[i] = n ? sum / n : NaN;
  }
  return cells;
}

function cut(label) {
  return label.length > LABEL_CHARS ? `${label.slice(0, LABEL_CHARS - 1)}…` : label;
}

// The sentence A/B selector's part -> the tokens it keeps on each side: [[q0, q1), [k0, k1)]
function partRanges(part, split, nq, nk) {
  const a = (n) => [0, Math.min(split, n)];
  const b = (n) => [Math.min(split, n), n];
  const sides = { a_to_a: [a, a], b_to_b: [b, b], a_to_b: [a, b], b_to_a: [b, a] }[part];
  return sides ? [sides[0](nq), sides[1](nk)] : [[0, nq], [0, nk]];
}

function mount(element, payload) {
  if (element.__attnvizNb) return element.__attnvizNb;
  const words = { ...WORDS, ...(payload.words || {}) };
  const say = (key) => words[key] ?? key;
  const kinds = payload.kinds || [];
  const state = { kind: -1, row: 0, head: 0, mode: "map", part: "all", gridDrawn: false, headDrawn: false, width: 0 };
  state.gamma = Number(payload.gamma) === 0.5 ? 0.5 : 1;
  const decoded = new Map(); // kind index -> Promise of its Uint16Array
  const gridData = new Map(); // "kind index/gamma" -> the data drawGrid is given (the same object again: no redraw)
  element.__attnvizNb = state;
  element.replaceChildren(); // the fallback text goes
  element.classList.add("attnviz-nb", payload.view === "model" ? "view-model" : "view-head");
  element.classList.toggle("theme-dark", payload.theme === "dark");
  element.dataset.drawn = "0";

  const header = node("div", "header");
  header.append(node("div", "title", payload.title || ""));
  if (payload.note) header.append(node("div", "note", payload.note));
  const kindBar = node("div", "bar kinds");
  const body = node("div", "body");
  const gridPane = node("div", "grid-pane");
  const headPane = node("div", "head-pane");
  const headTitle = node("div", "head-title");
  const controls = node("div", "bar controls");
  const partBar = node("div", "group parts");
  const modeBar = node("div", "group modes");
  const emphasis = node("button", "toggle", say("emphasise"));
  emphasis.type = "button";
  emphasis.setAttribute("aria-pressed", String(state.gamma === 0.5));
  emphasis.addEventListener("click", () => setGamma(state.gamma === 0.5 ? 1 : 0.5));
  controls.append(partBar, modeBar, emphasis);
  const stage = node("div", "stage");
  const mapCanvas = node("canvas", "map");
  mapCanvas.tabIndex = 0;
  mapCanvas.setAttribute("role", "img");
  const linesCanvas = node("canvas", "lines");
  linesCanvas.hidden = true;
  const tip = node("div", "map-tip");
  tip.hidden = true;
  stage.append(mapCanvas, linesCanvas, tip);
  const stats = node("table", "stats");
  headPane.append(headTitle, controls, stage, stats);
  body.append(gridPane, headPane);
  element.append(header, kindBar, body);

  function button(bar, label, pressed, onClick) {
    const b = node("button", "", label);
    b.type = "button";
    b.setAttribute("aria-pressed", String(pressed));
    b.addEventListener("click", () => {
      bar.querySelectorAll("button").forEach((other) => other.setAttribute("aria-pressed", String(other === b)));
      onClick();
    });
    bar.append(b);
    return b;
  }

  kinds.forEach((kind, i) => button(kindBar, kind.title || kind.id, false, () => showKind(i)));
  kindBar.hidden = kinds.length < 2;

  const kindNow = () => kinds[state.kind];
  const layerOf = (row) => (kindNow().layers ?? [])[row] ?? row;

  function finished() {
    if (!state.gridDrawn || !state.headDrawn || element.dataset.drawn === "1") return;
    element.dataset.drawn = "1";
    window.__attnvizNotebookDraws = (window.__attnvizNotebookDraws || 0) + 1;
    element.dispatchEvent(new CustomEvent("attnviz:notebook-drawn", { bubbles: true }));
  }

  function gridOf(index) {
    const key = `${index}/${state.gamma}`;
    if (!gridData.has(key)) {
      const kind = kinds[index];
      const grid = gridPicture(kind, state.gamma);
      // rows as the model's layers (include_layers), and each tile's click as its row: the maps are in row order
      gridData.set(key, {
        ...grid,
        heads: grid.heads.map((row, r) => row.map((tile) => [r, tile[1]])),
        rows: grid.heads.map((_, r) => `L${kind.layers?.[r] ?? r}`),
        report_drawn: true,
      });
    }
    return gridData.get(key);
  }

  function setTriggerValue(name, value) {
    if (name === "tile") {
      state.row = value[0];
      state.head = value[1];
      drawHead();
    } else if (name === "drawn") {
      state.gridDrawn = true;
      finished();
    }
  }

  function showKind(index) {
    state.kind = index;
    const kind = kindNow();
    const [layer, head] = kind.selected ?? [layerOf(0), 0];
    state.row = Math.max(0, (kind.layers ?? []).indexOf(layer));
    state.head = head;
    state.part = "all";
    state.mode = "map";
    kindBar.querySelectorAll("button").forEach((b, i) => b.setAttribute("aria-pressed", String(i === index)));
    partBar.replaceChildren();
    if (kind.sentence_b !== null && kind.sentence_b !== undefined) {
      for (const part of ["all", "a_to_a", "b_to_b", "a_to_b", "b_to_a"]) {
        button(partBar, say(part), part === "all", () => {
          state.part = part;
          drawHead();
        });
      }
    }
    modeBar.replaceChildren();
    if (kind.lines) {
      for (const mode of ["map", "lines"]) {
        button(modeBar, say(mode), mode === "map", () => {
          state.mode = mode;
          drawHead();
        });
      }
    }
    const grid = gridOf(index);
    if (payload.view !== "model") gridPane.style.flexBasis = `${48 + grid.n_col * grid.tile_px}px`;
    drawGrid({ parentElement: gridPane, data: grid, setTriggerValue });
    drawHead();
  }

  // the other colour scale: the grid redrawn at it (the head opened and the tile with the keyboard's focus kept),
  // then the large head
  function setGamma(gamma) {
    state.gamma = gamma;
    emphasis.setAttribute("aria-pressed", String(gamma === 0.5));
    const grid = gridPane.__attnvizGrid;
    const focus = grid?.focus;
    drawGrid({ parentElement: gridPane, data: gridOf(state.kind), setTriggerValue });
    if (grid) grid.focus = focus; // drawGrid forgets it for a new picture; its draw shows it again
    drawHead();
  }

  function palette() {
    return (kindNow().__palette ??= paletteOf(kindNow().grid.png));
  }

  function drawHead() {
    const index = state.kind;
    const kind = kindNow();
    const head = state.head;
    const layer = layerOf(state.row);
    const name = head === "mean" ? say("mean") : (kind.head_names?.[head] ?? `${say("head")} ${head}`);
    headTitle.textContent = `${kind.title ? `${kind.title} · ` : ""}${say("layer")} ${layer} · ${name}`;
    drawStats(layer, head);
    if (!decoded.has(index)) decoded.set(index, decodeMaps(kind.maps));
    decoded.get(index).then(
      (values) => {
        if (state.kind !== index || state.head !== head || layerOf(state.row) !== layer) return; // a newer choice
        const cells = headCells(values, kind.maps, state.row, head);
        const lines = state.mode === "lines" && kind.lines;
        mapCanvas.hidden = lines;
        linesCanvas.hidden = !lines;
        tip.hidden = true;
        (lines ? drawLines : drawMap)(kind, cells);
        state.width = headPane.clientWidth;
        state.headDrawn = true;
        finished();
      },
      (error) => {
        console.error("attnviz: the maps could not be opened", error);
        headTitle.textContent = say("no_decoder");
      },
    );
  }

  function drawStats(layer, head) {
    stats.replaceChildren();
    const table = kindNow().stats;
    if (!table) return;
    if (head === "mean") {
      stats.append(node("caption", "", say("no_stats")));
      return;
    }
    const values = table.values?.[`${layer},${head}`] ?? [];
    const headRow = node("tr");
    headRow.append(node("th", "", say("statistic")), node("th", "", say("value")));
    stats.append(headRow);
    (table.labels ?? table.names ?? []).forEach((label, i) => {
      const v = values[i];
      const row = node("tr");
      const shown = v === null || v === undefined ? "–" : Number.isInteger(v) ? String(v) : v.toFixed(4);
      row.append(node("td", "", label), node("td", "num", shown));
      stats.append(row);
    });
    const flags = table.flags?.[`${layer},${head}`];
    if (flags) {
      const row = node("tr");
      row.append(node("td", "", say("flags")), node("td", "", flags));
      stats.append(row);
    }
  }

  // the cells a part keeps: [r0, r1) query cells and [c0, c1) key cells
  function cellRanges(kind) {
    const { bin_q: bq, bin_k: bk, q, k } = kind.maps;
    const [[q0, q1], [k0, k1]] = partRanges(state.part, kind.sentence_b, kind.queries.length, kind.keys.length);
    return [
      [Math.floor(q0 / bq), Math.min(q, Math.ceil(q1 / bq))],
      [Math.floor(k0 / bk), Math.min(k, Math.ceil(k1 / bk))],
    ];
  }

  function canvasSized(canvas, w, h) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.font = MAP_FONT;
    return ctx;
  }

  function drawMap(kind, cells) {
    const { bin_q: bq, bin_k: bk, k } = kind.maps;
    const [[r0, r1], [c0, c1]] = cellRanges(kind);
    const nr = Math.max(1, r1 - r0);
    const nc = Math.max(1, c1 - c0);
    const colours = palette();
    const picture = document.createElement("canvas");
    picture.width = nc;
    picture.height = nr;
    const pctx = picture.getContext("2d");
    const image = pctx.createImageData(nc, nr);
    for (let r = 0; r < nr; r++) {
      for (let c = 0; c < nc; c++) {
        const w = cells[(r0 + r) * k + c0 + c];
        const level = Number.isNaN(w) ? 255 : levelOf(w, state.gamma);
        image.data.set([colours[3 * level], colours[3 * level + 1], colours[3 * level + 2], 255], 4 * (r * nc + c));
      }
    }
    pctx.putImageData(image, 0, 0);
    const measure = canvasSized(mapCanvas, 1, 1);
    const labelWidth = (labels) => Math.max(0, ...labels.map((label) => measure.measureText(cut(label)).width));
    const rowLabels = Array.from({ length: nr }, (_, r) => kind.queries[(r0 + r) * bq] ?? "");
    const colLabels = Array.from({ length: nc }, (_, c) => kind.keys[(c0 + c) * bk] ?? "");
    const left = Math.ceil(labelWidth(rowLabels)) + 8;
    const top = Math.max(24, Math.ceil(labelWidth(colLabels)) + 8); // 24: the colour bar's title above it
    const pane = headPane.clientWidth || 640;
    // the colour bar beside the map, or under it where the pane leaves the map too little room
    const tickWidth = Math.ceil(Math.max(...SCALE_TICKS.map((w) => measure.measureText(String(w)).width)));
    const titleWidth = measure.measureText(scaleTitle(0.5)).width; // the longer title: a toggle moves nothing
    const scaleRoom = 16 + SCALE_BAR + 4 + Math.ceil(Math.max(tickWidth, titleWidth - SCALE_BAR - 4));
    const beside = pane - left - 8 - scaleRoom >= Math.min(nc * MAP_MAX_CELL, 200);
    const room = pane - left - 8 - (beside ? scaleRoom : 0);
    const cell = Math.max(0.5, Math.min(MAP_MAX_CELL, room / nc, MAP_MAX_SIDE / nr));
    const [mapW, mapH] = [nc * cell, nr * cell];
    const length = beside ? Math.max(SCALE_MIN, mapH) : Math.max(Math.min(SCALE_MIN, pane - 16), mapW);
    const bar = beside
      ? { x: Math.ceil(left + mapW + 16), y: top, w: SCALE_BAR, h: length, vertical: true }
      : { x: Math.max(8, Math.min(left, pane - 8 - length)), y: Math.ceil(top + mapH + 12), w: length, h: SCALE_BAR };
    const [width, height] = beside
      ? [bar.x + scaleRoom - 16, top + Math.max(mapH, length) + 8]
      : [Math.max(left + mapW, bar.x + length + tickWidth / 2) + 8, bar.y + SCALE_BAR + 36];
    const ctx = canvasSized(mapCanvas, Math.ceil(width), Math.ceil(height));
    ctx.imageSmoothingEnabled = false; // a cell is a flat square, as in the grid
    ctx.drawImage(picture, left, top, mapW, mapH);
    ctx.fillStyle = getComputedStyle(element).color || "#444";
    drawScale(ctx, colours, bar);
    const rowStep = Math.max(1, Math.ceil(13 / cell)); // every n-th label where they would touch
    const colStep = Math.max(1, Math.ceil(13 / cell));
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    rowLabels.forEach((label, r) => r % rowStep || ctx.fillText(cut(label), left - 4, top + (r + 0.5) * cell));
    ctx.save();
    ctx.rotate(-Math.PI / 2); // key labels run upwards above their columns
    ctx.textAlign = "left";
    colLabels.forEach((label, c) => c % colStep || ctx.fillText(cut(label), -(top - 4), left + (c + 0.5) * cell));
    ctx.restore();
    mapCanvas.setAttribute("aria-label", headTitle.textContent);
    // where its cells are (for tests and the hover): the first cell drawn and a cell's side in CSS pixels
    mapCanvas.dataset.cells = JSON.stringify({ left, top, cell, rows: [r0, r1], cols: [c0, c1], gamma: state.gamma });
    state.map = { kind, cells, left, top, cell, r0, r1, c0, c1 };
  }

  const scaleTitle = (gamma = state.gamma) => (gamma === 0.5 ? `${say("weight")} (√)` : say("weight"));

  // The colour bar: the palette's 255 weight levels, 0 to 1 (upwards, or rightwards under the map), each a band as
  // long; its ticks name weights at their colour's band under the current gamma (0.25 at level round(255 * 0.25 **
  // gamma)), those whose labels would touch a kept one left out
  function drawScale(ctx, colours, bar) {
    const strip = document.createElement("canvas");
    [strip.width, strip.height] = bar.vertical ? [1, 255] : [255, 1];
    const sctx = strip.getContext("2d");
    const image = sctx.createImageData(strip.width, strip.height);
    for (let level = 0; level < 255; level++) {
      const at = bar.vertical ? 254 - level : level;
      image.data.set([colours[3 * level], colours[3 * level + 1], colours[3 * level + 2], 255], 4 * at);
    }
    sctx.putImageData(image, 0, 0);
    ctx.drawImage(strip, bar.x, bar.y, bar.w, bar.h);
    const length = bar.vertical ? bar.h : bar.w;
    const kept = [];
    for (const weight of SCALE_TICKS) {
      const level = levelOf(weight, state.gamma);
      const along = ((level + 0.5) / 255) * length;
      const size = bar.vertical ? 13 : ctx.measureText(String(weight)).width + 6;
      if (kept.some((t) => Math.abs(t.along - along) < (bar.vertical ? 13 : (t.size + size) / 2))) continue;
      kept.push({ weight, level, along, size });
    }
    ctx.textBaseline = bar.vertical ? "middle" : "top";
    ctx.textAlign = bar.vertical ? "left" : "center";
    const ticks = kept.map(({ weight, level, along }) => {
      const [x, y] = bar.vertical ? [bar.x + bar.w / 2, bar.y + bar.h - along] : [bar.x + along, bar.y + bar.h / 2];
      if (bar.vertical) {
        ctx.fillRect(bar.x + bar.w, y - 0.5, 3, 1);
        ctx.fillText(String(weight), bar.x + bar.w + 5, y);
      } else {
        ctx.fillRect(x - 0.5, bar.y + bar.h, 1, 3);
        ctx.fillText(String(weight), x, bar.y + bar.h + 4);
      }
      return { weight, level, x, y };
    });
    ctx.textAlign = "left";
    ctx.textBaseline = "bottom";
    ctx.fillText(scaleTitle(), bar.x, bar.vertical ? bar.y - 6 : bar.y + bar.h + 34);
    // where the bar and its ticks are (for tests): a tick's point is on the bar, in its weight's colour
    mapCanvas.dataset.scale = JSON.stringify({ ...bar, ticks });
  }

  function hover(event) {
    const m = state.map;
    if (!m || mapCanvas.hidden) return;
    const box = mapCanvas.getBoundingClientRect();
    const r = m.r0 + Math.floor((event.clientY - box.top - m.top) / m.cell);
    const c = m.c0 + Math.floor((event.clientX - box.left - m.left) / m.cell);
    if (r < m.r0 || r >= m.r1 || c < m.c0 || c >= m.c1) {
      tip.hidden = true;
      return;
    }
    const { kind } = m;
    const { bin_q: bq, bin_k: bk, k } = kind.maps;
    const w = m.cells[r * k + c];
    const weight = Number.isNaN(w) ? say("masked") : w.toFixed(4);
    let lines;
    if (bq === 1 && bk === 1) {
      lines = [
        `${say("query")}: ${kind.queries[r] ?? r}`,
        `${say("key")}: ${kind.keys[c] ?? c}`,
        `${say("weight")}: ${weight}`,
      ];
    } else {
      const qa = r * bq;
      const qb = Math.min(kind.queries.length, (r + 1) * bq) - 1;
      const ka = c * bk;
      const kb = Math.min(kind.keys.length, (c + 1) * bk) - 1;
      const over = state.head === "mean" ? say("mean_over") : say("max_over");
      lines = [
        `${say("queries")} ${qa}–${qb} × ${say("keys")} ${ka}–${kb}: ${over} ${weight}`,
        `${kind.queries[qa] ?? ""} … ${kind.queries[qb] ?? ""}`,
        `${kind.keys[ka] ?? ""} … ${kind.keys[kb] ?? ""}`,
      ];
    }
    tip.replaceChildren(...lines.map((line) => node("div", "", line)));
    tip.hidden = false;
    const stageBox = stage.getBoundingClientRect();
    const x = event.clientX - stageBox.left;
    tip.style.left = `${Math.max(0, Math.min(x + 14, stage.clientWidth - tip.offsetWidth - 4))}px`;
    tip.style.top = `${event.clientY - stageBox.top + 14}px`;
  }
  mapCanvas.addEventListener("mousemove", hover);
  mapCanvas.addEventListener("mouseleave", () => {
    tip.hidden = true;
  });

  // BertViz's look: the query tokens on the left, the key tokens on the right, a line per (query, key) whose opacity
  // is its weight; hovering a token keeps only its lines
  function drawLines(kind, cells, focus = null) {
    const { k } = kind.maps;
    const [[q0, q1], [k0, k1]] = cellRanges(kind); // bin 1 here: cells are tokens
    const measure = canvasSized(linesCanvas, 1, 1);
    const width = (labels) => Math.max(0, ...labels.map((label) => measure.measureText(cut(label)).width));
    const queries = kind.queries.slice(q0, q1);
    const keys = kind.keys.slice(k0, k1);
    const leftX = Math.ceil(width(queries)) + 8;
    const gap = Math.max(120, Math.min(260, (headPane.clientWidth || 600) / 3));
    const rightX = leftX + gap;
    const h = Math.max(queries.length, keys.length) * LINE_ROW + 8;
    const ctx = canvasSized(linesCanvas, Math.ceil(rightX + width(keys) + 12), h);
    const y = (i) => 4 + (i + 0.5) * LINE_ROW;
    const dark = element.classList.contains("theme-dark");
    ctx.strokeStyle = dark ? "#7fb8ff" : "#1f5fbf";
    ctx.lineWidth = 2;
    for (let i = q0; i < q1; i++) {
      if (focus && focus.side === "q" && focus.index !== i) continue;
      for (let j = k0; j < k1; j++) {
        if (focus && focus.side === "k" && focus.index !== j) continue;
        const w = cells[i * k + j];
        if (!(w > 0)) continue;
        ctx.globalAlpha = Math.pow(w, state.gamma); // the line's strength on the map's colour scale
        ctx.beginPath();
        ctx.moveTo(leftX + 2, y(i - q0));
        ctx.lineTo(rightX - 2, y(j - k0));
        ctx.stroke();
      }
    }
    ctx.globalAlpha = 1;
    ctx.fillStyle = getComputedStyle(element).color || "#444";
    ctx.textBaseline = "middle";
    const label = (text, x, i, side, index) => {
      ctx.font = focus && focus.side === side && focus.index === index ? `bold ${MAP_FONT}` : MAP_FONT;
      ctx.fillText(cut(text), x, y(i));
    };
    ctx.textAlign = "right";
    queries.forEach((text, i) => label(text, leftX - 4, i, "q", q0 + i));
    ctx.textAlign = "left";
    keys.forEach((text, j) => label(text, rightX + 4, j, "k", k0 + j));
    const drawn = { leftX, rightX, row: LINE_ROW, queries: [q0, q1], keys: [k0, k1], gamma: state.gamma };
    linesCanvas.dataset.lines = JSON.stringify(drawn);
    linesCanvas.dataset.focus = focus ? `${focus.side}${focus.index}` : ""; // the token whose lines alone are drawn
    state.lines = { kind, cells, leftX, rightX, q0, q1, k0, k1, focus };
  }

  linesCanvas.addEventListener("mousemove", (event) => {
    const l = state.lines;
    if (!l) return;
    const box = linesCanvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const i = Math.floor((event.clientY - box.top - 4) / LINE_ROW);
    const middle = (l.leftX + l.rightX) / 2;
    const [side, index, end] = x < middle ? ["q", l.q0 + i, l.q1] : ["k", l.k0 + i, l.k1];
    const focus = i >= 0 && index < end ? { side, index } : null;
    if (focus?.side !== l.focus?.side || focus?.index !== l.focus?.index) drawLines(l.kind, l.cells, focus);
  });
  linesCanvas.addEventListener("mouseleave", () => state.lines && drawLines(state.lines.kind, state.lines.cells));

  // the pane's width changed (the cell was resized, a sidebar opened): the large head follows, as the grid does
  new ResizeObserver(() => {
    const w = headPane.clientWidth;
    if (!w || w === state.width || !state.headDrawn) return;
    state.width = w;
    const m = state.mode === "lines" ? state.lines : state.map;
    if (m) (state.mode === "lines" ? drawLines : drawMap)(m.kind, m.cells);
  }).observe(headPane);

  if (kinds.length) showKind(Math.min(Math.max(0, payload.kind || 0), kinds.length - 1));
  return state;
}

// every output queued before this script ran (its element, then its payload's <script type="application/json">)
function drain() {
  const queue = (window.__attnvizQueue = window.__attnvizQueue || []);
  while (queue.length) {
    const id = queue.shift();
    const element = document.getElementById(id);
    const data = document.getElementById(`${id}-data`);
    if (!element || !data || element.__attnvizNb) continue;
    try {
      mount(element, JSON.parse(data.textContent));
    } catch (error) {
      console.error(`attnviz: output ${id} could not be drawn`, error);
    }
  }
}

window.attnvizNotebook = { mount, drain };
drain();
