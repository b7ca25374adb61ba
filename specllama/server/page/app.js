// The chat page: conversations kept in this browser, answers streamed from the server, and
// what speculation did for each answer, token by token. Every piece of model or user text goes
// into the page as text (textContent, text nodes), never as HTML.

import { ApiError, fetchHealth, fetchStatus, readChunk, streamChat } from "./chat.js";
import { answerBody, button, comparison, el, figuresLine, originCounts } from "./render.js";

const $ = (id) => document.getElementById(id);
const DRAFTERS = {
  auto: "auto (the server's choice)",
  model: "draft model",
  mtp: "the model's own head (MTP)",
  eagle3: "the EAGLE-3 head (its own file)",
  dflash: "the DFlash head (its own file)",
  ngram: "n-gram lookup",
  none: "none: the target alone",
};
const STORE = { chats: "specllama.chats", current: "specllama.current", settings: "specllama.settings" };
const KEY = "specllama.key"; // sessionStorage: kept for this tab only
const DEFAULTS = {
  system: "", drafter: "auto", temperature: "", top_p: "", top_k: "", min_p: "",
  max_tokens: "512", seed: "", markdown: true, colours: true,
};
const NUMBERS = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];
const INTEGERS = new Set(["top_k", "max_tokens", "seed"]);

const state = {
  status: null,
  key: sessionStorage.getItem(KEY) || "",
  chats: load(STORE.chats, []),
  current: localStorage.getItem(STORE.current),
  settings: { ...DEFAULTS, ...load(STORE.settings, {}) },
  running: null, // { controller, message, part }
  afterKey: null, // what to do again once a key is given
};
const views = new Map(); // message -> its <li>

function load(name, fallback) {
  try {
    return JSON.parse(localStorage.getItem(name)) ?? fallback;
  } catch {
    return fallback;
  }
}

function save() {
  localStorage.setItem(STORE.chats, JSON.stringify(state.chats));
  localStorage.setItem(STORE.current, state.current || "");
  localStorage.setItem(STORE.settings, JSON.stringify(state.settings));
}

// -- notices and the API key ------------------------------------------------------------------

function notify(text) {
  const notice = $("notice");
  notice.textContent = text || "";
  notice.hidden = !text;
}

function askForKey(message, then) {
  state.afterKey = then;
  $("key-error").textContent = message;
  $("key-form").hidden = false;
  $("key-input").focus();
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.key = $("key-input").value.trim();
  sessionStorage.setItem(KEY, state.key);
  $("key-form").hidden = true;
  const then = state.afterKey;
  state.afterKey = null;
  if (then) then();
});

// -- the server's status ------------------------------------------------------------------------

async function loadStatus() {
  try {
    state.status = await fetchStatus(state.key);
  } catch (error) {
    if (error.status === 401) {
      askForKey(state.key ? "The server refused this key." : "This server needs its API key.", loadStatus);
    } else {
      notify(`The server cannot be reached: ${error.message}`);
    }
    return;
  }
  notify("");
  showStatus(state.status);
}

function showStatus(status) {
  const draft = status.draft ? ` + ${status.draft.file}` : "";
  $("pair").textContent = `${status.target.file}${draft}`;
  const facts = $("server-facts");
  facts.replaceChildren();
  const rows = [
    ["model", status.model],
    ["target", `${status.target.file} (${gb(status.target.bytes)})`],
    ["draft", status.draft ? `${status.draft.file} (${gb(status.draft.bytes)})` : "none"],
    ["drafter", `${status.drafter}${status.adaptive ? ", adaptive" : `, fixed ${status.draft_max}`}`],
    ["context", `${status.n_ctx} tokens${status.slots > 1 ? " per slot" : ""}`],
    ["slots", `${status.slots} (requests answered at once)`],
    ["device", status.device],
  ];
  for (const [name, value] of rows) facts.append(el("dt", "", name), el("dd", "", value));
  const select = $("set-drafter");
  select.replaceChildren(...status.drafters.map((name) => {
    const option = el("option", "", DRAFTERS[name] || name);
    option.value = name;
    return option;
  }));
  if (!status.drafters.includes(state.settings.drafter)) state.settings.drafter = "auto";
  select.value = state.settings.drafter;
}

// Other clients' requests, so that a slower answer is explained: polled while the tab is seen.
const BUSY_POLL_MS = 2000;

