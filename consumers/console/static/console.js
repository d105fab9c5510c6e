// convdb console: live updates over server-sent events. Pages work without this file; it only
// keeps them current. Everything inserted comes from the server, already escaped.
(function () {
  "use strict";

  var status = document.getElementById("live-status");
  function say(text) { if (status) { status.textContent = text; } }

  // Re-fetch this page and swap the regions with these ids (forms stay untouched).
  var refreshing = false, again = false;
  function refresh(ids) {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var next = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          var now = document.getElementById(id), fresh = next.getElementById(id);
          if (now && fresh) { now.replaceWith(document.importNode(fresh, true)); }
        });
      })
      .catch(function () { /* the next change tries again */ })
      .finally(function () {
        refreshing = false;
        if (again) { again = false; refresh(ids); }
      });
  }

  // EventSource gives up on a non-200 answer (e.g. 503 when the server's stream bound is
  // reached): reconnect with a growing delay instead.
  function listen(url, handlers) {
    var delay = 2000, source = null;
    function open() {
      source = new EventSource(url);
      source.onopen = function () { delay = 2000; say("Live updates on."); };
      Object.keys(handlers).forEach(function (name) {
        source.addEventListener(name, function (event) { handlers[name](event, source); });
      });
      source.onerror = function () {
        if (source.readyState === EventSource.CLOSED) {
          say("Live updates paused; retrying.");
          setTimeout(open, delay);
          delay = Math.min(delay * 2, 60000);
        }
      };
    }
    open();
  }

  var timeline = document.getElementById("timeline");
  if (timeline && timeline.dataset.live) {
    var added = 0;
    listen(timeline.dataset.live, {
      append: function (event) {
        timeline.insertAdjacentHTML("beforeend", event.data);
        added += timeline.lastElementChild ? 1 : 0;
        say("New events arrived.");
      },
      changed: function () { refresh(["summary", "timeline-meta", "panels", "queue-count"]); },
      reload: function (event, source) { source.close(); window.location.reload(); },
      gone: function (event, source) { source.close(); say("This conversation is no longer available."); }
    });
  }

  var list = document.querySelector("[data-live]:not(#timeline)");
  if (list) {
    listen(list.dataset.live, {
      changed: function () { refresh([list.id, "queue-count"]); say("Updated."); }
    });
  }
})();
