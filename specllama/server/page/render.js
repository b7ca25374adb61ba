// Drawing an answer: its text (Markdown or as it came) in spans coloured by who wrote each
// token, the figures of what speculation did, and the comparison with the target alone. Text
// goes in as text nodes only.

import { renderMarkdown } from "./markdown.js";

export const ORIGINS = {
  target: "target",
  model: "draft model",
  ngram: "n-gram",
  mtp: "draft head", // the model's own (MTP), or one in its own file (EAGLE-3, DFlash)
  grammar: "forced by the output rule",
};

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function button(label, onClick, className = "") {
  const b = el("button", className, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

export function answerBody(part, settings) {
  const body = el("div", `body${settings.colours ? " coloured" : ""}`);
  const text = part.content;
  const tokens = part.tokens || [];
  const starts = [];
  let at = 0;
  for (const [t] of tokens) {
    starts.push(at);
    at += t.length;
  }
  const appendRange = (parent, a, b) => {
    let i = firstAtOrAfter(starts, a, tokens);
    for (; i < tokens.length && starts[i] < b; i += 1) {
      const s = starts[i];
      const piece = text.slice(Math.max(a, s), Math.min(b, s + tokens[i][0].length));
      if (!piece) continue;
      const origin = ORIGINS[tokens[i][1]] ? tokens[i][1] : "target";
      const span = el("span", `tok o-${origin}`, piece);
      span.dataset.i = i;
      parent.append(span);
    }
    if (at < b) parent.append(text.slice(Math.max(a, at), b)); // text without tokens
  };
  if (settings.markdown) {
    renderMarkdown(body, text, appendRange, (head, a, b) => head.append(copyButton(() => text.slice(a, b))));
  } else {
    const plain = el("div", "plain");
    appendRange(plain, 0, text.length);
    body.append(plain);
  }
  return body;
}

// The first token that ends after offset a.
function firstAtOrAfter(starts, a, tokens) {
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (starts[mid] + tokens[mid][0].length <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function copyButton(textOf) {
  return button("Copy", async (event) => {
    const text = textOf();
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // not a secure context (a LAN address over http): copy through a selection
      const area = el("textarea");
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    event.target.textContent = "Copied";
  }, "copy");
}

export function figuresLine(part) {
  const f = part.figures;
  const line = el("p", "figures");
  if (!f) {
    line.textContent = part.state === "streaming" ? "waiting for the first tokens…" : "";
    return line;
  }
  const items = [`${f.tokens_per_s.toFixed(1)} tok/s`, `${f.n_generated} tokens`];
  if (f.n_drafted) {
    items.push(`accepted ${Math.round(100 * f.acceptance_rate)}% of ${f.n_drafted} drafted`);
  } else {
    items.push("nothing drafted");
  }
  if (f.n_rounds) items.push(`${(f.n_generated / f.n_rounds).toFixed(2)} tokens a round`);
  if (f.finish_reason) {
    items.push(`drafter ${f.drafter}`);
    if (f.seed !== null && f.seed !== undefined) items.push(`seed ${f.seed}`);
    if (part.state === "stopped") items.push("stopped");
    else if (f.finish_reason !== "stop") items.push(`ended: ${f.finish_reason}`);
  } else if (f.draft_length) {
    items.push(`draft length ${f.draft_length} (${ORIGINS[f.draft_source] || f.draft_source})`);
  } else if (f.n_rounds) {
    items.push("no draft this round");
  }
  if (part.state === "stopped" && !f.finish_reason) items.push("stopped");
  line.textContent = items.join(" · ");
  return line;
}

export function originCounts(part) {
  const counts = {};
  for (const [, origin] of part.tokens || []) counts[origin] = (counts[origin] || 0) + 1;
  const line = el("p", "origins");
  for (const origin of Object.keys(ORIGINS)) {
    if (!counts[origin]) continue;
    const item = el("span", `count o-${origin}`, `${ORIGINS[origin]} ${counts[origin]}`);
    item.dataset.origin = origin;
    item.dataset.count = counts[origin];
    line.append(item);
  }
  return line;
}

export function comparison(message, settings) {
  const part = message.compare;
  const box = el("div", "comparison");
  box.append(el("h3", "", "The target alone, same request and seed"));
  box.append(answerBody(part, settings), figuresLine(part));
  if (part.state === "done" && part.figures?.tokens_per_s) {
    const ours = message.figures.tokens_per_s;
    const alone = part.figures.tokens_per_s;
    const ratio = ours / alone;
    const verdict = el("p", "verdict");
    const same = part.content === message.content;
    verdict.dataset.same = same;
    verdict.dataset.ratio = ratio.toFixed(3);
    verdict.textContent = `With speculation ${ours.toFixed(1)} tok/s, the target alone ${alone.toFixed(1)} tok/s: ` +
      `${ratio.toFixed(2)}x. ` + (same
        ? "The two texts are identical, as they must be: greedy or seeded output does not depend on the drafter."
        : "The two texts differ.");
    box.append(verdict);
  } else if (part.error) {
    box.append(el("p", "error", part.error));
  }
  return box;
}
