// Sign in with a workspace API key: the key goes to the console's backend once and stays
// there (an HttpOnly cookie names the session); it is never put in a URL or in storage.

import { call } from "../api.js";
import { field, h, replace, state } from "../dom.js";

export function signInView(onSignedIn) {
  const key = h("input", { type: "password", name: "api_key", autocomplete: "off", required: true, size: 60 });
  const status = h("div", { class: "status" });
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    {
      class: "card signin",
      onsubmit: async (event) => {
        event.preventDefault();
        button.disabled = true;
        replace(status, state("loading", "Checking the key…"));
        try {
          const session = await call("POST", "session", { api_key: key.value });
          key.value = "";
          replace(status);
          onSignedIn(session);
        } catch (error) {
          replace(status, state("error", error.message));
        } finally {
          button.disabled = false;
        }
      },
    },
    h("h1", {}, "Sign in"),
    h("p", {}, "With a workspace API key (mp_<key id>_<secret>). The key stays in the console's server."),
    field("API key", key),
    button,
    status,
  );
  return form;
}
