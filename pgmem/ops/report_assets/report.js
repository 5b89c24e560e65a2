(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#3563c9", "#e0803a", "#3a9d5d", "#c94a4a", "#8a5cc2", "#2aa3b0", "#b59a2b", "#d0609f",
                "#6b7a8f", "#4f8a3a"];
  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return Math.round(v * 100) / 100 + "";
  }
  function empty(svg, w, h, text) {
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    el("text", {x: w / 2, y: h / 2, "text-anchor": "middle", fill: "#889"}, svg, text);
    return 0;
  }
  function legend(svg, series, x, y) {
    series.forEach(function (s, i) {
      var g = el("g", {transform: "translate(" + (x + (i % 6) * 130) + "," + (y + Math.floor(i / 6) * 18) + ")"}, svg);
      el("rect", {width: 10, height: 10, y: -9, fill: s.color}, g);
      el("text", {x: 14, y: 0, "font-size": 12}, g, s.name.length > 16 ? s.name.slice(0, 15) + "\u2026" : s.name);
    });
  }
  function axes(svg, m, w, h, max, labels, slot) {
    var H = h - m.t - m.b;
    [0, 0.5, 1].forEach(function (f) {
      var y = m.t + H - f * H;
      el("line", {x1: m.l, x2: w - m.r, y1: y, y2: y, stroke: "#e3e5ea"}, svg);
      el("text", {x: m.l - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#667"}, svg, fmt(max * f));
    });
    var every = Math.max(1, Math.ceil(labels.length / 9));
    labels.forEach(function (label, i) {
      if (i % every) return;
      el("text", {x: m.l + slot * (i + 0.5), y: h - m.b + 14, "text-anchor": "middle", "font-size": 11,
                  fill: "#667"}, svg, label);
    });
  }
  function bars(svg, chart, grouped) {
    var labels = chart.labels, series = chart.series.map(function (s, i) {
      return {name: s.name, values: s.values, color: COLORS[i % COLORS.length]};
    }).filter(function (s) { return s.values.some(Boolean); });
    var w = 860, legendRows = Math.ceil(series.length / 6), h = 260 + 18 * legendRows;
    if (!labels.length || !series.length) return empty(svg, w, 120, "nothing to draw in this scope");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var m = {l: 48, r: 12, t: 10 + 18 * legendRows, b: 26}, W = w - m.l - m.r, H = h - m.t - m.b;
    var slot = W / labels.length, max = 0;
    labels.forEach(function (_, i) {
      var sum = 0;
      series.forEach(function (s) { sum = grouped ? Math.max(sum, s.values[i]) : sum + s.values[i]; });
      max = Math.max(max, sum);
    });
    max = max || 1;
    legend(svg, series, m.l, 14);
    axes(svg, m, w, h, max, labels, slot);
    var drawn = 0;
    labels.forEach(function (label, i) {
      var base = 0;
      series.forEach(function (s, j) {
        var v = s.values[i];
        if (!v) return;
        var bh = v / max * H, x, bw;
        if (grouped) {
          bw = Math.min(48, slot * 0.8 / series.length);
          x = m.l + slot * (i + 0.5) - bw * series.length / 2 + j * bw;
          base = 0;
        } else { bw = Math.max(1, Math.min(64, slot * 0.7)); x = m.l + slot * (i + 0.5) - bw / 2; }
        var r = el("rect", {x: x, y: m.t + H - base - bh, width: bw, height: Math.max(bh, 0.5),
                            fill: s.color, "class": "mark"}, svg);
        el("title", {}, r, s.name + " @ " + label + ": " + fmt(v));
        if (!grouped) base += bh;
        drawn++;
      });
    });
    return drawn;
  }
  function flow(svg, chart) {
    var edges = chart.edges.filter(function (e) { return e.edges > 0; });
    if (!edges.length) return empty(svg, 860, 120, "no action flow in this scope");
    var order = [];
    edges.forEach(function (e) {
      if (order.indexOf(e.from) < 0) order.push(e.from);
      if (order.indexOf(e.to) < 0) order.push(e.to);
    });
    var back = edges.some(function (e) { return order.indexOf(e.to) < order.indexOf(e.from); });
    var gap = 170, w = Math.max(860, order.length * gap + 40), h = back ? 320 : 200, cy = 145, bw = 136, bh = 34;
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var defs = el("defs", {}, svg);
    var marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 11,
                               markerHeight: 11, markerUnits: "userSpaceOnUse", orient: "auto"}, defs);
    el("path", {d: "M0,0 L10,5 L0,10 z", fill: "#556"}, marker);
    var x0 = (w - (order.length - 1) * gap) / 2;
    function cx(name) { return x0 + order.indexOf(name) * gap; }
    var most = Math.max.apply(null, edges.map(function (e) { return e.edges; }));
    var drawn = 0;
    edges.forEach(function (e) {
      var a = cx(e.from), b = cx(e.to), d, lx, ly, width = 1.5 + 4 * e.edges / most;
      if (e.from === e.to) {
        d = "M" + (a - 18) + "," + (cy - bh / 2) + " C" + (a - 40) + "," + (cy - 95) + " " + (a + 40) + "," +
            (cy - 95) + " " + (a + 18) + "," + (cy - bh / 2);
        lx = a; ly = cy - 82;
      } else {
        var forward = b > a, lift = Math.min(130, 40 + Math.abs(b - a) / 4), y = forward ? cy - bh / 2 : cy + bh / 2;
        var apex = forward ? y - lift : y + lift;
        d = "M" + a + "," + y + " Q" + ((a + b) / 2) + "," + apex + " " + b + "," + y;
        lx = (a + b) / 2; ly = forward ? y - lift / 2 - 4 : y + lift / 2 + 14;
      }
      var p = el("path", {d: d, fill: "none", stroke: "#556", "stroke-width": width, "marker-end": "url(#arrow)",
                          "class": "mark", "stroke-opacity": 0.75}, svg);
      el("title", {}, p, e.from + " \u2192 " + e.to + ": " + e.edges + " (median " + fmt(e.median_delay_s) + " s)");
      el("text", {x: lx, y: ly, "text-anchor": "middle", "font-size": 12, fill: "#1d2330"}, svg,
         e.edges + "\u00d7 \u00b7 " + fmt(e.median_delay_s) + " s");
      drawn++;
    });
    order.forEach(function (name, i) {
      var x = cx(name);
      el("rect", {x: x - bw / 2, y: cy - bh / 2, width: bw, height: bh, rx: 8, fill: COLORS[i % COLORS.length],
                  "class": "node"}, svg);
      el("text", {x: x, y: cy + 5, "text-anchor": "middle", fill: "#fff", "font-size": 13, "font-weight": 600}, svg,
         name.length > 18 ? name.slice(0, 17) + "\u2026" : name);
    });
    svg.setAttribute("data-nodes", order.length);
    return drawn;
  }
  var total = 0;
  try {
    var charts = JSON.parse(document.getElementById("pgmem-data").textContent);
    Array.prototype.forEach.call(document.querySelectorAll("svg.chart"), function (svg) {
      var chart = charts[svg.getAttribute("data-chart")];
      var n = chart.kind === "flow" ? flow(svg, chart) : bars(svg, chart, chart.kind === "grouped");
      svg.setAttribute("data-drawn", n);
      total += n;
    });
    document.body.setAttribute("data-charts-drawn", total);
  } catch (err) {
    document.body.setAttribute("data-chart-error", String(err && err.stack || err));
  }
})();
