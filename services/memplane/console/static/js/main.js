// The console's entry: who is signed in, then one view per hash route.
//   #/memories        browse           #/memory/<id>   detail, history, edit, delete
//   #/search          search playground #/erase         erasure by scope
//   #/session/<id>    transcript and what the agent will see

import { call, setCsrf } from "./api.js";
import { replace, state } from "./dom.js";
import { browseView } from "./views/browse.js";
import { detailView } from "./views/detail.js";
import { eraseView } from "./views/erase.js";
import { searchView } from "./views/search.js";
import { sessionView } from "./views/session.js";
import { signInView } from "./views/signin.js";

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const signOut = document.getElementById("sign-out");
let signedIn = false;

function showSignedIn(session) {
  signedIn = Boolean(session && session.signed_in);
  setCsrf(signedIn ? session.csrf_token : "");
  nav.hidden = !signedIn;
  signOut.hidden = !signedIn;
  who.textContent = signedIn ? `key ${session.key_id || "(unnamed)"}` : "";
}

function route() {
  if (!signedIn) {
    replace(view, signInView(async (session) => {
      showSignedIn(session);
      if (!location.hash || location.hash === "#/") location.hash = "#/memories";
      else route();
    }));
    return;
  }
  const hash = location.hash.replace(/^#/, "") || "/memories";
  const [path] = hash.split("?");
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", a.getAttribute("href") === `#${path}`);
  const memory = /^\/memory\/([^/]+)$/.exec(path);
  const session = /^\/session(?:\/([^/]*))?$/.exec(path);
  for (const a of nav.querySelectorAll("a")) {
    if (session && a.getAttribute("href") === "#/session") a.classList.add("active");
  }
  if (memory) replace(view, detailView(decodeURIComponent(memory[1])));
  else if (session) replace(view, sessionView(decodeURIComponent(session[1] || "")));
  else if (path === "/search") replace(view, searchView());
  else if (path === "/erase") replace(view, eraseView());
  else replace(view, browseView());
}

signOut.addEventListener("click", async () => {
  signOut.disabled = true;
  try {
    await call("DELETE", "session");
  } catch {
    // signed out already
  }
  signOut.disabled = false;
  showSignedIn(null);
  route();
});

window.addEventListener("console:signed-out", () => {
  showSignedIn(null);
  route();
});
window.addEventListener("hashchange", route);

(async () => {
  try {
    showSignedIn(await call("GET", "session"));
  } catch (error) {
    replace(view, state("error", `The console cannot reach its backend: ${error.message}`));
    return;
  }
  route();
})();
