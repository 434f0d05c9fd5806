// nuvira ui: the trace viewer's page. Everything it shows comes from a run folder, which may
// have come with a checkout: it is untrusted text. It only ever reaches the page as text
// (textContent, createTextNode, setAttribute of fixed attribute names); no HTML is parsed from
// data, and class names come from a fixed list.
'use strict';

(() => {
  const app = document.getElementById('app');
  const where = document.getElementById('where');
  const live = document.getElementById('live');
  const SVG = 'http://www.w3.org/2000/svg';
  const STATUSES = new Set([
    'succeeded', 'failed', 'skipped', 'running', 'pending', 'cancelled',
    'interrupted', 'budget-exceeded', 'incomplete',
  ]);
  const cls = (s) => (STATUSES.has(s) ? s : 'unknown');

  // --- DOM helpers: text only -------------------------------------------------------------
  function add(parent, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach((k) => add(parent, k)); return; }
    parent.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v; else e.setAttribute(k, String(v));
    }
    add(e, kids);
    return e;
  }
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) e.setAttribute(k, String(v));
    }
    add(e, kids);
    return e;
  }
  // --- updating in place -----------------------------------------------------------------
  // A view is drawn as a fresh tree and then merged into the one on screen: a node whose key
  // (its tag and `id`, or `data-step` / `data-call` / `data-run` / `data-path` / edge ends) is
  // still there is kept and only the attributes and texts that differ are changed; new ones
  // are inserted, gone ones removed. So a live run moves without its page being rebuilt: the
  // scroll position, an open `details`, the selected step and the open model call stay.
  function keyOf(n) {
    if (n.nodeType !== 1) return null;
    const k = n.id || n.getAttribute('data-step') || n.getAttribute('data-call') ||
      n.getAttribute('data-run') || n.getAttribute('data-path') || n.getAttribute('data-failure') ||
      (n.hasAttribute('data-from') ? n.getAttribute('data-from') + '>' + n.getAttribute('data-to') : null);
    return k === null || k === '' ? null : n.nodeName + '|' + k;
  }
  function morph(old, neu) {
    if (old.nodeType !== neu.nodeType || old.nodeName !== neu.nodeName) return neu;
    if (old.nodeType !== 1) {
      if (old.nodeValue !== neu.nodeValue) old.nodeValue = neu.nodeValue;
      return old;
    }
    // What the page keeps as it is (the open model call).
    if (old.hasAttribute('data-keep')) return old;
    // Whether a `details` is open is the user's (a new one comes as drawn).
    const user = (name) => name === 'open' && old.nodeName === 'DETAILS';
    for (const a of Array.from(neu.attributes)) {
      if (!user(a.name) && old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
    }
    for (const a of Array.from(old.attributes)) {
      if (!user(a.name) && !neu.hasAttribute(a.name)) old.removeAttribute(a.name);
    }
    merge(old, Array.from(neu.childNodes));
    return old;
  }
  // Makes `parent`'s children `kids`, reusing the ones it has (by key, else by position among
  // the unkeyed ones of the same kind).
  function merge(parent, kids) {
    const keyed = new Map();
    const loose = new Map();
    for (const n of Array.from(parent.childNodes)) {
      const k = keyOf(n);
      const map = k === null ? loose : keyed;
      const at = k === null ? n.nodeName : k;
      if (!map.has(at)) map.set(at, []);
      map.get(at).push(n);
    }
    let cursor = parent.firstChild;
    for (const kid of kids) {
      const k = keyOf(kid);
      const queue = k === null ? loose.get(kid.nodeName) : keyed.get(k);
      const match = queue && queue.length ? queue.shift() : null;
      const node = match ? morph(match, kid) : kid;
      if (node === cursor) cursor = cursor.nextSibling;
      else parent.insertBefore(node, cursor);
    }
    while (cursor) {
      const next = cursor.nextSibling;
      cursor.remove();
      cursor = next;
    }
  }

  const badge = (s) => el('span', { class: 'badge ' + cls(s) }, s || 'unknown');
  const firstLine = (s) => String(s || '').split('\n')[0];

  // --- formats ----------------------------------------------------------------------------
  function human(ms) {
    if (ms === null || ms === undefined) return '–';
    if (ms < 1000) return ms + 'ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + 's';
    const s = Math.floor((ms % 60000) / 1000);
    return Math.floor(ms / 60000) + 'm' + (s < 10 ? '0' : '') + s + 's';
  }
  function utc(ms) {
    if (!ms) return '–';
    return new Date(ms).toISOString().replace('T', ' ').slice(0, 19);
  }
  const cost = (c) => (c === null || c === undefined ? '–' : '$' + Number(c).toFixed(4));
  const num = (n) => (n === null || n === undefined ? '–' : String(n));
  function usage(u) {
    if (!u) return null;
    let s = u.calls + ' call(s), ' + u.input_tokens + ' in + ' + u.output_tokens + ' out tokens';
    if (u.cost_usd !== null && u.cost_usd !== undefined) s += ', ' + cost(u.cost_usd);
    return s;
  }

  async function getJSON(url) {
    const r = await fetch(url, { headers: { accept: 'application/json' } });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error(body && body.error ? body.error : r.status + ' ' + r.statusText);
    return body;
  }

  // --- routing ----------------------------------------------------------------------------
  // Each view gets a generation number; work of a view the user left is dropped.
  let generation = 0;
  let view = null;
  function leave() {
    if (view) {
      if (view.source) view.source.close();
      clearTimeout(view.timer);
    }
    view = null;
    live.textContent = '';
    live.className = 'muted';
  }
  function route() {
    leave();
    generation += 1;
    const m = /^#\/run\/([^/]+)$/.exec(location.hash);
    if (m) showRun(decodeURIComponent(m[1]), generation);
    else showList(generation);
  }
  window.addEventListener('hashchange', route);

  // --- the list of runs -------------------------------------------------------------------
  async function showList(gen) {
    where.textContent = '';
    document.title = 'Nuvira runs';
    let runs;
    try {
      runs = await getJSON('/api/runs');
    } catch (e) {
      if (gen === generation) app.replaceChildren(el('p', { class: 'error' }, 'Cannot list the runs: ', e.message));
      return;
    }
    if (gen !== generation) return;
    view = { timer: null };
    if (!runs.length) {
      merge(app, [el('p', { id: 'empty', class: 'muted' },
        'No runs recorded yet: every `nuvira run` is recorded in .nuvira/runs/.')]);
    } else {
      const rows = runs.map((r) => el('tr', { class: 'run ' + cls(r.status), 'data-run': r.id },
        el('td', null, el('a', { class: 'run-link', href: '#/run/' + encodeURIComponent(r.id) }, el('code', null, r.id))),
        el('td', null, badge(r.status)),
        el('td', null, utc(r.started_ms)),
        el('td', { class: 'num' }, human(r.duration_ms)),
        el('td', { class: 'num' }, num(r.tokens)),
        el('td', { class: 'num' }, cost(r.cost_usd)),
        el('td', { class: 'goal' }, firstLine(r.goal))));
      merge(app, [el('section', { id: 'runs' },
        el('h1', null, 'Runs ', el('small', { class: 'muted' }, runs.length + ' recorded')),
        el('table', { id: 'run-list' },
          el('thead', null, el('tr', null,
            ['id', 'status', 'started (UTC)', 'duration', 'tokens', 'cost', 'goal'].map((h) => el('th', null, h)))),
          el('tbody', null, rows)))]);
    }
    // New runs appear, running ones change: the list is read again every few seconds.
    view.timer = setTimeout(() => { if (gen === generation) showList(gen); }, 3000);
  }

  // --- one run ----------------------------------------------------------------------------
  function showRun(id, gen) {
    where.textContent = id;
    document.title = 'Nuvira ' + id;
    const body = el('div', { id: 'run-body' }, el('p', { class: 'muted' }, 'Loading…'));
    const events = el('ol', { id: 'events' });
    const count = el('small', { id: 'event-count' }, '');
    app.replaceChildren(el('section', { id: 'run', 'data-run': id }, body,
      el('section', { id: 'event-log' }, el('h2', null, 'Events ', count), events)));
    view = { id, gen, body, events, count, selected: null, shown: '', n: 0, source: null, timer: null, pending: null, again: false, ended: false };
    load(view).then(() => follow(view));
  }

  // One read of the run at a time; a read asked for while one goes on runs once after it, and
  // the promise resolves when the run is drawn as it was when it was asked for.
  function load(v) {
    if (v.pending) { v.again = true; return v.pending; }
    v.pending = (async () => {
      do {
        v.again = false;
        await read(v);
      } while (v.again && v.gen === generation);
      v.pending = null;
    })();
    return v.pending;
  }

  async function read(v) {
    try {
      const r = await fetch('/api/runs/' + encodeURIComponent(v.id), { headers: { accept: 'application/json' } });
      const text = await r.text();
      if (v.gen !== generation) return;
      let d = null;
      try { d = JSON.parse(text); } catch (_) { /* shown below */ }
      if (!r.ok || !d) throw new Error(d && d.error ? d.error : r.status + ' ' + r.statusText);
      // Drawn again only when something changed (`fold` says what the server's refresh cost,
      // nothing to draw).
      const key = JSON.stringify(Object.assign({}, d, { fold: null }));
      if (key === v.shown) return;
      v.shown = key;
      merge(v.body, renderRun(d, v));
    } catch (e) {
      if (v.gen === generation) {
        v.shown = '';
        merge(v.body, [el('p', { class: 'error', id: 'run-error' }, 'Cannot show run ', v.id, ': ', e.message)]);
      }
    }
  }

  // The run is read again shortly after events arrive (a burst gives one read).
  function soon(v) {
    if (v.timer) return;
    v.timer = setTimeout(() => { v.timer = null; if (v.gen === generation) load(v); }, 250);
  }

  function follow(v) {
    if (v.gen !== generation) return;
    const src = new EventSource('/api/runs/' + encodeURIComponent(v.id) + '/events');
    v.source = src;
    live.textContent = 'following';
    live.className = 'on';
    src.addEventListener('event', (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      logEvent(v, ev);
      if (!v.ended) soon(v);
    });
    src.addEventListener('reset', () => { v.events.replaceChildren(); v.n = 0; });
    src.addEventListener('end', (e) => {
      let d = {};
      try { d = JSON.parse(e.data); } catch (_) { /* keep {} */ }
      src.close();
      v.ended = true;
      // Said once the run is drawn as it ended.
      load(v).then(() => {
        if (v.gen !== generation) return;
        live.textContent = 'run over: ' + (d.status || 'unknown');
        live.className = 'muted ended';
      });
    });
    src.addEventListener('error', () => {
      if (!v.ended) { live.textContent = 'reconnecting…'; live.className = 'muted'; }
    });
  }

  function logEvent(v, ev) {
    const list = v.events;
    // Kept at the newest line unless the user scrolled up to read.
    const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
    v.n += 1;
    v.count.textContent = v.n + ' so far';
    const parts = ['#' + num(ev.seq), utc(ev.ts), ev.type || '?'];
    if (ev.step_id) parts.push('step ' + ev.step_id);
    if (ev.name) parts.push(ev.name);
    if (ev.model) parts.push(ev.model);
    if (ev.message) parts.push('— ' + firstLine(ev.message));
    v.events.append(el('li', { class: 'event', 'data-type': ev.type || '' }, parts.join('  ')));
    while (v.events.childElementCount > 1000) v.events.firstElementChild.remove();
    if (atEnd) list.scrollTop = list.scrollHeight;
  }

  // --- rendering a run --------------------------------------------------------------------
  function stepLabel(s) {
    // As the reports say: a failed step without a category was stopped by the cancellation.
    if (s.status === 'failed' && (s.category === null || s.category === undefined)) return 'cancelled';
    return cls(s.status);
  }
  function stepResult(s) {
    if (s.status !== 'succeeded' && s.message) return firstLine(s.message);
    if (s.tests) return s.tests.passed + ' passed, ' + s.tests.failed + ' failed, ' + s.tests.skipped + ' skipped';
    if (s.file_changes && s.file_changes.length) return s.file_changes.length + ' file(s) changed';
    return '';
  }

  function renderRun(d, v) {
    const run = d.run || {};
    const r = d.report;
    const out = [];
    out.push(el('h1', null, 'Run ', el('code', null, run.id), ' ', badge(run.status)));
    if (run.goal) out.push(el('p', { class: 'goal' }, el('b', null, 'Goal: '), run.goal));
    const facts = [
      'started ' + utc(run.started_ms) + ' UTC',
      run.duration_ms !== null && run.duration_ms !== undefined ? 'took ' + human(run.duration_ms) : 'still going or interrupted',
    ];
    if (run.resumes) facts.push('resumed ' + run.resumes + '×');
    if (run.replay_of) facts.push('replay of ' + run.replay_of);
    out.push(el('p', { class: 'muted' }, facts.join(' · ')));
    if (!r) {
      out.push(el('p', { class: 'note', id: 'no-report' }, 'No report yet: ', d.report_error || 'nothing recorded'));
      return out;
    }
    if (r.summary) out.push(el('p', { class: 'summary' }, r.summary));
    if (r.cancel_reason) out.push(el('p', { class: 'note' }, 'Cancelled: ', r.cancel_reason));
    if (r.budget_exceeded) out.push(el('p', { class: 'note' }, 'Stopped: ', r.budget_exceeded));
    if (r.usage) out.push(el('p', { class: 'usage' }, 'Model: ', usage(r.usage)));
    const c = r.counts || {};
    out.push(el('ul', { class: 'counts' },
      el('li', null, el('b', null, num(c.steps)), ' steps'),
      el('li', null, el('b', null, num(c.succeeded)), ' succeeded'),
      el('li', null, el('b', null, num(c.failed)), ' failed'),
      el('li', null, el('b', null, num(c.skipped)), ' skipped'),
      el('li', null, el('b', null, num(c.tests_passed)), ' tests passed'),
      el('li', null, el('b', null, num(c.tests_failed)), ' tests failed'),
      el('li', null, el('b', null, num(c.files_changed)), ' files changed (+' + num(c.lines_added) + ' −' + num(c.lines_removed) + ')')));

    const steps = r.steps || [];
    out.push(el('section', { id: 'graph' }, el('h2', null, 'Plan graph'), dag(steps, d.layers || []), legend()));
    out.push(el('section', { id: 'timeline' }, el('h2', null, 'Timeline'), timeline(r, steps)));
    out.push(el('section', { id: 'steps' }, el('h2', null, 'Steps'), stepTable(steps, v.selected)));
    out.push(callsSection(d.calls || [], d.calls_error));
    const findings = [];
    for (const s of steps) for (const f of s.findings || []) findings.push([s, f]);
    if (findings.length) out.push(findingsSection(findings, c));
    const failures = findings.filter(([, f]) => f.kind === 'test-failure');
    if (failures.length) out.push(testsSection(failures));
    const changes = [];
    for (const s of steps) for (const ch of s.file_changes || []) changes.push([s, ch]);
    if (changes.length) out.push(changesSection(changes));
    if (r.follow_up && r.follow_up.length) {
      out.push(el('section', { id: 'next' }, el('h2', null, 'Next steps'), el('ul', null, r.follow_up.map((f) => el('li', null, f)))));
    }
    if (d.operations && d.operations.length) out.push(operations(d.operations));
    return out;
  }

  const NODE_W = 168, NODE_H = 46, GAP_X = 64, GAP_Y = 20, PAD = 16;
  function short(s, max) {
    const chars = Array.from(String(s));
    return chars.length <= max ? chars.join('') : chars.slice(0, max - 1).join('') + '…';
  }

  function dag(steps, layers) {
    const byId = new Map(steps.map((s) => [s.id, s]));
    const nrows = Math.max(1, ...layers.map((l) => l.length));
    const width = PAD * 2 + Math.max(1, layers.length) * NODE_W + Math.max(0, layers.length - 1) * GAP_X;
    let height = PAD * 2 + nrows * NODE_H + (nrows - 1) * GAP_Y;
    const xy = new Map();
    const layerOf = new Map();
    const bottoms = [];
    layers.forEach((layer, l) => {
      const offset = ((nrows - layer.length) * (NODE_H + GAP_Y)) / 2;
      let bottom = 0;
      layer.forEach((id, k) => {
        const y = PAD + offset + k * (NODE_H + GAP_Y);
        xy.set(id, [PAD + l * (NODE_W + GAP_X), y]);
        layerOf.set(id, l);
        bottom = y + NODE_H;
      });
      bottoms.push(bottom);
    });
    const edges = [];
    let lanes = 0;
    for (const s of steps) {
      for (const dep of s.depends_on || []) {
        if (!xy.has(dep) || !xy.has(s.id)) continue;
        const [x1, y1] = xy.get(dep);
        const [x2, y2] = xy.get(s.id);
        const sx = x1 + NODE_W, sy = y1 + NODE_H / 2, ex = x2, ey = y2 + NODE_H / 2;
        const lj = layerOf.get(dep), li = layerOf.get(s.id);
        let path;
        if (li > lj + 1) {
          // An edge that skips layers runs below the nodes it would cross.
          lanes += 1;
          const below = Math.max(0, ...bottoms.slice(lj + 1, li));
          const lane = below + GAP_Y / 2 + lanes * 6;
          height = Math.max(height, lane + PAD);
          const ax = sx + GAP_X / 2, bx = ex - GAP_X / 2;
          path = `M ${sx} ${sy} C ${ax} ${sy}, ${sx} ${lane}, ${ax} ${lane} L ${bx} ${lane} C ${ex} ${lane}, ${bx} ${ey}, ${ex} ${ey}`;
        } else {
          const mid = (sx + ex) / 2;
          path = `M ${sx} ${sy} C ${mid} ${sy}, ${mid} ${ey}, ${ex} ${ey}`;
        }
        edges.push(svg('path', { class: 'edge', 'data-from': dep, 'data-to': s.id, d: path, 'marker-end': 'url(#arrow)' }));
      }
    }
    const nodes = [];
    for (const [id, [x, y]] of xy) {
      const s = byId.get(id);
      if (!s) continue;
      const status = stepLabel(s);
      const time = (s.status === 'succeeded' || s.status === 'failed') && s.duration_ms !== null && s.duration_ms !== undefined
        ? ' · ' + human(s.duration_ms) : '';
      const g = svg('g', { class: 'node ' + status, 'data-step': id },
        svg('title', null, id + ': ' + status + (s.message ? ' — ' + s.message : '')),
        svg('rect', { x, y, width: NODE_W, height: NODE_H, rx: 8 }),
        svg('text', { x: x + 10, y: y + 19, class: 'id' }, short(id, 20)),
        svg('text', { x: x + 10, y: y + 36, class: 'sub' }, short(s.module + ' · ' + status + time, 28)));
      nodes.push(g);
    }
    return svg('svg', { id: 'dag', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'plan graph, ' + steps.length + ' steps' },
      svg('defs', null, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        svg('path', { class: 'arrow', d: 'M 0 0 L 10 5 L 0 10 z' }))),
      edges, nodes);
  }

  function legend() {
    return el('p', { class: 'legend' }, ['succeeded', 'failed', 'skipped', 'running', 'pending', 'cancelled']
      .map((s) => [el('span', { class: 'swatch ' + s }), s + ' ']));
  }

  function timeline(r, steps) {
    let end = Math.max(1, r.duration_ms || 0);
    for (const s of steps) {
      if (s.started_ms !== null && s.started_ms !== undefined) end = Math.max(end, s.started_ms + (s.duration_ms || 0));
    }
    return el('div', { class: 'timeline' }, steps.map((s) => {
      const status = stepLabel(s);
      const bar = el('span', { class: 'bar ' + status });
      let label;
      if (s.started_ms !== null && s.started_ms !== undefined) {
        const d = s.duration_ms !== null && s.duration_ms !== undefined ? s.duration_ms : Math.max(0, end - s.started_ms);
        bar.style.left = ((s.started_ms * 100) / end).toFixed(2) + '%';
        bar.style.width = Math.max(0.4, (d * 100) / end).toFixed(2) + '%';
        label = human(s.started_ms) + ' → ' + human(s.started_ms + d);
      } else {
        bar.style.width = '0';
        label = status + ': never started';
      }
      bar.title = label;
      return el('div', { class: 'row', 'data-step': s.id },
        el('span', { class: 'label' }, el('code', null, s.id)),
        el('span', { class: 'track' }, bar),
        el('span', { class: 'when' }, label));
    }));
  }

  function stepTable(steps, selected) {
    const body = el('tbody', null, steps.map((s) => {
      const status = stepLabel(s);
      return el('tr', { class: 'step ' + status + (s.id === selected ? ' selected' : ''), 'data-step': s.id },
        el('td', null, el('code', null, s.id)),
        el('td', null, s.module),
        el('td', { class: 'status' }, badge(status)),
        el('td', { class: 'num' }, num(s.attempts)),
        el('td', { class: 'num' }, s.duration_ms === null || s.duration_ms === undefined ? '' : human(s.duration_ms)),
        el('td', { class: 'num' }, s.usage ? s.usage.input_tokens + s.usage.output_tokens : ''),
        el('td', { class: 'result' }, stepResult(s)));
    }));
    return el('table', { id: 'step-table' }, el('thead', null, el('tr', null,
      ['step', 'module', 'status', 'attempts', 'time', 'tokens', 'result'].map((h) => el('th', null, h)))), body);
  }

  function callsSection(calls, error) {
    const sec = el('section', { id: 'calls' }, el('h2', null, 'Model calls ', el('small', null, calls.length + ' call(s)')));
    if (error) sec.append(el('p', { class: 'error' }, error));
    if (!calls.length) { sec.append(el('p', { class: 'muted' }, 'No model call.')); return sec; }
    const body = el('tbody', null, calls.map((c) => {
      const note = c.error ? 'failed: ' + firstLine(c.error) : c.in_flight ? 'in flight' : c.from_record ? 'from the record' : '';
      const show = el('button', { type: 'button', class: 'show-call' }, 'show');
      return el('tr', { class: 'call', 'data-call': c.call },
        el('td', { class: 'num' }, num(c.call)),
        el('td', null, c.step ? el('code', null, c.step) : el('span', { class: 'muted' }, 'planner')),
        el('td', { class: 'num' }, num(c.attempt)),
        el('td', null, c.model),
        el('td', { class: 'num input-tokens' }, num(c.input_tokens)),
        el('td', { class: 'num output-tokens' }, num(c.output_tokens)),
        el('td', { class: 'num' }, c.latency_ms === null || c.latency_ms === undefined ? '–' : human(c.latency_ms)),
        el('td', { class: 'num' }, cost(c.cost_usd)),
        el('td', null, note),
        el('td', null, show));
    }));
    sec.append(el('table', { id: 'call-table' }, el('thead', null, el('tr', null,
      ['#', 'step', 'attempt', 'model', 'in tokens', 'out tokens', 'latency', 'cost', '', ''].map((h) => el('th', null, h)))), body),
      // Where `show` puts a call: kept as the user left it when the run is drawn again.
      el('div', { id: 'call-detail', 'data-keep': '' }));
    return sec;
  }

  async function showCall(runId, n) {
    const into = document.getElementById('call-detail');
    if (!into) return;
    into.replaceChildren(el('p', { class: 'muted' }, 'Loading call ' + n + '…'));
    try {
      const c = await getJSON('/api/runs/' + encodeURIComponent(runId) + '/calls/' + encodeURIComponent(n));
      const parts = [el('h3', null, 'Call ' + n + (c.step ? ' of step ' + c.step : ' of the planner'))];
      for (const m of (c.request && c.request.messages) || []) {
        const text = typeof m.content === 'string' ? m.content : JSON.stringify(m.content === undefined ? m : m.content, null, 2);
        parts.push(el('details', null, el('summary', null, String(m.role || 'message')), el('pre', { class: 'message' }, text)));
      }
      if (c.response) {
        const text = c.response.text || JSON.stringify(c.response.json === undefined ? c.response : c.response.json, null, 2);
        parts.push(el('details', { open: '' }, el('summary', null, 'answer'), el('pre', { class: 'answer' }, text)));
      }
      if (c.error) parts.push(el('pre', { class: 'error' }, c.error));
      parts.push(el('details', null, el('summary', null, 'hashes'), el('pre', null, JSON.stringify(c.hashes, null, 2))));
      into.replaceChildren(...parts);
    } catch (e) {
      into.replaceChildren(el('p', { class: 'error' }, 'Cannot load call ' + n + ': ' + e.message));
    }
  }

  function location_(f) {
    if (!f.path) return '';
    return f.path + (f.line ? ':' + f.line + (f.column ? ':' + f.column : '') : '');
  }

  function findingsSection(findings, c) {
    const sev = (s) => (s === 'error' || s === 'warning' ? s : 'notice');
    return el('section', { id: 'findings' },
      el('h2', null, 'Findings ', el('small', null, num(c.errors) + ' error(s), ' + num(c.warnings) + ' warning(s)')),
      el('table', null, el('thead', null, el('tr', null, ['severity', 'where', 'step', 'what'].map((h) => el('th', null, h)))),
        el('tbody', null, findings.map(([s, f]) => el('tr', { class: 'finding ' + sev(f.severity) },
          el('td', { class: 'sev' }, sev(f.severity)),
          el('td', null, el('code', null, location_(f))),
          el('td', null, el('code', null, s.id)),
          el('td', null, el('b', null, f.title), ': ', f.message))))));
  }

  function testsSection(failures) {
    // Keyed by step, test and place: an opened "captured output" stays with its failure when
    // failures come and go around it.
    const name = (f) => String(f.title || '').replace(/^test failed: /, '');
    return el('section', { id: 'tests' }, el('h2', null, 'Test failures'), failures.map(([s, f]) => el('article', { class: 'failure', 'data-failure': s.id + '|' + name(f) + '|' + location_(f) },
      el('h3', { class: 'test-name' }, name(f)),
      el('p', null, el('code', null, location_(f)), ' · step ', el('code', null, s.id)),
      el('pre', { class: 'message' }, f.message),
      f.detail && f.detail.trim() ? el('details', null, el('summary', null, 'captured output'), el('pre', null, f.detail)) : null)));
  }

  function changesSection(changes) {
    return el('section', { id: 'changes' }, el('h2', null, 'File changes'), changes.map(([s, ch]) => {
      const rolled = (s.rolled_back || []).includes(ch.path);
      const pre = el('pre', { class: 'diff' }, String(ch.diff || '').split('\n').map((line) => {
        let k = 'ctx';
        if (line.startsWith('+++') || line.startsWith('---')) k = 'file';
        else if (line.startsWith('+')) k = 'add';
        else if (line.startsWith('-')) k = 'del';
        else if (line.startsWith('@@')) k = 'hunk';
        return el('span', { class: k }, line);
      }));
      return el('details', { open: '', class: 'change', 'data-path': ch.path },
        el('summary', null, el('code', null, ch.path), ' ', el('span', { class: 'add' }, '+' + num(ch.additions)), ' ',
          el('span', { class: 'del' }, '−' + num(ch.deletions)), ' · step ', el('code', null, s.id), rolled ? el('b', null, ' · rolled back') : null),
        pre);
    }));
  }

  function operations(ops) {
    return el('section', { id: 'operations' }, el('details', null, el('summary', null, 'Operation records (' + ops.length + ')'),
      el('table', null, el('thead', null, el('tr', null, ['step', 'state', 'at (UTC)', 'attempt'].map((h) => el('th', null, h)))),
        el('tbody', null, ops.map((o) => el('tr', null, el('td', null, el('code', null, o.step)), el('td', null, o.state),
          el('td', null, utc(o.at)), el('td', { class: 'num' }, num(o.attempt))))))));
  }

  // Clicks on what a run view draws, handled here once: its nodes come and go as it is
  // merged again, a listener on each would be lost or doubled.
  app.addEventListener('click', (e) => {
    const v = view;
    if (!v || !v.id || !(e.target instanceof Element)) return;
    const node = e.target.closest('#dag g.node');
    if (node) {
      const id = node.getAttribute('data-step');
      v.selected = id;
      let row = null;
      for (const tr of document.querySelectorAll('#step-table tr.step')) {
        const on = tr.getAttribute('data-step') === id;
        tr.classList.toggle('selected', on);
        if (on) row = tr;
      }
      if (row) row.scrollIntoView({ block: 'center' });
      return;
    }
    const show = e.target.closest('#call-table button.show-call');
    if (show) {
      const tr = show.closest('tr.call');
      if (tr) showCall(v.id, tr.getAttribute('data-call'));
    }
  });

  route();
})();
