// spillway's web page: vanilla JS over the server's JSON APIs, no
// dependencies, nothing loaded from elsewhere. docs/ui.md describes the
// views; every element a test reads has a data-testid.
'use strict';

const POLL_MS = 2000;
const PAGE = 100; // services per page; the server pages (GET /v1/summary)
const HISTORY = 180; // same-zone points kept per service (6 min at 2 s)
// Okabe–Ito, colour-blind safe; zones get them in the order the page first sees them.
const PALETTE = ['#E69F00', '#56B4E9', '#009E73', '#F0E442', '#0072B2', '#D55E00', '#CC79A7', '#000000'];

const state = {
  offset: 0,
  query: '',
  history: new Map(), // service -> [{t, measured, planned}]
  zoneColors: new Map(),
  timer: 0,
  gen: 0, // bumped on every navigation; stale refreshes drop their result
  panic: null,
};

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

// el builds an element: el('td', {class: 'num', 'data-testid': 'x'}, 'text', child...).
function el(tag, attrs, ...children) {
  const ns = ['svg', 'line', 'polyline', 'circle', 'text', 'g', 'title', 'path', 'marker', 'defs', 'rect'].includes(tag);
  const e = ns ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'style') Object.assign(e.style, v); // CSSOM: allowed by the CSP, unlike a style attribute
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// share formats a percentage with one decimal, as the flow cells hold it
// (Number.prototype.toFixed(1), the same digits as Go's
// strconv.FormatFloat(v, 'f', 1, 64)).
const share = (v) => v.toFixed(1);
const pct = (v) => `${share(v)} %`;
const rps = (v) => `${v.toFixed(1)} rps`;
const zoneLabel = (z) => (z === '' ? '(no zone)' : z);
// ratio formats a max/avg with three decimals; protojson writes NaN and
// infinities as strings ("NaN"), shown as —.
const ratio = (v) => (Number.isFinite(Number(v)) ? Number(v).toFixed(3) : '—');

function zoneColor(z) {
  if (!state.zoneColors.has(z)) state.zoneColors.set(z, PALETTE[state.zoneColors.size % PALETTE.length]);
  return state.zoneColors.get(z);
}
function zoneChip(z) {
  return el('span', { class: 'chip' }, el('span', { class: 'swatch', style: { background: zoneColor(z) }, 'aria-hidden': 'true' }), zoneLabel(z));
}

// nodes flattens children for replaceChildren, dropping null.
const nodes = (...cs) => cs.flat(2).filter((c) => c !== null && c !== undefined);

class APIError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

// api fetches a JSON API of this server; errors carry the server's
// message ({"error": ...}) and the HTTP status.
async function api(path, opts) {
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    throw new APIError(0, `${path}: server unreachable (${e.message})`);
  }
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!resp.ok) {
    const msg = body && body.error ? body.error : text.trim() || resp.statusText;
    throw new APIError(resp.status, `${resp.status}: ${msg}`);
  }
  return body;
}

function showError(msg) {
  const p = document.querySelector('[data-testid=error]');
  p.textContent = msg || '';
  p.hidden = !msg;
}

function setStatus(now) {
  document.querySelector('[data-testid=status]').textContent = `updated ${timeFmt.format(now)}`;
}

// ---- routing ------------------------------------------------------------