async function showBusy() {
  if (document.hidden) return;
  let health;
  try {
    health = await fetchHealth();
  } catch {
    return; // loadStatus and sending say when the server cannot be reached
  }
  const others = Math.max(0, health.generating - (state.running ? 1 : 0));
  const parts = [];
  if (others) parts.push(`${others} other request${others > 1 ? "s" : ""} running`);
  if (health.waiting) parts.push(`${health.waiting} waiting`);
  $("busy").textContent = parts.join(" · ");
  $("busy").hidden = !parts.length;
}

function gb(bytes) {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${Math.round(bytes / 1e6)} MB`;
}

// -- settings -------------------------------------------------------------------------------------

function bindSettings() {
  for (const name of ["system", "drafter", ...NUMBERS]) {
    const input = $(`set-${name}`);
    input.value = state.settings[name];
    input.addEventListener("change", () => {
      state.settings[name] = input.value;
      save();
    });
  }
  for (const name of ["markdown", "colours"]) {
    const box = $(`set-${name}`);
    box.checked = state.settings[name];
    box.addEventListener("change", () => {
      state.settings[name] = box.checked;
      save();
      renderMessages();
    });
  }
}

function requestBody(messages) {
  const s = state.settings;
  const body = { model: state.status?.model || "", messages };
  for (const name of NUMBERS) {
    if (String(s[name]).trim() === "") continue;
    const value = INTEGERS.has(name) ? parseInt(s[name], 10) : parseFloat(s[name]);
    if (Number.isFinite(value)) body[name] = value;
  }
  if (s.drafter && s.drafter !== "auto") body.specllama = { drafter: s.drafter };
  return body;
}

// -- conversations --------------------------------------------------------------------------------

function currentChat() {
  return state.chats.find((chat) => chat.id === state.current) || null;
}

function newChat() {
  if (state.running) return;
  state.current = null;
  save();
  renderAll();
  $("input").focus();
}

function apiMessages(chat, upTo) {
  const messages = [];
  if (state.settings.system.trim()) messages.push({ role: "system", content: state.settings.system });
  for (const m of chat.messages.slice(0, upTo)) messages.push({ role: m.role, content: m.content });
  return messages;
}

async function send(text) {
  if (state.running || !text.trim()) return;
  if (!state.status) {
    await loadStatus();
    if (!state.status) return;
  }
  let chat = currentChat();
  if (!chat) {
    chat = { id: `${Date.now()}`, title: "", messages: [] };
    state.chats.unshift(chat);
    state.current = chat.id;
  }
  if (!chat.messages.length) chat.title = text.trim().slice(0, 60); // named by its first message
  chat.messages.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "", tokens: [] };
  chat.messages.push(answer);
  answer.request = requestBody(apiMessages(chat, chat.messages.length - 1));
  $("input").value = "";
  renderAll();
  const ok = await run(answer, answer, answer.request);
  if (ok === "key") {
    chat.messages.splice(-2, 2);
    $("input").value = text;
    renderAll();
    askForKey(state.key ? "The server refused this key." : "This server needs its API key.", () => send(text));
  }
}

// Stream `body` into `part` (the answer itself, or its comparison run) of `message`.
// Returns "done", "stopped", "key" (the key was refused) or "error".
async function run(message, part, body) {
  const controller = new AbortController();
  state.running = { controller, message, part };
  Object.assign(part, { content: "", tokens: [], figures: null, state: "streaming", error: "" });
  setRunning(true);
  scheduleRender(message, message); // the buttons go, the box for what comes appears
  let outcome = "done";
  try {
    await withRetries(controller.signal, () => streamChat(body, {
      key: state.key,
      signal: controller.signal,
      onChunk: (chunk) => {
        const c = readChunk(chunk);
        part.content += c.text;
        part.tokens.push(...c.tokens);
        if (c.figures) part.figures = { ...part.figures, ...c.figures };
        scheduleRender(message, part);
      },
    }));
    part.state = "done";
  } catch (error) {
    if (error.name === "AbortError") {
      outcome = part.state = "stopped";
    } else if (error.status === 401) {
      outcome = "key";
    } else {
      outcome = part.state = "error";
      part.error = error.message;
    }
  } finally {
    state.running = null;
    setRunning(false);
    notify("");
    save();
    renderMessages();
  }
  return outcome;
}

// A busy server (503 with Retry-After) is asked again until it answers or Stop is pressed.
async function withRetries(signal, attempt) {
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 503 || error.code !== "server_busy") throw error;
      const wait = Math.max(error.retryAfter ?? 1, 0.2);
      notify(`The server is busy with other requests: asking again in ${wait} s…`);
      await sleep(wait * 1000, signal);
    }
  }
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new DOMException("stopped", "AbortError"));
    }, { once: true });
  });
}

function stop() {
  if (state.running) state.running.controller.abort();
}

function setRunning(running) {
  $("send").hidden = running;
  $("stop").hidden = !running;
  document.body.classList.toggle("running", running);
}

async function sameAgain(message) {
  const before = message.content;
  const body = { ...message.request, seed: message.figures.seed };
  delete message.compare;
  delete message.again;
  if ((await run(message, message, body)) === "done") message.again = { same: message.content === before };
  save();
  renderMessages();
}

async function compare(message) {
  message.compare = { content: "", tokens: [] };
  const body = { ...message.request, seed: message.figures.seed, specllama: { drafter: "none" } };
  await run(message, message.compare, body);
}

function editLast(chat) {
  if (state.running) return;
  const index = chat.messages.map((m) => m.role).lastIndexOf("user");
  $("input").value = chat.messages[index].content;
  chat.messages.splice(index);
  save();
  renderAll();
  $("input").focus();
}

// -- drawing ----------------------------------------------------------------------------------------

let pending = null;
// Redraw what streams, once a frame at most: the answer, or only its comparison box (the
// browser shares the cores with the models, so the answer above is not drawn again).
function scheduleRender(message, part) {
  if (pending) return;
  pending = requestAnimationFrame(() => {
    pending = null;
    const li = views.get(message);
    if (!li) return;
    const list = $("messages");
    const following = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    const box = li.querySelector(".comparison");
    if (part !== message && box) box.replaceWith(comparison(message, state.settings));
    else drawMessage(li, message);
    if (following) list.scrollTop = list.scrollHeight; // unless the reader scrolled up
  });
}

function renderAll() {
  renderChatList();
  renderMessages();
}

function renderChatList() {
  const list = $("chat-list");
  list.replaceChildren(...state.chats.map((chat) => {
    const li = el("li", chat.id === state.current ? "current" : "");
    li.append(button(chat.title || "(untitled)", () => {
      if (state.running) return;
      state.current = chat.id;
      save();
      renderAll();
    }, "open"), button("×", () => {
      if (state.running) return;
      state.chats = state.chats.filter((c) => c !== chat);
      if (state.current === chat.id) state.current = null;
      save();
      renderAll();
    }, "delete"));
    return li;
  }));
}

function renderMessages() {
  const chat = currentChat();
  const list = $("messages");
  views.clear();
  list.replaceChildren();
  if (!chat) {
    list.append(el("li", "empty", "Ask something. Tokens the target accepted from a draft are coloured by who drafted them."));
    return;
  }
  const lastUser = chat.messages.map((m) => m.role).lastIndexOf("user");
  chat.messages.forEach((message, index) => {
    const li = el("li", `msg ${message.role}`);
    views.set(message, li);
    if (message.role === "user") {
      li.append(el("div", "body plain", message.content));
      if (index === lastUser && !state.running) li.append(actions([button("Edit", () => editLast(chat))]));
    } else {
      drawMessage(li, message);
    }
    list.append(li);
  });
  list.lastElementChild?.scrollIntoView({ block: "end" });
}

function drawMessage(li, message) {
  li.replaceChildren();
  li.dataset.state = message.state || "done";
  li.append(answerBody(message, state.settings), figuresLine(message), originCounts(message));
  if (message.error) li.append(el("p", "error", message.error));
  if (message.again) {
    li.append(el("p", "verdict", message.again.same
      ? "Same text as before: the seed fixes the answer, whatever was drafted."
      : "The text differs from before."));
  }
  const final = message.figures && message.figures.finish_reason;
  if (final && !state.running) {
    li.append(actions([
      button("Same answer again", () => sameAgain(message), "again"),
      button("Compare with the target alone", () => compare(message), "compare"),
    ]));
  }
  if (message.compare) li.append(comparison(message, state.settings));
}

function actions(buttons) {
  const div = el("div", "actions");
  div.append(...buttons);
  return div;
}

// -- keys and buttons -----------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send($("input").value);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send($("input").value);
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") stop();
});
$("stop").addEventListener("click", stop);
$("new-chat").addEventListener("click", newChat);
$("toggle-chats").addEventListener("click", () => document.body.classList.toggle("show-chats"));
$("toggle-settings").addEventListener("click", () => document.body.classList.toggle("show-settings"));

bindSettings();
renderAll();
loadStatus();
showBusy();
setInterval(showBusy, BUSY_POLL_MS);
