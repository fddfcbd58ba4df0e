// The dashboard's only script: keeps the operator token for this tab, and refreshes
// the live part of the page without a full reload. It fetches the same page again and
// swaps in its <main id="live">: the server renders (and escapes) every value, so no
// job data ever passes through a client-side template.
(function () {
  "use strict";
  var KEY = "supervisor-dashboard-token";
  var box = document.getElementById("token");
  if (box) {
    box.value = sessionStorage.getItem(KEY) || "";
    box.addEventListener("input", function () { sessionStorage.setItem(KEY, box.value); });
  }
  // Forms are posted with the token copied in at the last moment; it is never part of
  // a page the server renders.
  document.addEventListener("submit", function (event) {
    var field = event.target.querySelector("input[name=token]");
    if (field) { field.value = sessionStorage.getItem(KEY) || (box ? box.value : ""); }
  }, true);

  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var every = live ? Number(live.getAttribute("data-refresh")) * 1000 : 0;
  if (!live || !(every > 0)) { return; }
  var refreshes = 0;

  function busy() {
    // Leave the page alone while the operator is using it: a focused control or a
    // selection (copying a traceback) inside the live part.
    var active = document.activeElement;
    if (active && active !== document.body && live.contains(active)) { return true; }
    var selection = window.getSelection();
    return selection && !selection.isCollapsed && live.contains(selection.anchorNode);
  }

  function openDetails() {
    var open = [];
    live.querySelectorAll("details").forEach(function (d, i) { open[i] = d.open; });
    return open;
  }

  function refresh() {
    if (document.hidden || busy()) { return; }
    fetch(window.location.href, { cache: "no-store", headers: { "Accept": "text/html", "X-Dashboard-Refresh": "1" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh || busy()) { return; }
        var open = openDetails();
        live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
        live.querySelectorAll("details").forEach(function (d, i) {
          if (i < open.length) { d.open = open[i]; }
        });
        refreshes += 1;
        live.setAttribute("data-refreshes", String(refreshes));
        status.textContent = "live · " + new Date().toLocaleTimeString();
        status.className = "live-status ok";
      })
      .catch(function (error) {
        status.textContent = "not updated: " + error.message;
        status.className = "live-status stale";
      });
  }

  window.setInterval(refresh, every);
})();
