// The console's entry: who is signed in, then one view per hash route.
//   #/memories        browse           #/memory/<id>   detail, history, edit, delete
//   #/search          search playground #/erase         erasure by scope
//   #/session/<id>    transcript and what the agent will see    #/jobs  write-back jobs
// With the admin key: #/admin (workspaces, usage) and #/admin/ws/<name> (keys).

import { call, setCsrf } from "./api.js";
import { keysView, workspacesView } from "./views/admin.js";
import { replace, state } from "./dom.js";
import { browseView } from "./views/browse.js";
import { detailView } from "./views/detail.js";
import { eraseView } from "./views/erase.js";
import { jobsView } from "./views/jobs.js";
import { searchView } from "./views/search.js";
import { sessionView } from "./views/session.js";
import { signInView } from "./views/signin.js";
import { usageView } from "./views/usage.js";

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const adminNav = document.getElementById("nav-admin");
const who = document.getElementById("who");
const signOut = document.getElementById("sign-out");
let signedIn = false;
let admin = false;

function showSignedIn(session) {
  signedIn = Boolean(session && session.signed_in);
  admin = signedIn && Boolean(session.admin);
  setCsrf(signedIn ? session.csrf_token : "");
  nav.hidden = !signedIn || admin;
  adminNav.hidden = !admin;
  signOut.hidden = !signedIn;
  who.textContent = signedIn ? `${admin ? "admin key" : "key"} ${session.key_id || "(unnamed)"}` : "";
}

function route() {
  if (!signedIn) {
    replace(view, signInView(async (session) => {
      showSignedIn(session);
      const home = admin ? "#/admin" : "#/memories";
      if (!location.hash || location.hash === "#/" || admin !== location.hash.startsWith("#/admin")) location.hash = home;
      else route();
    }));
    return;
  }
  const hash = location.hash.replace(/^#/, "") || (admin ? "/admin" : "/memories");
  const [path] = hash.split("?");
  if (admin) {
    const ws = /^\/admin\/ws\/([^/]+)$/.exec(path);
    replace(view, ws ? keysView(decodeURIComponent(ws[1])) : workspacesView());
    return;
  }
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
  else if (path === "/jobs") replace(view, jobsView());
  else if (path === "/usage") replace(view, usageView());
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
