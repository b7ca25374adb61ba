// The page's side of the API: the server's status, and one streamed chat completion read as
// server-sent events. Same origin, JSON bodies, the key (when the server wants one) as a bearer.

export class ApiError extends Error {
  constructor(status, message, code, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

function headers(key) {
  const h = { "Content-Type": "application/json" };
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function refused(response) {
  let message = `${response.status} ${response.statusText}`;
  let code = "";
  try {
    const body = await response.json();
    message = body.error?.message || message;
    code = body.error?.code || "";
  } catch {
    // not JSON: keep the status line
  }
  const retry = parseFloat(response.headers.get("Retry-After") || "");
  return new ApiError(response.status, message, code, Number.isFinite(retry) ? retry : null);
}

export async function fetchStatus(key) {
  const response = await fetch("/specllama/status", { headers: headers(key) });
  if (!response.ok) throw await refused(response);
  return response.json();
}

// How busy the server is: {generating, waiting, slots} (no key needed).
export async function fetchHealth() {
  const response = await fetch("/health");
  if (!response.ok) throw await refused(response);
  return response.json();
}

// Stream one chat completion. onChunk(chunk) gets each parsed `data:` object; resolves when the
// server says [DONE]. `signal` aborts it: the server sees the connection close and stops.
export async function streamChat(body, { key, signal, onChunk }) {
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: headers(key),
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!response.ok) throw await refused(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new ApiError(0, "The server closed the stream before the answer ended.");
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk.error.message, chunk.error.code);
        onChunk(chunk);
      }
    }
  }
}

// Each chunk's `specllama` object: the tokens of its text with their origins, and the figures
// so far; the last chunk's holds the answer's final figures (and its seed).
export function readChunk(chunk) {
  const choice = chunk.choices?.[0];
  return {
    text: choice?.delta?.content || "",
    tokens: chunk.specllama?.tokens || [],
    figures: chunk.specllama || null,
    finish: choice?.finish_reason || null,
  };
}
