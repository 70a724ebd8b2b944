// Markdown to DOM nodes for model replies. Every node is made with createElement and every piece of
// text goes in as a text node, so model output can never become markup (no innerHTML anywhere): a
// reply that says <script> or <img onerror=...> shows those characters. Links get an href only for
// http(s) and mailto URLs. Covers what chat replies use: fenced code, headings, lists (nested by
// indentation), block quotes, tables, rules, paragraphs; inline code, bold, italic, strikethrough,
// links. Unclosed constructs (a reply still streaming) render as far as they go.

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

// Inline spans: code, link, bold, strikethrough, italic, bare URL (alternatives in that order).
const INLINE = new RegExp([
  /(`+)([^`][\s\S]*?)\1(?!`)/.source,                 // 1, 2: `code`
  /\[([^\]\n]+)\]\(\s*([^)\s]+)(?:\s+"[^"\n]*")?\s*\)/.source,  // 3, 4: [text](url "title")
  /\*\*(?=\S)([\s\S]*?\S)\*\*/.source,                // 5: **bold**
  /(?<![\p{L}\p{N}_])__(?=\S)([\s\S]*?\S)__(?![\p{L}\p{N}_])/.source,  // 6: __bold__ (not inside a word)
  /~~(?=\S)([\s\S]*?\S)~~/.source,                    // 7: ~~strike~~
  /\*(?=[^\s*])([\s\S]*?[^\s*])\*/.source,            // 8: *italic*
  /(?<![\p{L}\p{N}_])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\p{L}\p{N}_])/.source,  // 9: _italic_ (not inside a word)
  /(https?:\/\/[^\s<>()[\]]*[^\s<>()[\].,;:!?'"])/.source,  // 10: a bare URL
].join('|'), 'gu');

function link(url) {
  const a = el('a');
  if (SAFE_URL.test(url)) {
    a.setAttribute('href', url);
    a.setAttribute('target', '_blank');
    a.setAttribute('rel', 'noopener noreferrer nofollow');
  }
  return a;
}

// Appends `text` to `parent` with inline markup turned into elements (inside a link: no links).
export function inline(parent, text, inLink = false) {
  let last = 0;
  INLINE.lastIndex = 0;
  for (let m; (m = INLINE.exec(text)) !== null;) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    last = INLINE.lastIndex;
    let node;
    if (m[2] !== undefined) {
      node = el('code');
      // One space either side is padding (CommonMark), so that `` `x` `` can be written.
      node.textContent = /^ .* $/s.test(m[2]) && m[2].trim() ? m[2].slice(1, -1) : m[2];
    } else if (inLink && (m[3] !== undefined || m[10] !== undefined)) {
      node = document.createTextNode(m[0]);
    } else if (m[3] !== undefined) {
      node = link(m[4]);
      inline(node, m[3], true);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      node = el('strong');
      inline(node, m[5] ?? m[6], inLink);
    } else if (m[7] !== undefined) {
      node = el('del');
      inline(node, m[7], inLink);
    } else if (m[8] !== undefined || m[9] !== undefined) {
      node = el('em');
      inline(node, m[8] ?? m[9], inLink);
    } else {
      node = link(m[10]);
      node.textContent = m[10];
    }
    parent.append(node);
    INLINE.lastIndex = last;  // the recursive calls above reuse the same regex
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

function codeBlock(code, lang) {
  const box = el('div', 'code');
  const head = el('div', 'code-head');
  const name = el('span', 'code-lang');
  name.textContent = lang || 'text';
  const copy = el('button', 'code-copy');
  copy.type = 'button';
  copy.textContent = 'Copy';
  copy.addEventListener('click', () => {
    navigator.clipboard?.writeText(code).then(() => { copy.textContent = 'Copied'; }, () => { copy.textContent = 'Copy failed'; });
  });
  head.append(name, copy);
  const pre = el('pre');
  const c = el('code');
  c.textContent = code;
  pre.append(c);
  box.append(head, pre);
  return box;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(\s+|$)/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const blank = (l) => /^\s*$/.test(l);

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function cells(row) {
  let r = row.trim();
  if (r.startsWith('|')) r = r.slice(1);
  if (r.endsWith('|') && !r.endsWith('\\|')) r = r.slice(0, -1);
  return r.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(header, sep, rows) {
  const align = cells(sep).map((c) => (c.endsWith(':') ? (c.startsWith(':') ? 'center' : 'right') : c.startsWith(':') ? 'left' : ''));
  const t = el('table');
  const addRow = (parent, values, tag) => {
    const tr = el('tr');
    align.forEach((a, i) => {
      const cell = el(tag);
      if (a) cell.style.textAlign = a;
      inline(cell, values[i] ?? '');
      tr.append(cell);
    });
    parent.append(tr);
  };
  const thead = el('thead');
  addRow(thead, cells(header), 'th');
  const tbody = el('tbody');
  for (const r of rows) addRow(tbody, cells(r), 'td');
  t.append(thead, tbody);
  const wrap = el('div', 'table');
  wrap.append(t);
  return wrap;
}

// One list starting at lines[i]; returns [element, next line index].
function list(lines, i) {
  const first = lines[i].match(ITEM);
  const ordered = /\d/.test(first[2]);
  const l = el(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) l.start = parseInt(first[2], 10);
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (!m || /\d/.test(m[2]) !== ordered) break;
    const indent = m[1].length + m[2].length + m[3].length;
    const body = [lines[i].slice(indent)];
    i++;
    // The item goes on over indented lines, lazy continuation lines, and blank lines inside it.
    while (i < lines.length) {
      const line = lines[i];
      if (blank(line)) {
        if (i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1])) { body.push(''); i++; continue; }
        break;
      }
      if (/^\s{2,}/.test(line)) body.push(line.replace(/^\s{1,4}/, ''));
      else if (!startsBlock(line)) body.push(line);
      else break;
      i++;
    }
    const li = el('li');
    const inner = blocks(body.join('\n'));
    // A one-paragraph item holds its text directly (no <p> margins).
    if (inner.childNodes.length === 1 && inner.firstChild.tagName === 'P') li.append(...inner.firstChild.childNodes);
    else li.append(inner);
    l.append(li);
    while (i < lines.length && blank(lines[i]) && i + 1 < lines.length && ITEM.test(lines[i + 1])) i++;
  }
  return [l, i];
}

function blocks(src) {
  const frag = document.createDocumentFragment();
  const lines = src.split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (blank(line)) {
      i++;
    } else if ((m = line.match(FENCE))) {
      const body = [];
      i++;
      const close = new RegExp(`^ {0,3}${m[1][0] === '`' ? '`' : '~'}{${m[1].length},}\\s*$`);
      while (i < lines.length && !close.test(lines[i])) body.push(lines[i++]);
      i++;
      frag.append(codeBlock(body.join('\n'), m[2]));
    } else if ((m = line.match(HEADING))) {
      const h = el(`h${m[1].length}`);
      inline(h, m[2] ?? '');
      frag.append(h);
      i++;
    } else if (RULE.test(line)) {
      frag.append(el('hr'));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !blank(lines[i]) && (QUOTE.test(lines[i]) || !startsBlock(lines[i])))
        body.push(lines[i++].replace(QUOTE, ''));
      const q = el('blockquote');
      q.append(blocks(body.join('\n')));
      frag.append(q);
    } else if (ITEM.test(line)) {
      const [l, next] = list(lines, i);
      frag.append(l);
      i = next;
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const rows = [];
      let j = i + 2;
      while (j < lines.length && !blank(lines[j]) && lines[j].includes('|')) rows.push(lines[j++]);
      frag.append(table(line, lines[i + 1], rows));
      i = j;
    } else {
      const body = [];
      while (i < lines.length && !blank(lines[i]) && !(body.length && startsBlock(lines[i]))) body.push(lines[i++]);
      const p = el('p');
      inline(p, body.join('\n'));  // line breaks stay (white-space: pre-wrap): verse and lists of lines read right
      frag.append(p);
    }
  }
  return frag;
}

// The DOM fragment for a markdown text.
export function renderMarkdown(text) {
  return blocks(String(text).replace(/\r\n?/g, '\n'));
}
