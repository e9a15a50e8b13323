// The console's JSON backend, same origin, relative to the base path the page was
// served under. The session cookie is HttpOnly: this module never sees the key; it
// sends the session's CSRF token with every state-changing request.

let csrfToken = "";

export function setCsrf(token) {
  csrfToken = token || "";
}

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "";
    this.details = error;
  }
}

/** method, path under api/ (e.g. "memories?page_size=25"), optional JSON body. */
export async function call(method, path, body) {
  const headers = { accept: "application/json" };
  if (method !== "GET") headers["x-csrf-token"] = csrfToken;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(new URL(`api/${path}`, document.baseURI), {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (error.code === "SIGNED_OUT") window.dispatchEvent(new CustomEvent("console:signed-out"));
    throw error;
  }
  return data;
}

/** A query string of the non-empty entries of *params*. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== false && v != null) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}
