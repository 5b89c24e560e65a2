// Draws the report's charts with plotly.js (inlined before this script), then writes what plotly.js holds
// for each (its computed points, axis titles, tick labels, the marks in its SVG) into <pre id="pgmem-drawn">
// as JSON, and the non-zero marks of each chart into its element's data-drawn: what the tests compare with
// the SQL. An error is written on <body data-chart-error>.
(function () {
  "use strict";
  var CONFIG = {displaylogo: false, responsive: true};
  var charts = JSON.parse(document.getElementById("pgmem-data").textContent);
  var drawn = {};

  function texts(gd, selector) {
    return Array.prototype.map.call(gd.querySelectorAll(selector), function (t) { return t.textContent; });
  }

  function layout(chart) {
    return {
      barmode: chart.kind === "stacked" ? "stack" : "group",
      margin: {l: 16, r: 16, t: 36, b: 16},  // t: room for the mode bar above the legend
      hovermode: "closest",
      xaxis: {type: chart.x_type, title: {text: chart.x_title}, automargin: true},
      // Every chart counts: integer ticks only (a step of 1, 2, 5, 10… chosen by the report).
      yaxis: {title: {text: chart.y_title}, rangemode: "tozero", tickmode: "linear", tick0: 0,
              dtick: chart.y_step, tickformat: ",d", automargin: true}
    };
  }

  function traces(chart) {
    return chart.traces.map(function (t) {
      if (chart.kind === "lines") {
        return {type: "scatter", mode: "lines+markers", name: t.name, x: t.x, y: t.y};
      }
      var bar = {type: "bar", name: t.name, x: t.x, y: t.y};
      if (chart.x_type === "date") bar.width = chart.bucket_ms * 0.8;  // a bar per bucket, not per pixel gap
      return bar;
    });
  }

  // What plotly.js computed for each trace: x (ms since the epoch, UTC, on a date axis; the category on a
  // category axis) and y of every point.
  function readBack(gd, chart) {
    var xa = gd._fullLayout.xaxis;
    var read = gd.calcdata.map(function (cd) {
      var trace = cd[0].trace, bar = trace.type === "bar";
      return {
        name: trace.name,
        x: cd.map(function (p) {
          var x = bar ? p.p : p.x;
          return xa.type === "category" ? xa._categories[x] : x;
        }),
        y: cd.map(function (p) { return bar ? p.s : p.y; })
      };
    });
    var marks = gd.querySelectorAll(chart.kind === "lines" ? ".scatterlayer .point" : ".barlayer .point").length;
    var nonzero = 0;
    read.forEach(function (t) { t.y.forEach(function (y) { if (y) nonzero++; }); });
    return {traces: read, marks: marks, nonzero: nonzero, x_title: texts(gd, ".g-xtitle text").join(" "),
            y_title: texts(gd, ".g-ytitle text").join(" "), y_ticks: texts(gd, ".ytick text")};
  }

  function plot(el, chart) {
    if (!chart.traces.length) {
      el.innerHTML = "<p class='empty'>nothing to draw in this scope</p>";
      el.style.height = "auto";
      drawn[el.getAttribute("data-chart")] = {traces: [], marks: 0, nonzero: 0};
      el.setAttribute("data-drawn", 0);
      return Promise.resolve();
    }
    return Plotly.newPlot(el, traces(chart), layout(chart), CONFIG).then(function (gd) {
      var read = readBack(gd, chart);
      drawn[el.getAttribute("data-chart")] = read;
      el.setAttribute("data-drawn", read.nonzero);
    });
  }

  function flow(el, chart) {
    var key = el.getAttribute("data-chart"), out = {graphs: [], marks: 0, nonzero: 0};
    drawn[key] = out;
    var jobs = Array.prototype.map.call(el.querySelectorAll("[data-graph]"), function (div) {
      var g = chart.graphs[+div.getAttribute("data-graph")];
      var link = {
        source: g.links.map(function (l) { return l.source; }),
        target: g.links.map(function (l) { return l.target; }),
        value: g.links.map(function (l) { return l.edges; }),
        customdata: g.links.map(function (l) { return l.median_delay_s; }),
        hovertemplate: "%{source.label} \u2192 %{target.label}: %{value} edges, median delay %{customdata} s" +
                       "<extra></extra>"
      };
      var trace = {type: "sankey", arrangement: "snap", node: {label: g.nodes, pad: 18, thickness: 16}, link: link};
      return Plotly.newPlot(div, [trace], {margin: {l: 8, r: 8, t: 8, b: 8}}, CONFIG).then(function (gd) {
        var full = gd._fullData[0];
        var links = full.link.source.map(function (s, i) {
          return [full.node.label[s], full.node.label[full.link.target[i]], full.link.value[i]];
        });
        var marks = gd.querySelectorAll(".sankey-link").length;
        out.graphs[+div.getAttribute("data-graph")] = {namespace: g.namespace, links: links, marks: marks,
                                                       nodes: gd.querySelectorAll(".sankey-node").length};
        out.marks += marks;
        out.nonzero += links.filter(function (l) { return l[2]; }).length;
      });
    });
    return Promise.all(jobs).then(function () {
      el.setAttribute("data-drawn", out.nonzero);
      el.setAttribute("data-nodes", out.graphs.reduce(function (n, g) { return n + g.nodes; }, 0));
    });
  }

  function failed(err) {
    document.body.setAttribute("data-chart-error", String(err && err.stack || err));
  }
  var jobs;
  try {
    jobs = Array.prototype.map.call(document.querySelectorAll("[data-chart]"), function (el) {
      var chart = charts[el.getAttribute("data-chart")];
      return chart.kind === "flow" ? flow(el, chart) : plot(el, chart);
    });
  } catch (err) {
    failed(err);
    return;
  }
  Promise.all(jobs).then(function () {
    var total = 0;
    for (var key in drawn) total += drawn[key].nonzero;
    document.getElementById("pgmem-drawn").textContent = JSON.stringify(drawn);
    // Cards and sections whose content is wider than they are (a table must wrap or scroll inside its card).
    var overflowing = Array.prototype.filter.call(document.querySelectorAll("main section, .card"), function (box) {
      return box.scrollWidth > box.clientWidth + 1;
    });
    document.body.setAttribute("data-overflowing", overflowing.length);
    document.body.setAttribute("data-charts-drawn", total);
  }).catch(failed);
})();
