// locust-llm: the LLM tab's live charts and the start form's LLM group (llm_users/webui/tab.py).
// Charts: ECharts, the library Locust's own charts use, in the same options (title, axis tooltip,
// time axis, legend, zoom and PNG toolbox, light/dark colours); Locust bundles it unexported, so
// the page loads the vendored build from ./llm/echarts.min.js (nothing from the internet). While
// the LLM tab is open it polls ./llm/live.json every 2 s. Null points (a second without a
// sample) are skipped, so lines never break; one unit per axis (a second unit on a right-hand
// axis). Start form: one "LLM settings" group of inputs named by the options' dest (llm_slo,
// ...); Locust's form sends every named input it holds.
(function () {
  "use strict";
  var THEMES = {  // Locust's own chart colours (its J9 constant)
    dark: { text: "#b3c3bc", axis: "#5b6f66", background: "#27272a", split: "#4c4c52" },
    light: { text: "#000", axis: "#000", background: "#fff", split: "#ddd" }
  };
  // lines: [key, name, axis]; axes: one unit per axis (the second on the right), named by its unit
  var CHARTS = [
    { id: "tokens", title: "Output tokens/s (by chunk arrival)", lines: [["outTokS", "Output tokens/s"]], colors: ["#00ca5a"] },
    { id: "ttft", title: "Time to first token (ms)", lines: [["ttftP50", "p50"], ["ttftP99", "p99"]], colors: ["#ff9f00", "#9966CC"],
      slo: "ttft" },
    { id: "itl", title: "Inter-token latency (ms)", lines: [["itlP50", "p50"], ["itlP99", "p99"]], colors: ["#ff9f00", "#9966CC"] },
    { id: "goodput", title: "Requests/s, goodput/s (measured requests meeting every SLO) and users",
      lines: [["reqS", "Requests/s", 0], ["goodputS", "Goodput/s", 0], ["users", "Users", 1]], axes: ["req/s", "users"],
      colors: ["#00ca5a", "#3E98C5", "#888888"], when: "slos" },
    { id: "requests", title: "Requests/s and users", lines: [["reqS", "Requests/s", 0], ["users", "Users", 1]],
      axes: ["req/s", "users"], colors: ["#00ca5a", "#888888"], unless: "slos" },
    { id: "openloop", title: "In flight (mean) and arrivals/s", lines: [["inflight", "In flight", 0], ["arrivalS", "Arrivals/s", 1]],
      axes: ["requests", "req/s"], colors: ["#ff6d6d", "#3E98C5"], when: "openLoop" },
    { id: "gpu", title: "GPU utilization (%)", lines: [["gpuUtil", "GPU %"]], colors: ["#9966CC"], when: "gpu" },
    { id: "server", title: "Server: running and waiting requests, queue time (its /metrics)",
      lines: [["srvRunning", "Running", 0], ["srvWaiting", "Waiting", 0], ["srvQueueMs", "Queue time (ms)", 1]],
      axes: ["requests", "ms"], colors: ["#00ca5a", "#ff6d6d", "#9966CC"], when: "server" }
  ];
  var charts = {};
  var echartsLoading = null;

  function loadECharts() {
    if (window.echarts) return Promise.resolve(window.echarts);
    if (!echartsLoading) {
      echartsLoading = new Promise(function (resolve, reject) {
        var s = document.createElement("script");
        s.src = "./llm/echarts.min.js";
        s.onload = function () { resolve(window.echarts); };
        s.onerror = function () { echartsLoading = null; reject(new Error("echarts")); };
        document.head.appendChild(s);
      });
    }
    return echartsLoading;
  }

  function onTab() {
    return new URLSearchParams(window.location.search).get("tab") === "llm";
  }

  function dark() {  // Locust's rule: the saved theme, else the system's
    var saved = window.localStorage && localStorage.theme;
    return saved ? saved === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  // Under the tab's table when there is one (a sibling React does not manage), else at the end.
  function box() {
    var el = document.getElementById("llm-charts");
    var table = document.querySelector("table");
    var anchor = table && (table.closest(".MuiPaper-root") || table.parentElement);
    if (!el) {
      el = document.createElement("div");
      el.id = "llm-charts";
      el.style.cssText = "display:none;flex-direction:column;gap:16px;padding:16px 0;";
    }
    if (anchor && anchor.parentElement && anchor.nextSibling !== el) {
      anchor.parentElement.insertBefore(el, anchor.nextSibling);
    } else if (!anchor && el.parentElement !== document.body) {
      document.body.appendChild(el);
    }
    return el;
  }

  function options(spec) {  // Locust's chart options (its Tte function), for one of ours
    var axis = { type: "value", boundaryGap: [0, "5%"] };
    var axes = (spec.axes || []).map(function (unit, i) {  // the second on the right, its grid lines off
      return { type: "value", boundaryGap: [0, "5%"], name: unit, nameTextStyle: { align: i ? "right" : "left" },
               splitLine: { show: i === 0 } };
    });
    return {
      title: { text: spec.title, left: "left" },
      tooltip: { trigger: "axis", borderWidth: 0 },
      xAxis: { type: "time", splitNumber: window.innerWidth < 900 ? 2 : 7, minInterval: 1,
               axisLabel: { formatter: function (v) { return new Date(v).toLocaleTimeString(); } } },
      grid: { left: 60, right: axes.length > 1 ? 60 : 40 },
      yAxis: axes.length ? axes : axis,
      color: spec.colors,
      legend: { top: 25, icon: "circle" },
      toolbox: { right: 10, feature: { dataZoom: { yAxisIndex: false }, saveAsImage: { title: "Download as PNG",
                 name: "llm_" + spec.id } } },
      series: spec.lines.map(function (l) {
        return { name: l[1], type: "line", symbolSize: 4, showSymbol: false, connectNulls: true, data: [],
                 yAxisIndex: l[2] || 0 };
      })
    };
  }

  function themed(chart, spec) {
    var t = THEMES[dark() ? "dark" : "light"];
    var yAxis = (spec.axes || [0]).map(function () {
      return { axisLine: { lineStyle: { color: t.axis } }, splitLine: { lineStyle: { color: t.split } } };
    });
    chart.setOption({
      backgroundColor: t.background, textStyle: { color: t.text }, title: { textStyle: { color: t.text } },
      legend: { inactiveColor: t.text, textStyle: { color: t.text } },
      tooltip: { backgroundColor: t.background, textStyle: { color: t.text } },
      xAxis: { axisLine: { lineStyle: { color: t.axis } } },
      yAxis: yAxis
    });
  }

  function points(series, key) {  // [ms, value] pairs; a second without a value is left out
    var out = [];
    series.forEach(function (p) {
      var v = p[key];
      if (v !== null && v !== undefined) out.push([p.time * 1000, v]);
    });
    return out;
  }

  function marks(stages, slo) {  // a dashed line at each stage's start (--llm-steps, --llm-stages, sweeps)
    var data = (stages || []).map(function (s) { return { name: s.label, xAxis: s.time * 1000 }; });
    if (slo) {  // and the SLO's limit, when the chart's metric has one
      data.push({ name: "SLO " + slo + " ms", yAxis: slo, lineStyle: { color: "#ff6d6d" },
                  label: { position: "insideEndTop", color: "#ff6d6d" } });
    }
    return { symbol: "none", silent: true, lineStyle: { type: "dashed", color: "#888" },
             label: { formatter: "{b}", position: "insideEndTop" }, data: data };
  }

  function draw(echarts, el, d) {
    var wanted = CHARTS.filter(function (c) { return (!c.when || d[c.when]) && !(c.unless && d[c.unless]); });
    Object.keys(charts).forEach(function (id) {
      var keep = wanted.some(function (c) { return c.id === id; });
      if (!keep || !el.contains(charts[id].getDom())) {
        charts[id].dispose();
        var node = el.querySelector('[data-chart="' + id + '"]');
        if (node) node.remove();
        delete charts[id];
      }
    });
    wanted.forEach(function (spec) {
      var chart = charts[spec.id];
      if (!chart) {
        var div = document.createElement("div");
        div.className = "llm-chart";
        div.setAttribute("data-chart", spec.id);
        div.style.cssText = "width:100%;height:300px;";
        el.appendChild(div);
        chart = charts[spec.id] = echarts.init(div);
        chart.setOption(options(spec));
      }
      themed(chart, spec);
      var first = d.series.length ? d.series[0].time : null, last = d.series.length ? d.series[d.series.length - 1].time : null;
      (d.stages || []).forEach(function (m) { if (first !== null && m.time < first) first = m.time; });
      var span = first === null ? {} : { min: first * 1000, max: last * 1000 };  // one range for every chart
      var slo = spec.slo && (d.sloMs || {})[spec.slo];
      var yAxis = slo ? { max: function (v) { return Math.max(v.max, slo * 1.1); } } : {};  // the SLO line in view
      chart.setOption({ xAxis: span, yAxis: yAxis, series: spec.lines.map(function (l, i) {
        var s = { data: points(d.series, l[0]) };
        if (i === 0) s.markLine = marks(d.stages, slo);
        return s;
      }) });
      chart.resize();
    });
  }

  function showNotes(el, notes) {  // the console's notes since the reset (a connection per request), above the charts
    var box = el.querySelector("#llm-notes");
    if (!box) {
      box = document.createElement("div");
      box.id = "llm-notes";
      box.style.cssText = "font-size:0.85rem;opacity:0.85;";
      el.insertBefore(box, el.firstChild);
    }
    box.textContent = "";
    (notes || []).forEach(function (n) {
      var p = document.createElement("p");
      p.className = "llm-note";
      p.style.margin = "0";
      p.textContent = "note: " + n;
      box.appendChild(p);
    });
  }

  function tick() {
    var el = box();
    if (!onTab()) { el.style.display = "none"; return; }
    Promise.all([loadECharts(), fetch("./llm/live.json", { cache: "no-store" }).then(function (r) { return r.json(); })])
      .then(function (got) {
        el.style.display = "flex";
        showNotes(el, got[1].notes);
        draw(got[0], el, got[1]);
      })
      .catch(function () {});
  }

  // The start form's LLM group -------------------------------------------------------------
  function startForm() {  // Locust's start form (user count and host; its Edit form has no host)
    var host = document.querySelector("form input[name='host']");
    var form = host && host.closest("form");
    if (!form || !form.querySelector("input[name='userCount']") || form.querySelector("#llm-form")) return null;
    return form.querySelector("button[type='submit']") ? form : null;
  }

  var formLoading = false;

  function addFormGroup() {
    var form = startForm();
    if (!form || formLoading) return;
    formLoading = true;
    fetch("./llm/form.json", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (d) {
        formLoading = false;
        form = startForm();
        if (!form) return;
        var submit = form.querySelector("button[type='submit']");
        var group = document.createElement("fieldset");
        group.id = "llm-form";
        group.style.cssText = "border:1px solid rgba(127,127,127,0.4);border-radius:4px;padding:8px 14px 12px;" +
          "margin:0;display:flex;flex-direction:column;gap:6px;font-family:Roboto,Helvetica,Arial,sans-serif;";
        var legend = document.createElement("legend");
        legend.textContent = "LLM settings (locust-llm)";
        legend.style.cssText = "padding:0 6px;font-size:0.95rem;";
        group.appendChild(legend);
        d.groups.forEach(function (g) {
          var h = document.createElement("div");
          h.className = "llm-form-heading";
          h.textContent = g.title;
          h.style.cssText = "font-weight:500;font-size:0.85rem;opacity:0.75;margin-top:6px;";
          group.appendChild(h);
          g.fields.forEach(function (f) {
            var label = document.createElement("label");
            label.style.cssText = "display:grid;grid-template-columns:13em 1fr;align-items:center;gap:8px;font-size:0.85rem;";
            var flag = document.createElement("code");
            flag.textContent = f.flag;
            var input = document.createElement("input");
            input.name = f.name;
            input.value = f.value;
            input.placeholder = f.hint;
            input.title = f.flag + ": " + f.hint + (f.readonly ? " (set when locust starts)" : "");
            input.setAttribute("data-flag", f.flag);
            input.style.cssText = "padding:5px 8px;border:1px solid rgba(127,127,127,0.5);border-radius:4px;" +
              "background:transparent;color:inherit;font:inherit;min-width:0;";
            if (f.readonly) {  // read when locust starts (the price, the stage plan): shown, not changed
              input.readOnly = true;
              input.style.background = "rgba(127,127,127,0.15)";
              input.placeholder = "set when locust starts";
            }
            label.appendChild(flag);
            label.appendChild(input);
            group.appendChild(label);
          });
        });
        submit.parentElement.insertBefore(group, submit);
      })
      .catch(function () { formLoading = false; });
  }

  tick();
  window.setInterval(tick, 2000);
  addFormGroup();
  new MutationObserver(addFormGroup).observe(document.body, { childList: true, subtree: true });
})();
