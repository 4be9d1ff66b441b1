"use strict";
// Plain JS, no network: pages the heatmaps and draws a cell's timeline from the JSON embedded
// once per subject (parsed on first use). SVG is built as markup so no namespace URL is needed.
(function () {
  var LANES = JSON.parse(document.getElementById("afb-lanes").textContent);
  var cache = {};
  function data(s) {
    if (!(s in cache)) cache[s] = JSON.parse(document.getElementById("tl-" + s).textContent);
    return cache[s];
  }
  function esc(t) {
    return String(t).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function ms(us) { return us < 10000 ? us + " \u00b5s" : (us / 1000).toFixed(1) + " ms"; }
  function attemptSvg(a) {
    var used = [];
    a.ev.forEach(function (e) { if (used.indexOf(e[1]) < 0) used.push(e[1]); });
    if (used.indexOf(4) < 0) used.push(4);
    used.sort();
    // Lanes are 34px; the fault lane is taller so its state labels can stack without overlap.
    var W = 900, L = 130, top = 10, span = Math.max(a.end, 1), ys = {}, y0 = top;
    used.forEach(function (lane) { var hh = lane === 4 ? 78 : 34; ys[lane] = [y0, hh]; y0 += hh; });
    var x = function (t) { return L + (W - L - 20) * t / span; };
    var h = y0 + 24;
    var s = '<svg class="tl" width="' + W + '" height="' + h + '" viewBox="0 0 ' + W + " " + h + '">';
    if (a.win) {
      s += '<rect class="win" x="' + x(a.win[0]) + '" y="' + top + '" width="' +
        Math.max(4, x(a.win[1]) - x(a.win[0])) + '" height="' + (y0 - top) + '"><title>fault window ' +
        ms(a.win[0]) + " to " + ms(a.win[1]) + "</title></rect>";
    }
    used.forEach(function (lane) {
      var y = ys[lane][0] + ys[lane][1] - 12;
      s += '<text class="lane" x="4" y="' + (y + 4) + '">' + esc(LANES[lane]) + "</text>";
      s += '<line class="axis" x1="' + L + '" x2="' + (W - 10) + '" y1="' + y + '" y2="' + y + '"/>';
    });
    var rowsEnd = [];
    a.ev.forEach(function (e) {
      var y = ys[e[1]][0] + ys[e[1]][1] - 12, cx = x(e[0]);
      var cls = "ev l" + e[1] + (e[5] ? " dup" : "");
      s += '<circle class="' + cls + '" cx="' + cx + '" cy="' + y + '" r="5"><title>' +
        esc(ms(e[0]) + " " + e[2] + (e[3] ? " sha256:" + e[3] : "") + "\n" + e[4]) + "</title></circle>";
      if (e[1] === 4 && e[2].indexOf(" ") < 0) {
        // Greedy rows: the first row whose last label ends left of this one.
        var r = 0, w = 6 * e[2].length + 6;
        while (r < rowsEnd.length && rowsEnd[r] > cx) r++;
        rowsEnd[r] = cx + w;
        s += '<text class="lc" x="' + (cx + 2) + '" y="' + (y - 9 - (r % 5) * 11) + '">' + esc(e[2]) + "</text>";
      }
    });
    s += '<text class="lane" x="' + L + '" y="' + (h - 4) + '">0</text>';
    s += '<text class="lane" x="' + (W - 80) + '" y="' + (h - 4) + '">' + ms(span) + "</text>";
    return s + "</svg>";
  }
  function sideBySide(a) {
    var rec = a.ev.filter(function (e) { return e[2] === "actuator receipt"; });
    var wit = a.ev.filter(function (e) { return e[2].indexOf("witness: ") === 0; });
    if (!rec.length && !wit.length) return "";
    function col(list) {
      return list.map(function (e) {
        return '<div class="obs"><b>' + esc(e[2]) + "</b> at " + ms(e[0]) + '<br><code>sha256:' +
          esc(e[3]) + "</code><pre>" + esc(e[4]) + "</pre></div>";
      }).join("") || "<p>none</p>";
    }
    return '<div class="sbs"><div><h4>actuator receipt</h4>' + col(rec) +
      '</div><div><h4>witness observations</h4>' + col(wit) + "</div></div>";
  }
  function table(a) {
    var rows = a.ev.map(function (e) {
      return "<tr" + (e[5] ? ' class="dup"' : "") + "><td>" + ms(e[0]) + "</td><td>" + esc(LANES[e[1]]) +
        "</td><td>" + esc(e[2]) + "</td><td><code>" + esc(e[3].slice(0, 16)) + "</code></td><td>" +
        esc(e[4]) + "</td></tr>";
    }).join("");
    return '<table class="events"><tr><th>t</th><th>lane</th><th>event</th><th>line hash</th>' +
      "<th>detail</th></tr>" + rows + "</table>";
  }
  function show(el) {
    // Subject and task come from the enclosing section and row: one copy, not one per cell.
    var d = el.dataset, panel = document.getElementById("timeline"), sec = el.closest("section");
    var attempts = data(sec.id.slice(5))[d.cell] || [];
    var task = el.closest("tr").firstElementChild.textContent;
    var head = "<h3>" + esc(sec.dataset.subject) + " · " + esc(task) + " · " + esc(d.kind) + " · seed " +
      esc(d.seed) + "</h3><p><code>" + esc(d.cell) + "</code>" + (d.st ? " · " + esc(d.st) : "") +
      (d.ev ? " · evidence: " + esc(d.ev) : "") + "</p>";
    if (!attempts.length) head += "<p>no journal for this cell (never run)</p>";
    panel.innerHTML = head + attempts.map(function (a) {
      return '<div class="attempt"><h4>attempt ' + a.n + (a.j ? " · evaluator: " + esc(a.j) : "") + "</h4>" + attemptSvg(a) + sideBySide(a) + table(a) + "</div>";
    }).join("");
    panel.hidden = false;
    document.querySelectorAll(".cell.sel").forEach(function (c) { c.classList.remove("sel"); });
    el.classList.add("sel");
  }
  document.addEventListener("click", function (ev) {
    var t = ev.target.closest ? ev.target.closest(".cell") : null;
    if (t) { show(t); return; }
    var b = ev.target.closest ? ev.target.closest("button.pg") : null;
    if (b) {
      var grid = document.getElementById(b.dataset.grid);
      grid.querySelectorAll("tbody.page").forEach(function (p) { p.hidden = p.dataset.page !== b.dataset.page; });
    }
  });
})();
