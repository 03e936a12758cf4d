// locust-llm: live charts under Locust's LLM tab (Locust's extended tabs hold tables only).
// Loaded by the index page (llm_users/webui/tab.py); polls llm/live.json every 2 s while the LLM
// tab is open and draws one SVG line chart per series: TTFT and ITL p50/p99, output tokens/s,
// goodput when SLOs are set, GPU utilization when a sidecar is scraped.
(function () {
  "use strict";
  var COLORS = ["#2979ff", "#ff5252", "#00c853", "#ffab00"];
  var CHARTS = [
    { id: "ttft", title: "TTFT (ms)", keys: [["ttftP50", "p50"], ["ttftP99", "p99"]] },
    { id: "itl", title: "ITL (ms)", keys: [["itlP50", "p50"], ["itlP99", "p99"]] },
    { id: "tokens", title: "Output tokens/s", keys: [["outTokS", "tokens/s"]] },
    { id: "goodput", title: "Goodput (requests/s meeting every SLO)", keys: [["goodputS", "goodput/s"], ["reqS", "requests/s"]], when: "slos" },
    { id: "gpu", title: "GPU utilization (%)", keys: [["gpuUtil", "GPU %"]], when: "gpu" }
  ];

  function onTab() {
    return new URLSearchParams(window.location.search).get("tab") === "llm";
  }

  // Under the tab's table when there is one (a sibling React does not manage), else at the end.
  function box() {
    var el = document.getElementById("llm-charts");
    var table = document.querySelector("table");
    var anchor = table && (table.closest(".MuiPaper-root") || table.parentElement);
    if (!el) {
      el = document.createElement("div");
      el.id = "llm-charts";
      el.style.cssText = "display:none;flex-wrap:wrap;gap:12px;padding:12px 0;font:12px sans-serif;";
    }
    if (anchor && anchor.parentElement && anchor.nextSibling !== el) {
      anchor.parentElement.insertBefore(el, anchor.nextSibling);
    } else if (!anchor && el.parentElement !== document.body) {
      document.body.appendChild(el);
    }
    return el;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  function clock(t) {
    return new Date(t * 1000).toTimeString().slice(0, 8);
  }

  function chart(spec, series) {
    var W = 420, H = 180, L = 44, R = 8, T = 34, B = 20;
    var xs = series.map(function (p) { return p.time; });
    var t0 = xs.length ? xs[0] : 0, t1 = xs.length ? xs[xs.length - 1] : 1;
    var ymax = 0;
    series.forEach(function (p) {
      spec.keys.forEach(function (k) { if (p[k[0]] !== null && p[k[0]] !== undefined) ymax = Math.max(ymax, p[k[0]]); });
    });
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    function x(t) { return L + (W - L - R) * (t1 > t0 ? (t - t0) / (t1 - t0) : 0); }
    function y(v) { return T + (H - T - B) * (1 - v / ymax); }
    var out = '<svg class="llm-chart" data-chart="' + spec.id + '" width="' + W + '" height="' + H +
      '" style="background:rgba(127,127,127,0.08);border-radius:6px">';
    out += '<text x="' + L + '" y="14" fill="currentColor" font-weight="bold">' + spec.title + "</text>";
    out += '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + (W - R) + '" y2="' + (H - B) + '" stroke="#888"/>';
    out += '<line x1="' + L + '" y1="' + T + '" x2="' + L + '" y2="' + (H - B) + '" stroke="#888"/>';
    out += '<text x="' + (L - 4) + '" y="' + (T + 4) + '" text-anchor="end" fill="currentColor">' + fmt(ymax) + "</text>";
    out += '<text x="' + (L - 4) + '" y="' + (H - B) + '" text-anchor="end" fill="currentColor">0</text>';
    if (xs.length) {
      out += '<text x="' + L + '" y="' + (H - 6) + '" fill="currentColor">' + clock(t0) + "</text>";
      out += '<text x="' + (W - R) + '" y="' + (H - 6) + '" text-anchor="end" fill="currentColor">' + clock(t1) + "</text>";
    }
    spec.keys.forEach(function (k, i) {
      var color = COLORS[i % COLORS.length], segs = [], cur = [], last = null;
      series.forEach(function (p) {
        var v = p[k[0]];
        if (v === null || v === undefined) { if (cur.length) segs.push(cur); cur = []; return; }
        cur.push(x(p.time).toFixed(1) + "," + y(v).toFixed(1));
        last = v;
      });
      if (cur.length) segs.push(cur);
      segs.forEach(function (s) {
        if (s.length === 1) s.push(s[0]);
        out += '<polyline fill="none" stroke-width="1.6" stroke="' + color + '" points="' + s.join(" ") + '"/>';
      });
      out += '<text class="llm-legend" x="' + (L + 110 * i) + '" y="28" fill="' + color + '">' + k[1] +
        " " + fmt(last) + "</text>";
    });
    return out + "</svg>";
  }

  function tick() {
    var el = box();
    if (!onTab()) { el.style.display = "none"; return; }
    fetch("./llm/live.json", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (d) {
        el.style.display = "flex";
        el.innerHTML = CHARTS.filter(function (c) { return !c.when || d[c.when]; })
          .map(function (c) { return chart(c, d.series); }).join("");
      })
      .catch(function () {});
  }

  tick();
  window.setInterval(tick, 2000);
})();
