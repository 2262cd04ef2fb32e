// golemq-pg dashboard: relative times and live regions (no library, no build step).
//  * <time datetime="ISO">absolute</time> reads "3 min ago" / "in 2 h"; the absolute text
//    moves to the title (hover). Without script the absolute text stays.
//  * An element with data-live="URL" gets URL's HTML fragment as its content every 2 s,
//    except while the tab is hidden, a checkbox inside it is checked or a field inside it
//    has focus. A fragment holding [data-live-stop] ends that element's refreshing.
//  * A notice's close button removes it.
(function () {
  "use strict";
  var INTERVAL_MS = 2000;
  var UNITS = [[60, "s", 1], [3600, "min", 60], [86400, "h", 3600], [Infinity, "d", 86400]];

  function relative(ms) {
    var secs = Math.round(Math.abs(ms) / 1000);
    if (secs < 5) { return "just now"; }
    for (var i = 0; i < UNITS.length; i++) {
      if (secs < UNITS[i][0]) {
        var text = Math.floor(secs / UNITS[i][2]) + " " + UNITS[i][1];
        return ms < 0 ? "in " + text : text + " ago";
      }
    }
    return "";
  }

  function times(root) {
    var list = root.querySelectorAll("time[datetime]");
    var now = Date.now();
    for (var i = 0; i < list.length; i++) {
      var el = list[i];
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) { continue; }
      if (!el.hasAttribute("data-abs")) {
        el.setAttribute("data-abs", el.textContent);
        el.title = el.textContent;
      }
      el.textContent = relative(now - at);
    }
  }

  function busy(box) {
    var focused = document.activeElement;
    return document.hidden || box.querySelector("input[type=checkbox]:checked") !== null ||
      (focused !== null && box.contains(focused) &&
       /^(INPUT|SELECT|TEXTAREA)$/.test(focused.tagName));
  }

  function watch(box) {
    var timer = setInterval(function () {
      if (busy(box) || box.getAttribute("data-loading")) { return; }
      box.setAttribute("data-loading", "1");
      fetch(box.getAttribute("data-live"), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          box.removeAttribute("data-loading");
          if (html === null || busy(box)) { return; }
          box.innerHTML = html;
          box.setAttribute("data-refreshed", String(Date.now()));
          times(box);
          if (box.querySelector("[data-live-stop]")) {
            clearInterval(timer);
            box.removeAttribute("data-live");
          }
        })
        .catch(function () { box.removeAttribute("data-loading"); });
    }, INTERVAL_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    times(document);
    setInterval(function () { times(document); }, 15000);
    var boxes = document.querySelectorAll("[data-live]");
    for (var i = 0; i < boxes.length; i++) { watch(boxes[i]); }
    document.addEventListener("click", function (e) {
      var t = e.target;
      if (t instanceof Element && t.classList.contains("notice-close")) {
        var n = t.closest(".notice");
        if (n) { n.remove(); }
      }
    });
  });
})();
