// Calls to the server: the standard v2 API (so --http-restricted-api applies as to any client) and the
// console's own live snapshot.

const ACCESS_KEY = "nereid.console.access";

export function access() {
  try {
    return JSON.parse(localStorage.getItem(ACCESS_KEY)) || { name: "", value: "" };
  } catch {
    return { name: "", value: "" };
  }
}

export function setAccess(name, value) {
  localStorage.setItem(ACCESS_KEY, JSON.stringify({ name: name.trim(), value }));
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function call(method, path, body = undefined, headers = {}) {
  const { name, value } = access();
  const all = { ...headers };
  if (name) all[name] = value;
  if (body !== undefined && !(body instanceof Uint8Array) && typeof body !== "string") {
    body = JSON.stringify(body);
    all["content-type"] = "application/json";
  }
  const response = await fetch(path, { method, headers: all, body });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const parsed = JSON.parse(await response.text());
      if (parsed && parsed.error) message = parsed.error;
    } catch {
      // not a JSON error body: keep the status line
    }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function json(method, path, body) {
  const text = await (await call(method, path, body)).text();
  return text ? JSON.parse(text) : null;
}

const model = (name) => `/v2/models/${encodeURIComponent(name)}`;

export const api = {
  info: () => json("GET", "/console/api/info"),
  live: () => json("GET", "/console/api/live"),
  analysis: () => json("GET", "/console/api/analysis"),
  index: () => json("POST", "/v2/repository/index", {}),
  config: (name, version) =>
    json("GET", `${model(name)}${version ? `/versions/${encodeURIComponent(version)}` : ""}/config`),
  metadata: (name) => json("GET", model(name)),
  load: (name) => json("POST", `/v2/repository/models/${encodeURIComponent(name)}/load`, {}),
  unload: (name) => json("POST", `/v2/repository/models/${encodeURIComponent(name)}/unload`, {}),
  infer: (name, body, headers) => call("POST", `${model(name)}/infer`, body, headers),
};
