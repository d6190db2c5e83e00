// The mesh page, live. Without this script the page is a complete static
// view; with it, the view is replaced by each one the node pushes (server-
// sent events: at once on a verdict change, and every 2 s regardless), the
// page says when contact is lost and reconnects by itself, and pointing at
// or focusing a cable or node shows its details in the inspector.
"use strict";
(() => {
  // The node pushes a view at least every 2 s: silence beyond this is lost contact.
  const SILENCE_MS = 5000;
  const RETRY_MS = 1000;
  const body = document.body;
  const contact = document.getElementById("contact");
  const view = document.getElementById("view");
  let lastView = 0;
  let lostSince = null;
  // The article the reader chose. Until they choose one, each view's
  // inspector shows what the node put there: the worst current fault.
  let shown = null;

  const clock = (t) => new Date(t).toLocaleTimeString();

  // The contact line is a status region: it changes only when the state
  // does, or screen readers would announce every refresh.
  function setContact(state, text) {
    if (body.dataset.contact === state) return;
    body.dataset.contact = state;
    contact.textContent = text;
  }

  function lost(why) {
    if (lostSince === null) lostSince = Date.now();
    setContact(
      "lost",
      `Lost contact with meshd at ${clock(lostSince)} (${why}). ` +
        "Showing the last view received, greyed out; reconnecting…",
    );
  }

  function connect() {
    const source = new EventSource("page/live");
    source.addEventListener("view", (event) => {
      swap(event.data);
      lastView = Date.now();
      lostSince = null;
      setContact("live", "Live: this page updates itself as the mesh changes.");
    });
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused outright (not a dropped connection): the browser gives up, we do not.
        lost("the node refused the live stream");
        setTimeout(connect, RETRY_MS);
      } else {
        lost("connection dropped");
      }
    });
  }

  // The picture's element for the article `id`, if it is still drawn.
  function drawn(id) {
    for (const link of view.querySelectorAll("svg a")) {
      if (link.getAttribute("href") === `#${id}`) return link;
    }
    return null;
  }

  function swap(html) {
    const focused = document.activeElement;
    const focusedId =
      focused && view.contains(focused) ? pointedAt(focused) : null;
    view.innerHTML = html;
    if (focusedId) {
      const again = drawn(focusedId);
      if (again) again.focus({ preventScroll: true });
    }
    if (shown) inspect(shown);
  }

  function inspect(id) {
    const inspector = document.getElementById("inspector");
    const article = id && document.getElementById(id);
    if (!inspector || !article) return;
    shown = id;
    const copy = article.cloneNode(true);
    copy.removeAttribute("id");
    inspector.replaceChildren(copy);
    for (const link of view.querySelectorAll("svg a.shown")) link.classList.remove("shown");
    const link = drawn(id);
    if (link) link.classList.add("shown");
  }

  // The article id a picture element links to, or null.
  function pointedAt(element) {
    const link = element.closest && element.closest("svg a");
    const href = link && link.getAttribute("href");
    return href && href.startsWith("#") ? href.slice(1) : null;
  }

  const follow = (event) => {
    const id = pointedAt(event.target);
    if (id) inspect(id);
  };
  view.addEventListener("mouseover", follow);
  view.addEventListener("focusin", follow);
  view.addEventListener("click", (event) => {
    const id = pointedAt(event.target);
    if (id) {
      // The inspector shows it in place; no jump down to the lists.
      event.preventDefault();
      inspect(id);
    }
  });

  setInterval(() => {
    if (body.dataset.contact === "live" && Date.now() - lastView > SILENCE_MS) {
      lost("no update for 5 s");
    }
  }, 1000);

  setContact("connecting", "Connecting to meshd for live updates…");
  connect();
})();