function route() {
  const h = location.hash || '#/services';
  let m;
  if ((m = h.match(/^#\/service\/(.+)$/))) return { view: 'service', name: decodeURIComponent(m[1]) };
  if (h === '#/graph') return { view: 'graph' };
  if (h === '#/migration') return { view: 'migration' };
  return { view: 'services' };
}

function navigate() {
  const r = route();
  state.gen++;
  clearTimeout(state.timer);
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.nav === r.view || (r.view === 'service' && a.dataset.nav === 'services')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = document.getElementById('main');
  main.replaceChildren();
  showError('');
  const views = { services: servicesView, service: serviceView, graph: graphView, migration: migrationView };
  const refresh = views[r.view](main, r);
  document.title = r.view === 'service' ? `${r.name} · spillway` : `${r.view} · spillway`;
  poll(refresh, state.gen);
}

// poll runs refresh now and every POLL_MS until the next navigation.
async function poll(refresh, gen) {
  try {
    await refresh(() => gen !== state.gen);
    if (gen === state.gen) { showError(''); setStatus(new Date()); }
  } catch (e) {
    if (gen === state.gen) showError(e.message);
  }
  if (gen === state.gen) state.timer = setTimeout(() => poll(refresh, gen), POLL_MS);
}

// restart polls refresh again now, ending the current loop.
function restart(refresh) {
  state.gen++;
  clearTimeout(state.timer);
  poll(refresh, state.gen);
}

// keepFocus re-focuses the element matching the same data-service after
// fn replaced a list, so that polling does not steal keyboard focus.
function keepFocus(fn) {
  const a = document.activeElement;
  const key = a && a.dataset ? a.dataset.focuskey : undefined;
  fn();
  if (key) {
    const again = document.querySelector(`[data-focuskey="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

// ---- services -----------------------------------------------------------

function servicesView(main) {
  const search = el('input', {
    type: 'search', 'data-testid': 'services-search', 'aria-label': 'Search services by name',
    placeholder: 'Search services', value: state.query,
  });
  let debounce = 0;
  search.addEventListener('input', () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { state.query = search.value; state.offset = 0; restart(refresh); }, 200);
  });
  const prev = el('button', { type: 'button', 'data-testid': 'services-prev' }, '← Previous');
  const next = el('button', { type: 'button', 'data-testid': 'services-next' }, 'Next →');
  const range = el('span', { 'data-testid': 'services-range', 'aria-live': 'polite' });
  const clients = el('p', { 'data-testid': 'client-counts', class: 'note' });
  const tbody = el('tbody');
  const table = el('table', { 'data-testid': 'services-table' },
    el('caption', {}, 'Services'),
    el('thead', {}, el('tr', {},
      el('th', { scope: 'col' }, 'Service'),
      el('th', { scope: 'col', class: 'num' }, 'Endpoints'),
      el('th', { scope: 'col' }, 'By zone (healthy / all)'),
      el('th', { scope: 'col' }, 'Health'),
      el('th', { scope: 'col' }, 'Source'),
      el('th', { scope: 'col', class: 'num' }, 'xDS clients'),
      el('th', { scope: 'col', class: 'num' }, 'xDS streams'))),
    tbody);
  const page = (d) => { state.offset = Math.max(0, state.offset + d * PAGE); restart(refresh); };
  prev.addEventListener('click', () => page(-1));
  next.addEventListener('click', () => page(1));
  main.append(el('h1', {}, 'Services'), el('div', { class: 'toolbar' }, search, prev, next, range), clients, table);

  async function refresh(stale) {
    const q = new URLSearchParams({ query: state.query, offset: state.offset, limit: PAGE });
    const s = await api(`/v1/summary?${q}`);
    if (stale()) return;
    const end = s.offset + s.services.length;
    range.textContent = s.total === 0 ? 'no services' : `${s.offset + 1}–${end} of ${s.total}`;
    prev.disabled = s.offset === 0;
    next.disabled = end >= s.total;
    const c = s.clients;
    clients.textContent = `Client services on xDS: ${c.xds_services} (${c.xds_nodes} nodes, ${c.xds_streams} streams); services without an xDS stream (DNS or no client): ${c.dns_services}.`;
    keepFocus(() => tbody.replaceChildren(...s.services.map(serviceRow)));
  }
  return refresh;
}

function serviceRow(s) {
  const href = `#/service/${encodeURIComponent(s.name)}`;
  const zones = s.zones.map((z) => el('span', { class: 'chip' }, zoneChip(z.zone), ` ${z.healthy} / ${z.healthy + z.draining + z.unhealthy}`));
  const tr = el('tr', { 'data-testid': 'service-row', 'data-service': s.name },
    el('td', {}, el('a', { href, 'data-focuskey': `svc:${s.name}` }, s.name)),
    el('td', { class: 'num' }, s.endpoints),
    el('td', {}, zones.length ? zones : '—'),
    el('td', {}, `${s.healthy} healthy, ${s.draining} draining, ${s.unhealthy} unhealthy`),
    el('td', {}, s.sources.join(', ') || '—'),
    el('td', { class: 'num' }, s.xds_clients),
    el('td', { class: 'num' }, s.xds_streams));
  tr.addEventListener('click', (e) => { if (e.target.tagName !== 'A') location.hash = href; });
  return tr;
}

// ---- one service --------------------------------------------------------

// measuredMatrix: from /v1/load rows, the share in % of the issued RPCs
// (issued_rps of the fresh LRS reports, summed over client services) from
// client zone i that went to backend zone j, out of all issued from i:
//   measured[i][j] = 100 * sum(issued_rps | client_zone=i, locality.zone=j)
//                        / sum(issued_rps | client_zone=i)
// A client zone that issued nothing is left out.
function measuredMatrix(load) {
  const rates = new Map(); // from -> Map(to -> rps)
  for (const r of load.rows || []) {
    const from = r.client_zone, to = (r.locality && r.locality.zone) || '';
    if (!rates.has(from)) rates.set(from, new Map());
    const row = rates.get(from);
    row.set(to, (row.get(to) || 0) + (r.issued_rps || 0));
  }
  return normalise(rates);
}

// plannedMatrix: from /v1/weights routes, client zone i's locality
// weights normalised to %:
//   planned[i][j] = 100 * weight(route client_zone=i, zone=j) / sum_j weight
function plannedMatrix(weights) {
  const ws = new Map();
  for (const rt of (weights && weights.routes) || []) {
    const row = new Map();
    for (const w of rt.weights || []) row.set(w.zone, (row.get(w.zone) || 0) + w.weight);
    ws.set(rt.client_zone, row);
  }
  return normalise(ws);
}

// normalise turns Map(from -> Map(to -> v)) into {from: {to: %}, totals}.
function normalise(m) {
  const out = { shares: new Map(), totals: new Map() };
  for (const [from, row] of m) {
    let total = 0;
    for (const v of row.values()) total += v;
    if (total <= 0) continue;
    const s = new Map();
    for (const [to, v] of row) s.set(to, (100 * v) / total);
    out.shares.set(from, s);
    out.totals.set(from, total);
  }
  return out;
}

// sameZone is the share in % of everything (measured: rps, so weighted
// by each zone's traffic) that stays in its own zone.
function sameZone(load) {
  let all = 0, same = 0;
  for (const r of load.rows || []) {
    const v = r.issued_rps || 0;
    all += v;
    if (r.client_zone !== '' && r.locality && r.locality.zone === r.client_zone) same += v;
  }
  return all > 0 ? (100 * same) / all : null;
}

function matrixTable(testid, title, mx, zones, unitTotal) {
  const from = [...mx.shares.keys()].sort();
  const head = el('tr', {}, el('th', { scope: 'col' }, 'from ↓ / to →'), zones.map((z) => el('th', { scope: 'col' }, zoneChip(z))),
    unitTotal ? el('th', { scope: 'col', class: 'num' }, 'total') : null);
  const rows = from.map((f) => {
    const s = mx.shares.get(f);
    return el('tr', {}, el('th', { scope: 'row' }, zoneChip(f)),
      zones.map((z) => {
        const v = s.get(z);
        if (v === undefined) return el('td', { class: 'num', 'data-from': f, 'data-to': z }, '');
        return el('td', {
          class: 'num', 'data-from': f, 'data-to': z, title: `${zoneLabel(f)} → ${zoneLabel(z)}: ${pct(v)}`,
          style: { background: `rgba(0,114,178,${(0.08 + (0.5 * v) / 100).toFixed(3)})` },
        }, share(v));
      }),
      unitTotal ? el('td', { class: 'num' }, unitTotal(mx.totals.get(f))) : null);
  });
  return el('table', { 'data-testid': testid }, el('caption', {}, title), el('thead', {}, head), el('tbody', {}, rows));
}

function chart(points) {
  const W = 640, H = 180, L = 40, R = 10, T = 10, B = 24;
  const x = (i) => L + ((W - L - R) * i) / Math.max(HISTORY - 1, 1);
  const y = (v) => T + (H - T - B) * (1 - v / 100);
  const svg = el('svg', { 'data-testid': 'same-zone-chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': 'Same-zone share over time, in percent' });
  for (const v of [0, 50, 100]) {
    svg.append(el('line', { class: 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }), el('text', { x: 4, y: y(v) + 4 }, `${v} %`));
  }
  const start = Math.max(0, HISTORY - points.length);
  const line = (key, color, dash) => {
    const pts = points.map((p, i) => (p[key] === null ? null : `${x(start + i).toFixed(1)},${y(p[key]).toFixed(1)}`)).filter(Boolean);
    if (pts.length) svg.append(el('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-dasharray': dash }));
  };
  line('planned', '#E69F00', '6 3');
  line('measured', '#0072B2');
  if (points.length) {
    svg.append(el('text', { x: L, y: H - 6 }, timeFmt.format(points[0].t)), el('text', { x: W - R - 60, y: H - 6 }, timeFmt.format(points[points.length - 1].t)));
  }
  return svg;
}

function serviceView(main, r) {
  const name = r.name;
  const title = el('h1', { 'data-testid': 'service-title' }, name);
  const body = el('div');
  // The subsets panel outlives the polls (its input keeps what is typed
  // and its focus); each poll updates it in place.
  const subsets = subsetsPanel(main, () => restart(refresh));
  main.append(el('p', {}, el('a', { href: '#/services' }, '← all services')), title, body);

  async function refresh(stale) {
    const sum = await api(`/v1/summary?${new URLSearchParams({ name })}`);
    if (stale()) return;
    const info = sum.services[0];
    if (!info) {
      body.replaceChildren(el('p', { 'data-testid': 'unknown-service' }, `No service named ${name} in the registry.`));
      subsets.update(null, null);
      return;
    }
    const q = encodeURIComponent(name);
    // The client asked for in the subsets panel comes with the weights.
    const wq = new URLSearchParams({ service: name });
    if (subsets.client()) wq.set('client', subsets.client());
    // The config's read is open (GET /v1/config/NAME needs no token); a
    // failure of it shows in the Policies panel, not over the page.
    const [eps, load, weights, cfg] = await Promise.all([
      api(`/v1/services/${q}/endpoints`),
      api(`/v1/load?service=${q}`),
      info.weights ? api(`/v1/weights?${wq}`) : Promise.resolve(null),
      api(`/v1/config/${q}`).catch((e) => ({ error: e.message })),
    ]);
    if (stale()) return;
    const measured = measuredMatrix(load), planned = plannedMatrix(weights);
    const zones = new Set([...info.zones.map((z) => z.zone)]);
    for (const mx of [measured, planned]) for (const row of mx.shares.values()) for (const z of row.keys()) zones.add(z);
    const zs = [...zones].sort();

    let hist = state.history.get(name);
    if (!hist) state.history.set(name, (hist = []));
    hist.push({ t: new Date(), measured: sameZone(load), planned: weights ? 100 * weights.same_zone : null });
    if (hist.length > HISTORY) hist.splice(0, hist.length - HISTORY);

    keepFocus(() => body.replaceChildren(...nodes(
      el('p', {}, `${info.endpoints} endpoints (${info.healthy} healthy, ${info.draining} draining, ${info.unhealthy} unhealthy) · source ${info.sources.join(', ') || '—'} · ${info.xds_clients} xDS clients`),
      el('h2', {}, 'Endpoints'), endpointsTable(eps, weights),
      el('h2', {}, 'Zone flows'),
      el('p', { class: 'note' }, 'Share of each client zone\'s RPCs by backend zone, in %. Measured: LRS issued rps over the report window. Planned: the locality weights pushed to that client zone.'),
      el('div', { class: 'matrices' },
        matrixTable('flow-measured', 'Measured (LRS)', measured, zs, rps),
        matrixTable('flow-planned', 'Planned (weights)', planned, zs, null)),
      measured.shares.size === 0 ? el('p', { class: 'note' }, 'No load reported yet.') : null,
      el('h2', {}, 'Same-zone share over time'),
      el('p', { class: 'note' }, 'Solid: measured (LRS, kept by this page while it is open). Dashed: planned (the weights cycle\'s same-zone share).'),
      chart(hist),
      el('h2', {}, 'Why these weights'), explainView(weights),
      weights && weights.zones && weights.zones.length ? [el('h2', {}, 'Capacity by zone'), zonesTable(weights)] : null,
      regionsView(weights), routeRulesView(weights), policiesView(cfg))));
    subsets.update(weights && weights.subsets, eps);
  }
  return refresh;
}

// subsetsPanel is the "Subsets" section of a service whose weights have
// subsets (GET /v1/weights `subsets`): the mode and size, the client
// slots, the clients per endpoint, and a form asking for one client's
// subset by node id (the same API with &client=NODE). It is appended to
// main when the service has subsets and removed when it has none. ask is
// called when the form asks for another client, to poll again now.
// Node ids, zones and endpoint ids are shown as text only (el).
function subsetsPanel(main, ask) {
  let asked = ''; // the node id asked for; '' for none
  const summary = el('tbody');
  const result = el('div', { 'data-testid': 'subset-client', 'aria-live': 'polite' });
  const input = el('input', {
    type: 'text', 'data-testid': 'subset-client-input', 'aria-label': 'Client node id', placeholder: 'Client node id',
    autocomplete: 'off', spellcheck: 'false',
  });
  const form = el('form', { class: 'toolbar', 'data-testid': 'subset-client-form' },
    el('label', {}, 'Client ', input),
    el('button', { type: 'submit', 'data-testid': 'subset-client-show' }, 'Show its subset'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    asked = input.value.trim();
    ask();
  });
  const panel = el('section', { 'data-testid': 'subsets' },
    el('h2', {}, 'Subsets'),
    el('p', { class: 'note' }, 'Each xDS client of this service is sent a subset of its endpoints (service config subset_mode, subset_size). Clients per endpoint: of the healthy endpoints, how many client slots hold each.'),
    el('table', { 'data-testid': 'subsets-table' }, summary),
    el('h3', {}, 'One client\'s subset'),
    form, result);

  function update(s, eps) {
    if (!s) {
      panel.remove();
      return;
    }
    if (!panel.isConnected) main.append(panel);
    const row = (head, testid, text) => el('tr', {}, el('th', { scope: 'row' }, head), el('td', { 'data-testid': testid }, text));
    summary.replaceChildren(
      row('Mode', 'subsets-mode', s.mode),
      row('Size', 'subsets-size', `${s.size} endpoints per client`),
      row('Client slots', 'subsets-slots', `${s.slots} slots`),
      row('Clients per endpoint', 'subsets-clients-per-endpoint',
        `${s.clients_per_endpoint_min} to ${s.clients_per_endpoint_max} slots (max/avg ${ratio(s.clients_per_endpoint_max_over_avg)})`));
    result.replaceChildren(...nodes(clientSubset(asked, s.client, eps)));
  }
  return { update, client: () => asked };
}

// clientSubset shows the answer for the client asked: its zone (the group
// it is numbered in), replica in a mesh-wide plan, slot and endpoints,
// with each endpoint's address when the endpoints list has it.
function clientSubset(asked, c, eps) {
  if (asked === '') return el('p', { class: 'note' }, 'Type a client\'s node id (its xDS bootstrap node.id) to see its subset.');
  if (!c || c.node_id !== asked) {
    return el('p', { 'data-testid': 'subset-client-missing' }, 'No stream of this service from node ', el('code', {}, asked),
      ' on this replica (not connected here, or not a client of this service).');
  }
  const addr = new Map(((eps && eps.endpoints) || []).map((e) => [e.id, e.address]));
  const ids = c.endpoints || [];
  return [
    el('p', {}, 'Client ', el('code', { 'data-testid': 'subset-client-node' }, c.node_id),
      ' · zone ', el('span', { 'data-testid': 'subset-client-zone' }, zoneChip(c.zone)),
      c.replica ? ` · replica ${c.replica}` : null,
      ' · slot ', el('span', { 'data-testid': 'subset-client-slot' }, c.slot),
      ` · ${ids.length} endpoints`),
    ids.length === 0
      ? el('p', { class: 'note', 'data-testid': 'subset-client-endpoints' }, 'Every endpoint: the plan does not know its slot yet.')
      : el('ul', { 'data-testid': 'subset-client-endpoints' }, ids.map((id) => el('li', { 'data-endpoint': id }, el('code', {}, id),
        addr.has(id) ? ` ${addr.get(id)}` : ''))),
  ];
}

// endpointsTable lists the registry's endpoints with what the weights
// say of each. For a PID service whose backends report their requests it
// adds, as spillwayctl weights does, each endpoint's error rate and mean
// latency and whether the death-spiral guard held it down, and why
// (guard_explain: the value, the limit and the median it comes from).
function endpointsTable(eps, weights) {
  const wl = (weights && weights.endpoints) || [];
  const ew = new Map(wl.map((e) => [e.id, e]));
  const slow = new Map(((weights && weights.zones) || []).map((z) => [z.zone, z.slow_starting]));
  const rates = wl.some((e) => e.rps > 0 || e.latency_ms > 0 || e.guard) || (weights && weights.pid && weights.pid.guarded > 0);
  const now = Date.now();
  const rows = (eps.endpoints || []).map((e) => {
    const zone = (e.locality && e.locality.zone) || '';
    const w = ew.get(e.id);
    const age = e.registered ? Math.max(0, Math.round((now - Date.parse(e.registered)) / 1000)) : null;
    return el('tr', { 'data-testid': 'endpoint-row', 'data-endpoint': e.id },
      el('td', {}, e.id), el('td', {}, e.address), el('td', {}, zoneChip(zone)), el('td', {}, e.health),
      el('td', { class: 'num' }, w ? w.weight : e.weight),
      el('td', {}, w && w.status === 'new' ? 'slow start' : (slow.get(zone) ? `${slow.get(zone)} slow-starting in zone` : '—')),
      el('td', { class: 'num' }, w && w.age_seconds > 0 ? pct(100 * w.utilization) : '—'),
      rates ? [
        el('td', { class: 'num', 'data-testid': 'endpoint-errors' }, w && w.rps > 0 ? pct(100 * w.error_rate) : '—'),
        el('td', { class: 'num', 'data-testid': 'endpoint-latency' }, w && w.latency_ms > 0 ? `${latencyMs(w.latency_ms)} ms` : '—'),
        el('td', { 'data-testid': 'endpoint-guard' }, w && w.guard ? `${w.guard}: ${w.guard_explain || w.guard}` : '—'),
      ] : null,
      el('td', {}, e.source),
      el('td', { title: e.registered ? dateFmt.format(new Date(e.registered)) : '' }, age === null ? '—' : `${age} s ago`));
  });
  const head = ['ID', 'Address', 'Zone', 'Health', 'Weight', 'Slow start', 'Utilization',
    ...(rates ? ['Error rate', 'Latency', 'Guard'] : []), 'Source', 'Registered'];
  const pid = weights && weights.pid;
  return [
    el('table', { 'data-testid': 'endpoints-table' },
      el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows)),
    rates && pid ? el('p', { class: 'note', 'data-testid': 'endpoint-guard-round' },
      `Death-spiral guard: median error rate ${pct(100 * (pid.median_error_rate || 0))}, median latency ${pid.median_latency_ms > 0 ? `${latencyMs(pid.median_latency_ms)} ms` : '—'}; ${pid.guarded || 0} guarded. A guarded endpoint is not raised, is halved each round and is never above the median weight.`) : null,
  ];
}

// latencyMs shows a latency in ms to two decimals at most (25, 912.25),
// the digits spillwayctl prints.
const latencyMs = (v) => String(Math.round(v * 100) / 100);

function explainView(w) {
  if (!w) return el('div', { 'data-testid': 'explain' }, el('p', {}, 'No zone-aware weights for this service yet (zone-aware weights off, or before the first weights cycle).'));
  return el('div', { 'data-testid': 'explain' },
    el('p', { 'data-testid': 'fallback' }, `Fallback: ${w.fallback.text || w.fallback.key || 'none'}${w.fallback.fail_open ? ' (fails open)' : ''} · demand source ${w.source} · data age ${w.data_age || '0s'} · plan origin ${w.origin ? w.origin.source : '—'}`),
    el('ul', {}, (w.routes || []).map((rt) => el('li', {}, zoneChip(rt.client_zone), ' ', rt.explain))));
}

function zonesTable(w) {
  return el('table', { 'data-testid': 'zones-table' },
    el('thead', {}, el('tr', {}, ['Zone', 'Healthy', 'Slow-starting', 'Capacity share', 'Demand share', 'Load'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, w.zones.map((z) => el('tr', {}, el('td', {}, zoneChip(z.zone)), el('td', { class: 'num' }, z.healthy), el('td', { class: 'num' }, z.slow_starting),
      el('td', { class: 'num' }, pct(100 * z.capacity_share)), el('td', { class: 'num' }, pct(100 * z.demand_share)), el('td', { class: 'num' }, rps(z.load))))));
}

function regionsView(w) {
  const rg = w && w.regions;
  if (!rg) return null;
  return el('div', { 'data-testid': 'regions' }, el('h2', {}, 'Regions'),
    el('p', {}, `Regions with a healthy endpoint: ${(rg.present || []).join(', ') || '—'}`),
    el('ul', {}, (rg.rules || []).map((r) => el('li', {}, r.exclude ? `exclude ${r.exclude}` : `redirect ${r.from} → ${r.to}`, r.active ? ' (active)' : ' (expired)',
      r.until ? ` until ${dateFmt.format(new Date(r.until))}` : ''))),
    el('ul', {}, (rg.clients || []).map((c) => el('li', {}, `clients in ${c.client_region || '(no region)'}: ${(c.order || []).join(' → ')}`,
      c.redirect ? ` · redirect ${c.redirect} ${c.redirect_to}` : '', c.fail_open ? ' · exclusions fail open' : ''))));
}

function routeRulesView(w) {
  const rr = w && w.route_rules;
  if (!rr) return null;
  return el('div', { 'data-testid': 'route-rules' }, el('h2', {}, 'Route rules'),
    el('ol', {}, (rr.rules || []).map((r) => el('li', {}, `${r.name} → ${(r.targets || []).join(', ')}`, r.missing && r.missing.length ? ` (broken: ${r.missing.join(', ')} missing)` : ''))),
    el('p', {}, `default → ${rr.default}${rr.default_missing ? ' (missing)' : ''}`));
}

// policiesView is the "Policies" panel: the resilience policies of the
// service's config (GET /v1/config/NAME, config.resilience;
// docs/service-config.md), one line per policy as `spillwayctl config get`
// prints them, or a note that there are none. Values are text only (el).
function policiesView(cfg) {
  const head = el('h2', {}, 'Policies');
  if (cfg.error) {
    return el('section', { 'data-testid': 'policies' }, head,
      el('p', { 'data-testid': 'policies-error' }, `Could not read the service config: ${cfg.error}`));
  }
  const lines = policyLines((cfg.config && cfg.config.resilience) || {});
  let from = 'no service config';
  if (cfg.configured) from = `service config version ${cfg.version}, from ${cfg.file ? `${cfg.source}:${cfg.file}` : cfg.source}`;
  if (cfg.deleted && cfg.until) from += `, deleted: applies until ${dateFmt.format(new Date(cfg.until))}`;
  return el('section', { 'data-testid': 'policies' }, head,
    el('p', { class: 'note' }, `What this service's xDS clients are told to do about failures and load (${from}).`),
    lines.length === 0
      ? el('p', { 'data-testid': 'policies-none' }, 'None: clients keep their own defaults.')
      : el('ul', { 'data-testid': 'policies-list' }, lines.map((l) => el('li', {
        'data-testid': 'policy', 'data-policy': l.key, class: l.depth ? 'sub' : null,
      }, el('code', {}, l.name), `: ${l.text}`))));
}

// ABORT_CODES are the gRPC status codes' names, by number, as a config
// writes fault.abort.grpc_status.
const ABORT_CODES = ['ok', 'cancelled', 'unknown', 'invalid_argument', 'deadline_exceeded', 'not_found', 'already_exists',
  'permission_denied', 'resource_exhausted', 'failed_precondition', 'aborted', 'out_of_range',
  'unimplemented', 'internal', 'unavailable', 'data_loss', 'unauthenticated'];

// policyLines describes a config's resilience block (its JSON: durations
// as Go duration strings, numbers as numbers, unset blocks absent) in
// the order and words of spillwayctl's policyLines
// (cmd/spillwayctl/config.go: change both): [{key, depth, name, text}],
// empty when it sets no policy. depth 1 is a part of the policy above it.
function policyLines(r) {
  const out = [];
  const add = (key, text) => out.push({ key, depth: key.includes('.') ? 1 : 0, name: key.split('.').pop(), text });
  const num = (v) => String(v); // the shortest digits, as Go's strconv.FormatFloat(v, 'f', -1, 64)
  const pctOf = (v) => `${num(v)}%`;
  const countOf = (n, one, many) => (n === 1 ? `1 ${one}` : `${n} ${many}`);
  const od = r.outlier_detection;
  if (od) {
    add('outlier_detection', `every ${od.interval}, ejects for ${od.base_ejection_time} × times ejected (at most ${od.max_ejection_time}), at most ${od.max_ejection_percent}% of endpoints at once`);
    const sr = od.success_rate, fp = od.failure_percentage;
    if (sr) add('outlier_detection.success_rate', `success rate more than ${num(sr.stdev_factor)} stdev below the mean; enforced ${sr.enforcement_percent}%; judged when ${sr.minimum_hosts} endpoints have ${sr.request_volume} RPCs or more in the interval`);
    if (fp) add('outlier_detection.failure_percentage', `more than ${fp.threshold}% of RPCs failed; enforced ${fp.enforcement_percent}%; judged when ${fp.minimum_hosts} endpoints have ${fp.request_volume} RPCs or more in the interval`);
  }
  if (r.max_requests) add('max_requests', `${countOf(r.max_requests, 'RPC', 'RPCs')} in flight per client process, then UNAVAILABLE`);
  if (r.timeout) add('timeout', `${r.timeout} at most per RPC`);
  const rt = r.retry;
  if (rt) add('retry', `up to ${countOf(rt.num_retries, 'retry', 'retries')} on ${(rt.on || []).join(', ')}; backoff ${rt.base_interval}, doubling, at most ${rt.max_interval}`);
  const f = r.fault;
  if (f) {
    const parts = [];
    if (f.delay) parts.push(`delay ${f.delay.fixed} on ${pctOf(f.delay.percent)} of RPCs`);
    if (f.abort) {
      const c = f.abort.grpc_status;
      parts.push(`abort ${pctOf(f.abort.percent)} of RPCs with ${c < ABORT_CODES.length ? `${ABORT_CODES[c]} (${c})` : `status ${c}`}`);
    }
    parts.push(f.header ? `only RPCs with header ${f.header}` : 'every RPC');
    if (f.max_active_faults) parts.push(`at most ${countOf(f.max_active_faults, 'fault', 'faults')} at once`);
    add('fault', parts.join('; '));
  }
  const lb = r.lb;
  if (lb && lb.ring_hash) {
    const rh = lb.ring_hash;
    add('lb', `ring_hash on header ${rh.header}, a ring of ${rh.min_ring_size} to ${rh.max_ring_size} entries`);
  } else if (lb && lb.least_request) {
    add('lb', `least_request, the least loaded of ${lb.least_request.choice_count} random endpoints`);
  } else if (lb && lb.client_wrr) {
    const w = lb.client_wrr;
    const from = w.oob_reporting_period ? `out-of-band reports every ${w.oob_reporting_period}` : 'RPC trailers';
    add('lb', `client_wrr by the endpoints' load reports (${from}); blackout ${w.blackout_period}, weights expire after ${w.weight_expiration_period}, updated every ${w.weight_update_period}, error penalty ${num(w.error_utilization_penalty)}`);
  }
  return out;
}

// ---- dependency graph ---------------------------------------------------

function graphView(main) {
  const holder = el('div');
  main.append(el('h1', {}, 'Dependency graph'), el('p', { class: 'note' }, 'Who calls whom: ADS subscriptions joined with LRS load (rps issued).'), holder);
  async function refresh(stale) {
    const g = await api('/v1/graph');
    if (stale()) return;
    keepFocus(() => holder.replaceChildren(drawGraph(g.edges || []), edgeTable(g.edges || [])));
  }
  return refresh;
}

function drawGraph(edges) {
  const names = [...new Set(edges.flatMap((e) => [e.client_service || '(unnamed)', e.service]))].sort();
  const W = 720, H = Math.max(360, 40 * names.length), cx = W / 2, cy = H / 2, rad = Math.min(cx, cy) - 70;
  const pos = new Map(names.map((n, i) => {
    const a = (2 * Math.PI * i) / Math.max(names.length, 1) - Math.PI / 2;
    return [n, { x: cx + rad * Math.cos(a), y: cy + rad * Math.sin(a) }];
  }));
  const svg = el('svg', { 'data-testid': 'graph', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': `Dependency graph of ${names.length} services` },
    el('defs', {}, el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 22, refY: 5, markerWidth: 8, markerHeight: 8, orient: 'auto-start-reverse' },
      el('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#777' }))));
  for (const e of edges) {
    const a = pos.get(e.client_service || '(unnamed)'), b = pos.get(e.service);
    if (a === b) continue;
    svg.append(el('line', { class: 'edge', x1: a.x, y1: a.y, x2: b.x, y2: b.y, 'stroke-width': 1 + Math.min(5, Math.log10(1 + e.rps)), 'marker-end': 'url(#arrow)' },
      el('title', {}, `${e.client_service || '(unnamed)'} → ${e.service}: ${rps(e.rps)}`)),
    el('text', { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 - 4, 'text-anchor': 'middle' }, rps(e.rps)));
  }
  for (const n of names) {
    const p = pos.get(n);
    const g = el('g', { class: 'node', 'data-testid': 'graph-node', 'data-service': n },
      el('circle', { cx: p.x, cy: p.y, r: 14 }), el('text', { x: p.x, y: p.y + 28, 'text-anchor': 'middle' }, n), el('title', {}, n));
    if (n !== '*' && n !== '(unnamed)') {
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'link');
      g.setAttribute('data-focuskey', `node:${n}`);
      const open = () => { location.hash = `#/service/${encodeURIComponent(n)}`; };
      g.addEventListener('click', open);
      g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') open(); });
    }
    svg.append(g);
  }
  return svg;
}

function edgeTable(edges) {
  return el('table', { 'data-testid': 'graph-table' }, el('caption', {}, 'Edges'),
    el('thead', {}, el('tr', {}, ['Client', 'Service', 'Rate', 'Errors', 'Streams', 'Nodes', 'Client zones'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, edges.map((e) => el('tr', {}, el('td', {}, e.client_service || '(unnamed)'), el('td', {}, e.service),
      el('td', { class: 'num' }, rps(e.rps)), el('td', { class: 'num' }, rps(e.errored_rps)), el('td', { class: 'num' }, e.streams), el('td', { class: 'num' }, e.nodes),
      el('td', {}, (e.zones || []).map(zoneChip))))));
}

// ---- migration ----------------------------------------------------------

function migrationView(main) {
  const stateEl = el('span', { 'data-testid': 'panic-state' });
  const txt = el('span', { 'data-testid': 'panic-txt' });
  const changed = el('span', { 'data-testid': 'panic-changed' });
  const token = el('input', {
    type: 'password', 'data-testid': 'token-input', 'aria-label': 'Admin token', autocomplete: 'off',
    placeholder: 'Admin token', value: sessionStorage.getItem('spillway-token') || '',
  });
  token.addEventListener('input', () => sessionStorage.setItem('spillway-token', token.value));
  const toggle = el('button', { type: 'button', 'data-testid': 'panic-toggle', class: 'danger' }, 'Change panic');
  const result = el('p', { 'data-testid': 'panic-error', role: 'alert' });
  const clients = el('p', { 'data-testid': 'migration-clients' });
  const rollout = el('div', { 'data-testid': 'rollout' });
  toggle.addEventListener('click', () => changePanic(token.value, result, () => restart(refresh)));
  main.append(el('section', { 'data-testid': 'migration-panel' },
    el('h1', {}, 'Migration'),
    el('p', {}, 'Panic: ', stateEl, ' · TXT _xds says ', txt, ' · ', changed),
    el('form', { class: 'toolbar', onsubmit: (ev) => ev.preventDefault() },
      el('input', { type: 'text', name: 'username', value: 'admin', autocomplete: 'username', hidden: true }),
      el('label', {}, 'Admin token ', token), toggle),
    el('p', { class: 'note' }, 'The token is kept in this tab only (sessionStorage). Panic on sends every client back to DNS.'),
    result, el('h2', {}, 'Clients'), clients, el('h2', {}, 'Rollout'), rollout));

  async function refresh(stale) {
    const [p, ro, sum] = await Promise.all([api('/v1/panic'), api('/v1/rollout'), api('/v1/summary?limit=1')]);
    if (stale()) return;
    state.panic = p.panic;
    stateEl.textContent = p.panic ? 'on' : 'off';
    stateEl.className = p.panic ? 'state-on' : 'state-off';
    txt.textContent = `xds=${p.xds}`;
    changed.textContent = p.changed ? `changed ${dateFmt.format(new Date(p.changed))}` : 'never changed';
    toggle.textContent = p.panic ? 'Turn panic off (back to xDS)' : 'Turn panic on (everyone to DNS)';
    const c = sum.clients;
    clients.textContent = `On xDS: ${c.xds_services} client services (${c.xds_nodes} nodes, ${c.xds_streams} ADS streams). Not on xDS (DNS, or no client): ${c.dns_services} services.`;
    rollout.replaceChildren(el('p', {}, `version ${ro.version}, ${(ro.rules || []).length} rules`),
      el('ol', {}, (ro.rules || []).map((r) => el('li', {}, el('code', {}, JSON.stringify(r))))));
  }
  return refresh;
}

// confirm asks in the page's dialog; resolves true on "yes".
function confirmDialog(text) {
  const d = document.querySelector('[data-testid=confirm-dialog]');
  d.querySelector('[data-testid=confirm-text]').textContent = text;
  return new Promise((resolve) => {
    const done = (v) => { d.close(); cleanup(); resolve(v); };
    const yes = () => done(true), no = () => done(false), cancel = () => { cleanup(); resolve(false); };
    const y = d.querySelector('[data-testid=confirm-yes]'), n = d.querySelector('[data-testid=confirm-no]');
    const cleanup = () => { y.removeEventListener('click', yes); n.removeEventListener('click', no); d.removeEventListener('cancel', cancel); };
    y.addEventListener('click', yes);
    n.addEventListener('click', no);
    d.addEventListener('cancel', cancel);
    d.showModal();
    n.focus();
  });
}

async function changePanic(token, result, after) {
  if (state.panic === null) return;
  const want = !state.panic;
  result.textContent = '';
  if (!token) {
    result.textContent = 'Enter the admin token first.';
    return;
  }
  const ok = await confirmDialog(want ? 'Turn panic ON? Every client leaves xDS and resolves by DNS (TXT _xds = xds=off).' : 'Turn panic OFF? Clients return to xDS as their rollout allows (TXT _xds = xds=on).');
  if (!ok) return;
  try {
    const p = await api('/v1/panic', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ panic: want }),
    });
    result.textContent = `Panic is now ${p.panic ? 'on' : 'off'}.`;
  } catch (e) {
    const why = e.status === 401 || e.status === 403 ? 'refused (check the admin token)' : 'failed';
    result.textContent = `Changing panic ${why}: ${e.message}`;
  }
  after();
}

window.addEventListener('hashchange', navigate);
document.addEventListener('DOMContentLoaded', navigate);
