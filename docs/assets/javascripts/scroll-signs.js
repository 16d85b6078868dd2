// Wide content says that it scrolls, and the copy button never covers code.
//
// A code block, table, diagram, plot or row of tabs wider than its column scrolls sideways in
// its own box (docs/stylesheets/extra.css). Phones and many desktops draw no scrollbar until
// one scrolls, so a box cut at its edge looked like a clipped figure. Here each such box gets
// data-more="right", "left" or "both" (where more is hidden), and the stylesheet fades that
// edge. A code block whose text would run under Material's copy button (it sits over the top
// right corner) gets data-gutter: the stylesheet gives the button a column of its own.
// scripts/browser_check.py fails a page where either is missing, at phone and desktop widths.
(function () {
  "use strict";
  var SCROLLERS = "pre > code, div.mermaid, .md-typeset__scrollwrap, .tabbed-labels, .sl-figure";
  var PLOTS = 'img[src*="assets/bench/"]';

  function article() {
    return document.querySelector("article");
  }

  // The box's visible part, as the screen shows it (the scrollport: inside its borders).
  function scrollport(box) {
    var r = box.getBoundingClientRect();
    var left = r.left + box.clientLeft;
    var top = r.top + box.clientTop;
    return { left: left, top: top, right: left + box.clientWidth, bottom: top + box.clientHeight };
  }

  function meets(a, b) {
    return a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  }

  // Does any word of the code, where it can be seen, lie under the copy button?
  function underButton(code, nav) {
    var button = nav.getBoundingClientRect();
    var port = scrollport(code);
    var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    var range = document.createRange();
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      var text = node.textContent;
      var word = /\S+/g;
      var match;
      range.selectNodeContents(node);
      var whole = range.getBoundingClientRect();
      if (whole.top > button.bottom) {
        return false;              // below the button: so is every later word
      }
      if (whole.bottom < button.top || !text.trim()) {
        continue;
      }
      while ((match = word.exec(text)) !== null) {
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        var rects = range.getClientRects();
        for (var i = 0; i < rects.length; i++) {
          var seen = {
            left: Math.max(rects[i].left, port.left), right: Math.min(rects[i].right, port.right),
            top: Math.max(rects[i].top, port.top), bottom: Math.min(rects[i].bottom, port.bottom)
          };
          if (seen.left < seen.right && seen.top < seen.bottom && meets(seen, button)) {
            return true;
          }
        }
      }
    }
    return false;
  }

  function placeButton(code) {
    var nav = code.parentElement && code.parentElement.querySelector(":scope > .md-code__nav");
    if (!nav) {
      return;
    }
    code.removeAttribute("data-gutter");
    var cut = code.scrollWidth > code.clientWidth + 1;
    if (cut || underButton(code, nav)) {
      code.setAttribute("data-gutter", "");
    }
  }

  function markEdges(box) {
    var hidden = box.scrollWidth - box.clientWidth;
    var more = "";
    if (hidden > 1) {
      var left = box.scrollLeft > 1;
      var right = box.scrollLeft < hidden - 1;
      more = left && right ? "both" : left ? "left" : "right";
    }
    if ((box.getAttribute("data-more") || "") !== more) {
      box.setAttribute("data-more", more);
    }
  }

  var watched = typeof WeakSet === "function" ? new WeakSet() : null;
  var resizes = typeof ResizeObserver === "function" ? new ResizeObserver(function (entries) {
    // Only a change of width matters; the scrollbar a box gains changes its height.
    entries.forEach(function (entry) {
      var box = entry.target;
      var width = Math.round(entry.contentRect.width);
      if (box.__slWidth !== width) {
        box.__slWidth = width;
        refreshBox(box.matches("pre") ? box.querySelector(":scope > code") : box);
      }
    });
  }) : null;

  function refreshBox(box) {
    if (!box) {
      return;
    }
    if (box.matches("pre > code")) {
      placeButton(box);
    }
    markEdges(box);
  }

  function watch(box) {
    if (watched && watched.has(box)) {
      return;
    }
    if (watched) {
      watched.add(box);
    }
    box.addEventListener("scroll", function () { markEdges(box); }, { passive: true });
    if (resizes) {
      // A code block's own width changes with its gutter: watch its <pre> instead.
      resizes.observe(box.matches("pre > code") ? box.parentElement : box);
    }
  }

  function refresh() {
    var root = article();
    if (!root) {
      return;
    }
    // The benchmark plot's paragraph is the box that scrolls it, if it ever has to.
    root.querySelectorAll(PLOTS).forEach(function (img) {
      if (img.parentElement && img.parentElement.matches("p")) {
        img.parentElement.classList.add("sl-figure");
      }
    });
    root.querySelectorAll(SCROLLERS).forEach(function (box) {
      watch(box);
      refreshBox(box);
    });
  }

  var pending = false;
  function soon() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(function () {
        pending = false;
        refresh();
      });
    }
  }

  function start() {
    refresh();
    var root = article();
    if (root && typeof MutationObserver === "function") {
      // Material adds the copy buttons and swaps each diagram in after the page loads.
      new MutationObserver(soon).observe(root, { childList: true, subtree: true });
    }
    // A folded block (a hint, the solution) has no size until it is opened.
    document.addEventListener("toggle", soon, true);
    document.addEventListener("sessionlab:diagram", soon);
    window.addEventListener("load", soon);
    window.addEventListener("resize", soon);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
