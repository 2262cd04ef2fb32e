// golemq-pg dashboard: live refresh of the overview (short polling, no reload, no library).
// The element with data-live names the fragment URL; its content is replaced every 5 s
// while the tab is visible and no form inside it has focus (typing a pause reason).
(function () {
  "use strict";
  var INTERVAL_MS = 5000;
  function refresh(box) {
    if (document.hidden || box.contains(document.activeElement) &&
        document.activeElement.tagName === "INPUT") {
      return;
    }
    fetch(box.getAttribute("data-live"), {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          box.innerHTML = html;
          box.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () { /* the next tick tries again */ });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.querySelector("[data-live]");
    if (box) {
      setInterval(function () { refresh(box); }, INTERVAL_MS);
    }
  });
})();
