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
