// attnviz's layer x head grid (attnviz.app.grid_canvas): the mosaic, a palette PNG, drawn on a <canvas> the
// moment it arrives (no Plotly to wait for), with each tile's hover text, a click that opens its head (the
// trigger value "tile": [layer, head]), and the keyboard (arrow keys move, Enter or Space opens).
// Drawn once per picture and width: a later draw is a resize of the column, or a new picture.
const FONT = '12px "Open Sans", verdana, arial, sans-serif'; // Plotly's own, as the charts around it
const LEFT = 40; // px for the layer labels
const TOP = 22; // px for the head labels above the grid, and below it
const RIGHT = 8;
const LINE = 2; // the white line between tiles
const PAD = 4; // px between a label and the grid

function geometry(data, width) {
  const cells = Math.max(data.th, data.tw);
  const fit = (width - LEFT - RIGHT) / (data.n_col * data.tw); // px per cell that fits the column
  const unit = Math.max(0.25, Math.min(data.tile_px / cells, fit));
  const tileW = data.tw * unit;
  const tileH = data.th * unit;
  return { unit, tileW, tileH, w: Math.ceil(LEFT + data.n_col * tileW + RIGHT), h: Math.ceil(TOP + data.n_layer * tileH + TOP) };
}

function every(size, need) {
  return Math.max(1, Math.ceil(need / Math.max(size, 0.5))); // label every k-th tile so labels do not touch
}

