// Keep Mermaid diagrams readable on narrow screens.
//
// Mermaid fits a diagram to its column by scaling it down, labels and all: on a phone a
// wide diagram's text ends up a few pixels high. Here a diagram may shrink only while its
// smallest text stays at least SMALLEST_TEXT_PX high; from there on it keeps that width and
// its box scrolls sideways (div.mermaid in docs/stylesheets/extra.css). Material draws each
// diagram into a closed shadow root that the site's CSS cannot reach, so this wraps the
// render call Material makes and sets the width once the diagram is on the page.
(function () {
  "use strict";
  var SMALLEST_TEXT_PX = 12;
  if (typeof mermaid === "undefined" || typeof mermaid.render !== "function") {
    return;
  }

  function smallestFontPx(root) {
    var smallest = Infinity;
    root.querySelectorAll("svg *").forEach(function (element) {
      for (var node = element.firstChild; node; node = node.nextSibling) {
        if (node.nodeType === Node.TEXT_NODE && node.textContent.trim()) {
          smallest = Math.min(smallest, parseFloat(getComputedStyle(element).fontSize));
          return;
        }
      }
    });
    return smallest;
  }

  function keepReadable(root) {
    var svg = root.querySelector("svg");
    var box = svg && svg.viewBox && svg.viewBox.baseVal;
    var smallest = smallestFontPx(root);
    if (!box || !box.width || !isFinite(smallest) || smallest <= 0) {
      return;
    }
    var scale = Math.min(1, SMALLEST_TEXT_PX / smallest);
    svg.style.minWidth = Math.ceil(box.width * scale) + "px";
  }

  var render = mermaid.render;
  mermaid.render = function () {
    return render.apply(this, arguments).then(function (result) {
      var bind = result.fn || result.bindFunctions;
      function bindAndSize(root) {
        if (bind) {
          bind(root);
        }
        keepReadable(root);
        // The diagram's width is known now: scroll-signs.js marks its box if it is cut.
        document.dispatchEvent(new CustomEvent("sessionlab:diagram"));
      }
      // Material calls `fn` with the shadow root once the diagram is in the page.
      return Object.assign({}, result, { fn: bindAndSize, bindFunctions: bindAndSize });
    });
  };
})();
