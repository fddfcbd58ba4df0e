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
  var banner = null;
  var lastGood = new Date().toLocaleTimeString();

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
        return response.text().then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          if (!response.ok) {
            // The server's own line ("database unreachable since ... UTC: ...") when
            // it sent one; the figures stay on screen, greyed out, as they were.
            var said = doc.getElementById("error");
            throw new Error(said ? said.textContent : "HTTP " + response.status);
          }
          return doc;
        });
      })
      .then(function (doc) {
        var fresh = doc.getElementById("live");
        if (!fresh || busy()) { return; }
        var open = openDetails();
        live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
        live.querySelectorAll("details").forEach(function (d, i) {
          if (i < open.length) { d.open = open[i]; }
        });
        refreshes += 1;
        lastGood = new Date().toLocaleTimeString();
        live.setAttribute("data-refreshes", String(refreshes));
        status.textContent = "live · " + new Date().toLocaleTimeString();
        status.className = "live-status ok";
        live.classList.remove("stale-data");
        if (banner) { banner.remove(); banner = null; }
      })
      .catch(function (error) {
        status.textContent = "not updated: " + error.message;
        status.className = "live-status stale";
        live.classList.add("stale-data");
        if (!banner) {
          banner = document.createElement("p");
          banner.id = "stale-banner";
          banner.className = "stale-banner";
          live.parentNode.insertBefore(banner, live);
        }
        banner.textContent = "Not updated: " + error.message + ". The figures below are from "
          + lastGood + " and may be out of date.";
      });
  }

  window.setInterval(refresh, every);
})();
