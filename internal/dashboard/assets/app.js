// MeshFlows console: live catalog updates and the events tail by long poll, the admin token on write actions,
// and a progress state on buttons. Every page works without it.
(function () {
  "use strict";
  function token() {
    var t = document.getElementById("token");
    if (t && t.value) { sessionStorage.setItem("mf-token", t.value); }
    return sessionStorage.getItem("mf-token") || "";
  }
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f.classList.contains("write")) { return; }
    var tok = token();
    if (tok) {
      var h = document.createElement("input");
      h.type = "hidden"; h.name = "token"; h.value = tok; f.appendChild(h);
    }
    var b = f.querySelector("button");
    if (b) { b.disabled = true; b.classList.add("busy"); b.textContent = b.textContent + "…"; }
    // a long action (re-validating against every provider) shows that it works
    if (f.getAttribute("data-progress")) {
      var p = document.createElement("progress");
      p.className = "working"; p.title = f.getAttribute("data-progress"); p.setAttribute("aria-label", p.title);
      f.appendChild(p);
    }
  });
  // A diagnostic's breadcrumb highlights its line, whose tooltip then shows.
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[data-anchor]");
    if (!a) { return; }
    document.querySelectorAll("ol.src li.hl").forEach(function (li) { li.classList.remove("hl"); });
    var li = document.getElementById(a.getAttribute("data-anchor"));
    if (li) { li.classList.add("hl"); }
  });
  // Events: the live tail asks for what comes after the newest row shown, and prepends it.
  var events = document.getElementById("events");
  if (events) {
    var rowsBox = document.getElementById("event-rows"), state = document.getElementById("tail-state");
    var tail = function () {
      var q = new URLSearchParams(events.getAttribute("data-query") || "");
      q.set("since", events.getAttribute("data-next") || "0");
      fetch("/events/fragment?" + q.toString()).then(function (r) {
        if (!r.ok) { throw new Error(r.status); }
        var next = r.headers.get("X-Next-Since");
        return r.text().then(function (html) {
          if (html.trim() !== "") {
            rowsBox.insertAdjacentHTML("afterbegin", html);
            var none = document.getElementById("no-events");
            if (none) { none.remove(); }
          }
          if (next) { events.setAttribute("data-next", next); }
          state.textContent = "live";
        });
      }).then(tail, function () { state.textContent = "reconnecting"; setTimeout(tail, 2000); });
    };
    tail();
  }
  // Route map: zoom (wheel, buttons) and pan (drag) by the viewBox; the minimap's frame
  // follows, and a click on the minimap centres the view there.
  var map = document.getElementById("routemap");
  if (map) {
    var W = +map.getAttribute("data-width"), H = +map.getAttribute("data-height");
    var view = { x: 0, y: 0, w: W, h: H }, frame = document.getElementById("minimap-view");
    var apply = function () {
      map.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
      if (frame) { frame.setAttribute("x", view.x); frame.setAttribute("y", view.y); frame.setAttribute("width", view.w); frame.setAttribute("height", view.h); }
    };
    var zoom = function (f, cx, cy) { // f < 1 zooms in, around (cx, cy) in map units
      var w = Math.min(Math.max(view.w * f, W / 20), W * 2), h = w * H / W;
      view.x = cx - (cx - view.x) * w / view.w; view.y = cy - (cy - view.y) * h / view.h; view.w = w; view.h = h; apply();
    };
    var toMap = function (e) {
      var r = map.getBoundingClientRect();
      return { x: view.x + (e.clientX - r.left) * view.w / r.width, y: view.y + (e.clientY - r.top) * view.h / r.height };
    };
    map.addEventListener("wheel", function (e) { e.preventDefault(); var p = toMap(e); zoom(e.deltaY < 0 ? 0.8 : 1.25, p.x, p.y); }, { passive: false });
    var drag = null;
    map.addEventListener("mousedown", function (e) { drag = { x: e.clientX, y: e.clientY, moved: false }; });
    window.addEventListener("mousemove", function (e) {
      if (!drag) { return; }
      var r = map.getBoundingClientRect();
      var dx = (e.clientX - drag.x) * view.w / r.width, dy = (e.clientY - drag.y) * view.h / r.height;
      if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3) { drag.moved = true; }
      view.x -= dx; view.y -= dy; drag.x = e.clientX; drag.y = e.clientY; apply();
    });
    window.addEventListener("mouseup", function () { setTimeout(function () { drag = null; }, 0); });
    map.addEventListener("click", function (e) { if (drag && drag.moved) { e.preventDefault(); } }, true); // a drag is not a click on a node
    document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.8, view.x + view.w / 2, view.y + view.h / 2); });
    document.getElementById("zoom-out").addEventListener("click", function () { zoom(1.25, view.x + view.w / 2, view.y + view.h / 2); });
    document.getElementById("zoom-reset").addEventListener("click", function () { view = { x: 0, y: 0, w: W, h: H }; apply(); });
    var mini = document.getElementById("minimap");
    if (mini) {
      mini.addEventListener("click", function (e) {
        var r = mini.getBoundingClientRect(), s = Math.max(W / r.width, H / r.height);
        var ox = (r.width - W / s) / 2, oy = (r.height - H / s) / 2;
        view.x = (e.clientX - r.left - ox) * s - view.w / 2; view.y = (e.clientY - r.top - oy) * s - view.h / 2; apply();
      });
    }
    apply();
    if (window.performance && performance.mark) { performance.mark("routemap-ready"); }
  }
  var tableBox = document.getElementById("captable");
  if (!tableBox) { return; }
  // At most one table per X-Refresh-After milliseconds (one second, more when the registry
  // took long to count the catalog): each costs the registry a pass over its records (a few
  // hundred milliseconds of CPU at a million instances), and a large fleet changes all the time.
  var last = 0, every = 1000;
  function poll() {
    var wait = last + every - Date.now();
    if (wait > 0) { setTimeout(poll, wait); return; }
    last = Date.now();
    var rev = tableBox.getAttribute("data-revision") || "0";
    var q = new URLSearchParams(window.location.search);
    q.set("index", rev);
    fetch("/capabilities/fragment?" + q.toString()).then(function (r) {
      if (!r.ok) { throw new Error(r.status); }
      var next = r.headers.get("X-Registry-Revision");
      every = parseInt(r.headers.get("X-Refresh-After"), 10) || 1000;
      return r.text().then(function (html) {
        if (next && next !== rev) { tableBox.innerHTML = html; tableBox.setAttribute("data-revision", next); }
      });
    }).then(poll, function () { setTimeout(poll, 2000); });
  }
  poll();
})();
