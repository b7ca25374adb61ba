// Markdown for model output, built as DOM nodes and never as HTML: the text is untrusted, so
// every character of it reaches the page through appendRange (text nodes), and markup such as
// <script> or <img onerror> shows as the characters it is.
//
// The blocks (code fences, headings, lists, quotes, rules, paragraphs) and inline spans (code,
// strong, emphasis) are found with their places in the source text, so appendRange can colour
// each token of the answer wherever it lands. A fence still open (the answer is streaming) runs
// to the end of the text.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+/;
const QUOTE = /^ {0,3}>\s?/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

function splitLines(text) {
  const lines = [];
  let start = 0;
  while (start <= text.length) {
    const newline = text.indexOf("\n", start);
    const end = newline === -1 ? text.length : newline;
    lines.push({ start, end, source: text.slice(start, end) });
    if (newline === -1) break;
    start = newline + 1;
  }
  return lines;
}

function startsBlock(source) {
  return FENCE.test(source) || HEADING.test(source) || ITEM.test(source) ||
    QUOTE.test(source) || RULE.test(source);
}

// appendRange(parent, start, end): add text[start:end] to parent.
// onCode(block, start, end): a fenced block was made, for its copy button.
export function renderMarkdown(parent, text, appendRange, onCode) {
  const lines = splitLines(text);
  const inline = (el, a, b) => renderInline(el, text, a, b, appendRange);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const src = line.source;
    let m;
    if (!src.trim()) {
      i += 1;
    } else if ((m = FENCE.exec(src))) {
      const close = new RegExp(`^ {0,3}${m[1][0] === "`" ? "`" : "~"}{${m[1].length},}\\s*$`);
      let j = i + 1;
      while (j < lines.length && !close.test(lines[j].source)) j += 1;
      const start = i + 1 < lines.length ? lines[i + 1].start : line.end;
      const end = j < lines.length ? Math.max(start, lines[j].start - 1) : text.length;
      parent.append(codeBlock(m[2], start, end, appendRange, onCode));
      i = j + 1;
    } else if ((m = HEADING.exec(src))) {
      const h = document.createElement(`h${Math.min(m[1].length + 2, 6)}`);
      inline(h, line.start + m[0].length, line.end);
      parent.append(h);
      i += 1;
    } else if (RULE.test(src)) {
      parent.append(document.createElement("hr"));
      i += 1;
    } else if ((m = ITEM.exec(src))) {
      const ordered = /\d/.test(m[2]);
      const list = document.createElement(ordered ? "ol" : "ul");
      if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
      while (i < lines.length && (m = ITEM.exec(lines[i].source)) && /\d/.test(m[2]) === ordered) {
        const li = document.createElement("li");
        if (m[1].length >= 2) li.className = "nested";
        inline(li, lines[i].start + m[0].length, lines[i].end);
        list.append(li);
        i += 1;
      }
      parent.append(list);
    } else if (QUOTE.test(src)) {
      const quote = document.createElement("blockquote");
      while (i < lines.length && (m = QUOTE.exec(lines[i].source))) {
        const p = document.createElement("p");
        inline(p, lines[i].start + m[0].length, lines[i].end);
        quote.append(p);
        i += 1;
      }
      parent.append(quote);
    } else {
      let j = i + 1;
      while (j < lines.length && lines[j].source.trim() && !startsBlock(lines[j].source)) j += 1;
      const p = document.createElement("p");
      inline(p, line.start, lines[j - 1].end);
      parent.append(p);
      i = j;
    }
  }
}

function codeBlock(language, start, end, appendRange, onCode) {
  const block = document.createElement("div");
  block.className = "code";
  const head = document.createElement("div");
  head.className = "code-head";
  const name = document.createElement("span");
  name.textContent = language;
  head.append(name);
  const pre = document.createElement("pre");
  const code = document.createElement("code");
  appendRange(code, start, end);
  pre.append(code);
  block.append(head, pre);
  if (onCode) onCode(head, start, end);
  return block;
}

// Inline code, **strong** and *emphasis* (or __ and _) within text[a:b].
function renderInline(parent, text, a, b, appendRange) {
  let plain = a;
  let i = a;
  const flush = (to) => {
    if (to > plain) appendRange(parent, plain, to);
  };
  while (i < b) {
    const c = text[i];
    if (c === "`") {
      const run = text.slice(i, b).match(/^`+/)[0];
      const close = text.indexOf(run, i + run.length);
      if (close !== -1 && close + run.length <= b) {
        flush(i);
        const code = document.createElement("code");
        appendRange(code, i + run.length, close);
        parent.append(code);
        i = plain = close + run.length;
        continue;
      }
      i += run.length;
      continue;
    }
    if (c === "*" || c === "_") {
      const double = text[i + 1] === c;
      const mark = double ? c + c : c;
      const inner = i + mark.length;
      const close = findClose(text, mark, inner, b);
      const wordInside = c === "_" && /\w/.test(text[i - 1] || "");
      if (close !== -1 && !wordInside && text[inner] !== " ") {
        flush(i);
        const el = document.createElement(double ? "strong" : "em");
        renderInline(el, text, inner, close, appendRange);
        parent.append(el);
        i = plain = close + mark.length;
        continue;
      }
    }
    i += 1;
  }
  flush(b);
}

function findClose(text, mark, from, b) {
  let at = text.indexOf(mark, from + 1);
  while (at !== -1 && at + mark.length <= b) {
    const single = mark.length === 1 && text[at + 1] === mark;
    if (text[at - 1] !== " " && !single) return at;
    at = text.indexOf(mark, at + (single ? 2 : 1));
  }
  return -1;
}
