// The jobs page's bulk selection: the header checkbox selects or clears every row of the
// page. Event delegation on the document: the rows are replaced by live updates.
"use strict";
document.addEventListener("change", function (event) {
  var box = event.target;
  if (!(box instanceof HTMLInputElement)) return;
  var rows = document.querySelectorAll("#jobs input.select");
  if (box.id === "select-all") {
    rows.forEach(function (row) { row.checked = box.checked; });
  } else if (box.classList.contains("select")) {
    var all = document.getElementById("select-all");
    if (all) {
      var checked = Array.prototype.filter.call(rows, function (r) { return r.checked; });
      all.checked = checked.length === rows.length && rows.length > 0;
      all.indeterminate = checked.length > 0 && checked.length < rows.length;
    }
  }
});