function draw(view) {
  const { data, canvas, image, root } = view;
  const width = root.clientWidth || data.n_col * data.tile_px + LEFT + RIGHT;
  const g = geometry(data, width);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(g.w * dpr);
  canvas.height = Math.round(g.h * dpr);
  canvas.style.width = `${g.w}px`;
  canvas.style.height = `${g.h}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.imageSmoothingEnabled = false; // a cell is a flat square, as in the Plotly heatmap
  ctx.drawImage(image, LEFT, TOP, data.n_col * g.tileW, data.n_layer * g.tileH);
  ctx.fillStyle = data.dim_color;
  data.dimmed.forEach((row, r) =>
    row.forEach((dim, c) => dim && ctx.fillRect(LEFT + c * g.tileW, TOP + r * g.tileH, g.tileW, g.tileH)),
  );
  ctx.fillStyle = "#ffffff";
  for (let c = 1; c < data.n_col; c++) ctx.fillRect(LEFT + c * g.tileW - LINE / 2, TOP, LINE, data.n_layer * g.tileH);
  for (let r = 1; r < data.n_layer; r++) ctx.fillRect(LEFT, TOP + r * g.tileH - LINE / 2, data.n_col * g.tileW, LINE);
  ctx.font = FONT;
  ctx.fillStyle = getComputedStyle(root).color || "#444";
  ctx.globalAlpha = 0.75; // the labels quieter than the page's text, as Plotly's ticks
  const widest = Math.max(...data.cols.map((name) => ctx.measureText(name).width));
  const colStep = every(g.tileW, widest + 6);
  const last = data.n_col - 1; // the mean's column always named: the one before it gives way when they would touch
  const named = (c) => (c === last || c % colStep === 0) && !(c !== last && c % colStep === 0 && last - c < colStep);
  ctx.textAlign = "center";
  data.cols.forEach((name, c) => {
    if (!named(c)) return;
    const x = LEFT + (c + 0.5) * g.tileW;
    ctx.textBaseline = "bottom";
    ctx.fillText(name, x, TOP - PAD);
    ctx.textBaseline = "top";
    ctx.fillText(name, x, TOP + data.n_layer * g.tileH + PAD);
  });
  const rowStep = every(g.tileH, 14);
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  data.rows.forEach((name, r) => r % rowStep || ctx.fillText(name, LEFT - PAD, TOP + (r + 0.5) * g.tileH));
  ctx.globalAlpha = 1;
  view.geometry = g;
  view.drawnWidth = width;
  view.draws += 1;
  canvas.dataset.draws = String(view.draws); // how often it has drawn, and where its tiles are (for tests)
  canvas.dataset.tiles = JSON.stringify({ left: LEFT, top: TOP, w: g.tileW, h: g.tileH, rows: data.n_layer, cols: data.n_col });
  if (!window.__attnvizFirstMap) {
    window.__attnvizFirstMap = performance.now(); // benchmarks/first_chart.py reads it
    performance.mark?.("attnviz:first-map");
    window.dispatchEvent(new Event("attnviz:first-map")); // the page's Plotly waits for it (attnviz.app.static_assets)
  }
  reportDrawn(view);
  showFocus(view);
}

function reportDrawn(view) {
  // the page's charts wait for the session's first map (attnviz.app.grid_canvas.charts_after_map): say it is drawn
  if (view.data.report_drawn && !view.reported) {
    view.reported = true;
    view.setTriggerValue("drawn", true);
  }
}

function tileAt(view, event) {
  const g = view.geometry;
  if (!g) return null;
  const box = view.canvas.getBoundingClientRect();
  const c = Math.floor((event.clientX - box.left - LEFT) / g.tileW);
  const r = Math.floor((event.clientY - box.top - TOP) / g.tileH);
  return r >= 0 && r < view.data.n_layer && c >= 0 && c < view.data.n_col ? [r, c] : null;
}

function showFocus(view) {
  const { box, geometry: g, focus } = view;
  if (!focus || !g) {
    box.hidden = true;
    return;
  }
  const [r, c] = focus;
  Object.assign(box.style, {
    left: `${LEFT + c * g.tileW - 1}px`,
    top: `${TOP + r * g.tileH - 1}px`,
    width: `${g.tileW + 2}px`,
    height: `${g.tileH + 2}px`,
  });
  box.hidden = false;
}

function showTip(view, tile, x, y) {
  const { tip, data } = view;
  if (!tile) {
    tip.hidden = true;
    return;
  }
  const [r, c] = tile;
  tip.replaceChildren(
    ...data.hover[r][c].map((line, i) => {
      const div = document.createElement("div"); // text, never markup: hover lines are plain strings
      div.textContent = line;
      if (i === 0) div.className = "name";
      return div;
    }),
  );
  const hint = document.createElement("div");
  hint.className = "hint";
  hint.textContent = data.hint;
  tip.append(hint);
  tip.hidden = false;
  const room = view.root.clientWidth;
  const left = Math.min(Math.max(0, x + 14), Math.max(0, room - tip.offsetWidth - 4));
  tip.style.left = `${left}px`;
  tip.style.top = `${y + 14}px`;
}

function open(view, tile) {
  if (!tile) return;
  const [layer, head] = view.data.heads[tile[0]][tile[1]];
  view.setTriggerValue("tile", [layer, head]);
}

function build(parent) {
  const root = document.createElement("div");
  root.className = "attnviz-grid";
  const canvas = document.createElement("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  const box = document.createElement("div");
  box.className = "focus";
  box.hidden = true;
  const tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  root.append(canvas, box, tip);
  parent.append(root);
  const view = { root, canvas, box, tip, draws: 0, focus: null };
  canvas.addEventListener("mousemove", (event) => {
    const tile = tileAt(view, event);
    const box = view.root.getBoundingClientRect();
    view.focus = tile;
    showFocus(view);
    showTip(view, tile, event.clientX - box.left, event.clientY - box.top);
    canvas.style.cursor = tile ? "pointer" : "default";
  });
  canvas.addEventListener("mouseleave", () => {
    view.focus = null;
    showFocus(view);
    showTip(view, null);
  });
  canvas.addEventListener("click", (event) => open(view, tileAt(view, event)));
  canvas.addEventListener("keydown", (event) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const [r, c] = view.focus ?? [0, 0];
    if (moves[event.key]) {
      const [dr, dc] = view.focus ? moves[event.key] : [0, 0];
      view.focus = [
        Math.min(view.data.n_layer - 1, Math.max(0, r + dr)),
        Math.min(view.data.n_col - 1, Math.max(0, c + dc)),
      ];
    } else if (event.key === "Enter" || event.key === " ") {
      open(view, view.focus);
    } else return;
    event.preventDefault();
    showFocus(view);
    const g = view.geometry;
    const [fr, fc] = view.focus;
    showTip(view, view.focus, LEFT + (fc + 1) * g.tileW, TOP + (fr + 0.5) * g.tileH);
  });
  canvas.addEventListener("blur", () => showTip(view, null));
  new ResizeObserver(() => {
    // the column changed, not the picture; a canvas taken off the page (or hidden: no width) is not drawn
    if (!view.image || !view.root.isConnected || !view.root.clientWidth) return;
    if (view.root.clientWidth !== view.drawnWidth) draw(view);
  }).observe(root);
  return view;
}

export default function (component) {
  const { parentElement, data, setTriggerValue } = component;
  const holder = parentElement.host ?? parentElement;
  const view = (holder.__attnvizGrid ??= build(parentElement));
  view.setTriggerValue = setTriggerValue;
  const drawn = (d) => JSON.stringify({ ...d, report_drawn: false }); // what is drawn, not what it reports
  if (view.data && view.data.png === data.png && drawn(view.data) === drawn(data)) {
    view.data = data;
    if (data.report_drawn && view.image) {
      // the page asks again (its run that heard the report was cut short, or a new session took over this page):
      // the map is on the screen, say so again, or its charts would wait for good
      view.reported = false;
      reportDrawn(view);
    }
    return;
  }
  view.data = data;
  view.canvas.setAttribute("aria-label", data.label);
  view.focus = null;
  const image = new Image();
  image.src = `data:image/png;base64,${data.png}`;
  image.decode().then(
    () => {
      if (view.data !== data) return; // a newer picture arrived while this one decoded
      view.image = image;
      try {
        draw(view);
      } catch (error) {
        console.error("attnviz: the grid could not be drawn", error);
        reportDrawn(view); // the charts below must not wait for a map that will not come
      }
    },
    () => reportDrawn(view), // no picture: the charts below must not wait for it
  );
}
