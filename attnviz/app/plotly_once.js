// attnviz: each Plotly chart drawn once when a page first renders (issue 39).
//
// Why a chart was drawn twice: Streamlit 1.67's PlotlyChart element draws the figure as soon as it mounts
// (Plotly.react on an empty div, a full draw), and in the same mount one of its effects replaces the figure it
// holds with a themed copy (a JSON round trip: equal values, new objects), which it hands to Plotly.react again.
// Plotly.react compares the new figure with the one drawn by value, but for two things: the layout's `template`
// (an "any" attribute, compared by identity), and, when the layout sets no `datarevision`, every data array,
// compared by identity after decoding (plotly.py sends a NumPy array as base64, and Plotly decodes a 2-D one
// into new arrays on every call): either makes Plotly lay out and draw the whole chart again, for nothing.
//
// What this does, before Plotly.react updates a chart already drawn: every part of the new figure equal by
// value to the part drawn (a trace's z, the template, an axis' tick labels) is replaced by the object drawn,
// and the layout gets a `datarevision` of attnviz's own (unless the figure sets one): the drawn one when no data
// array changed, a new one when one did. Plotly's own comparison then sees only what really changed: an
// unchanged figure costs a comparison (a 512 x 512 heatmap: 2-10 ms sent as NumPy, base64; 10-80 ms sent as
// lists, on a busy 2-core machine), a changed one is drawn as before. Nothing else in Plotly or Streamlit
// changes: a resize, a selection, a rerun with a new figure, the modebar and the exports (built from the
// Python figure) go through as they did. A 1-D NumPy array (a scatter's y) needs one more step: see decoded().
//
// How it is loaded: as a classic script in the page's <head>, before Streamlit's modules
// (attnviz.app.static_assets), so that its setter on `window.Plotly` hears the Plotly chunk's bundle set it
// (the bundle ends with `window.Plotly = Plotly`). A setter already there (a benchmark's) is kept and called.
(() => {
  "use strict";
  const OURS = "attnviz-"; // the prefix of the datarevision this script gives a layout
  let revisions = 0;
  const isPlain = (value) =>
    value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;
  const isArrayLike = (value) => Array.isArray(value) || ArrayBuffer.isView(value);
  // a data array: numbers or text, a nested list of them, a typed array or plotly.py's base64 form of one
  const isData = (value) =>
    ArrayBuffer.isView(value) ||
    (isPlain(value) && typeof value.bdata === "string") ||
    (Array.isArray(value) && !value.some((item) => isPlain(item)));

  // `next`, with each part equal by value to the same part of `prev` replaced by that part of `prev`; and
  // whether the whole of `next` is equal to `prev` (then `prev` itself is returned). One pass, depth first;
  // `changes.data` is set when a data array differs.
  function adopt(next, prev, changes) {
    if (next === prev) return [prev, true];
    const [value, same] = compare(next, prev, changes);
    if (!same && isData(next)) changes.data = true;
    return [value, same];
  }

  function compare(next, prev, changes) {
    if (typeof next === "number" && typeof prev === "number") return [next, Number.isNaN(next) && Number.isNaN(prev)];
    if (isArrayLike(next) && isArrayLike(prev)) {
      if (next.length !== prev.length || Array.isArray(next) !== Array.isArray(prev)) return [next, false];
      if (!Array.isArray(next)) {
        for (let i = 0; i < next.length; i++) {
          if (next[i] !== prev[i] && !(next[i] !== next[i] && prev[i] !== prev[i])) return [next, false];
        }
        return [prev, true];
      }
      let equal = true;
      for (let i = 0; i < next.length; i++) {
        const item = next[i];
        if (item === prev[i] || (item !== item && prev[i] !== prev[i])) continue; // (NaN equals NaN here)
        if (item === null || typeof item !== "object") {
          equal = false; // a number or a string that changed: nothing inside it to adopt
          continue;
        }
        const [value, same] = adopt(item, prev[i], changes);
        equal &&= same;
        if (value !== item) next[i] = value;
      }
      return equal ? [prev, true] : [next, false];
    }
    if (isPlain(next) && isPlain(prev)) {
      // keys that begin with "_" are Plotly's own (the decoded `_inputArray` it adds to a base64 array, which
      // Streamlit's copy may hold as JSON), left out as Plotly's own comparison leaves them out
      const visible = (object) => Object.keys(object).filter((key) => !key.startsWith("_"));
      const keys = visible(next);
      let equal = keys.length === visible(prev).length;
      for (const key of keys) {
        if (!(key in prev)) {
          equal = false;
          if (isData(next[key])) changes.data = true;
          continue;
        }
        const [value, same] = adopt(next[key], prev[key], changes);
        equal &&= same;
        if (value !== next[key]) next[key] = value;
      }
      return equal ? [prev, true] : [next, false];
    }
    return [next, false];
  }

  // Plotly decodes a base64 1-D array (a scatter's y) into a new typed array on every call, and compares typed
  // arrays by identity whatever the datarevision: an adopted one is handed over decoded, as the array Plotly drew
  // (its `_inputArray`), which writes itself back as the base64 form for a JSON copy (Streamlit's theme switch).
  function decoded(object, depth) {
    if (depth > 4 || !isPlain(object)) return;
    for (const key of Object.keys(object)) {
      const value = object[key];
      if (isPlain(value) && typeof value.bdata === "string" && ArrayBuffer.isView(value._inputArray)) {
        const { dtype, bdata, shape } = value;
        const array = value._inputArray;
        const spec = () => ({ dtype, bdata, ...(shape === undefined ? {} : { shape }) });
        Object.defineProperty(array, "toJSON", { value: spec, configurable: true });
        object[key] = array;
      } else if (isPlain(value)) decoded(value, depth + 1);
    }
  }

  function once(react) {
    if (typeof react !== "function" || react.attnvizOnce) return react;
    const wrapped = function (gd, data, layout, ...rest) {
      // the figure form, react(gd, {data, layout, config, frames}), is Streamlit's; the data and layout objects
      // themselves stay the caller's (Streamlit compares what it holds with what Plotly has drawn)
      const figure = isPlain(data);
      const traces = figure ? data.data : data;
      const newLayout = figure ? data.layout : layout;
      try {
        const revision = isPlain(newLayout) ? newLayout.datarevision : null;
        const ours = isPlain(newLayout) && (revision === undefined || String(revision).startsWith(OURS));
        const drawn = gd && gd._fullLayout && Array.isArray(gd.data) && isPlain(gd.layout);
        if (!drawn) {
          if (ours) newLayout.datarevision = OURS + revisions++;
        } else if (ours) {
          const changes = { data: false };
          const { datarevision: _, ...without } = newLayout; // compared apart
          adopt(traces, gd.data, changes);
          const drawnLayout = { ...gd.layout };
          delete drawnLayout.datarevision;
          adopt(without, drawnLayout, changes);
          Object.assign(newLayout, without);
          const drawnRevision = gd.layout.datarevision;
          const kept = !changes.data && typeof drawnRevision === "string" && drawnRevision.startsWith(OURS);
          if (kept && Array.isArray(traces)) traces.forEach((trace) => decoded(trace, 0));
          newLayout.datarevision = kept ? drawnRevision : OURS + revisions++;
        }
      } catch (error) {
        console.warn("attnviz plotly_once: figure left as given", error); // Plotly compares it as usual
      }
      return react.call(this, gd, data, layout, ...rest);
    };
    wrapped.attnvizOnce = true;
    return wrapped;
  }

  const patch = (plotly) => {
    if (plotly && typeof plotly === "object") plotly.react = once(plotly.react);
  };
  const prior = Object.getOwnPropertyDescriptor(window, "Plotly");
  if (prior && !prior.configurable) return; // nothing to hook: charts are drawn as Streamlit draws them
  let plotly = prior && "value" in prior ? prior.value : undefined;
  patch(plotly);
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    enumerable: true,
    get: () => (prior && prior.get ? prior.get() : plotly),
    set: (value) => {
      if (prior && prior.set) prior.set(value);
      plotly = value;
      patch(value);
    },
  });
  if (prior && prior.get) patch(prior.get());
})();
