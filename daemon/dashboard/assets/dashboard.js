// elastic dashboard: draws the page its path names from the daemon's /api reads, every 2 s.
// Plain JavaScript and inline SVG; nothing is loaded from anywhere but this daemon.
'use strict';

const REFRESH_MS = 2000;
const JOB_COLORS = ['#4299e1', '#ed8936', '#48bb78', '#9f7aea', '#f56565', '#38b2ac',
                    '#ecc94b', '#ed64a6', '#667eea', '#a0aec0'];

// Errors are counted on <body data-errors> (the browser test reads it) and shown in a banner.
function noteError(text) {
  const body = document.body;
  body.dataset.errors = String(Number(body.dataset.errors || '0') + 1);
  showProblem(text);
}
window.addEventListener('error', (e) => noteError('Script error: ' + e.message));
window.addEventListener('unhandledrejection', (e) => noteError('Script error: ' + e.reason));

function showProblem(text) {
  const box = document.getElementById('problem');
  if (text) {
    box.textContent = text;
    box.hidden = false;
  } else {
    box.hidden = true;
  }
}

function esc(value) {
  return String(value === undefined || value === null ? '' : value)
      .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

function num(value, digits) {
  if (typeof value !== 'number' || !isFinite(value)) return '-';
  return digits === undefined ? String(value) : value.toFixed(digits);
}

function ago(ms) {
  if (typeof ms !== 'number' || ms < 0) return '-';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60) + 's';
  return Math.floor(s / 3600) + 'h' + Math.floor(s / 60) % 60 + 'm';
}

function clock(ms) {
  if (typeof ms !== 'number' || ms <= 0) return '-';
  return new Date(ms).toLocaleTimeString();
}

function state(text) {
  return '<span class="state ' + esc(text) + '">' + esc(text || '-') + '</span>';
}

function jobLink(id) {
  return '<a href="/job?id=' + encodeURIComponent(id) + '">' + esc(id) + '</a>';
}

// GET /api/<path>: the response, its text, and its JSON body (null when it is not JSON).
async function apiReply(path) {
  const response = await fetch('/api/' + path, {cache: 'no-store'});
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch (e) {
    body = null;
  }
  return {response, text, body};
}

// GET /api/<path> as JSON; a daemon refusal ({"ok":false,"error":...}) becomes an Error.
async function api(path) {
  const {response, text, body} = await apiReply(path);
  if (body === null) {
    throw new Error('/api/' + path + ' answered ' + response.status + ': ' + text.trim());
  }
  if (!response.ok || body.ok === false) {
    throw new Error(body.error || ('/api/' + path + ' answered ' + response.status));
  }
  return body;
}

function jobsOf(reply) {
  return reply && Array.isArray(reply.jobs) ? reply.jobs : [];
}

function isActive(job) {
  return !['succeeded', 'failed', 'cancelled'].includes(job.state);
}

function colorOf(jobIds, id) {
  const i = jobIds.indexOf(id);
  return JOB_COLORS[(i < 0 ? 0 : i) % JOB_COLORS.length];
}

function cards(items) {
  return '<div class="cards">' + items.map(([label, value]) =>
    '<div class="card"><div class="label">' + esc(label) + '</div><div class="value">' +
    value + '</div></div>').join('') + '</div>';
}

function table(columns, rows, numeric) {
  numeric = numeric || [];
  let html = '<table><thead><tr>' + columns.map((c, i) =>
    '<th' + (numeric.includes(i) ? ' class="num"' : '') + '>' + esc(c) + '</th>').join('') +
    '</tr></thead><tbody>';
  for (const row of rows) {
    html += '<tr>' + row.map((cell, i) =>
      '<td' + (numeric.includes(i) ? ' class="num"' : '') + '>' + cell + '</td>').join('') + '</tr>';
  }
  return html + '</tbody></table>';
}

// ---- the cluster page -------------------------------------------------------------------------

async function drawCluster(app) {
  const [status, nodes, jobsReply] = await Promise.all([api('status'), api('nodes'), api('jobs')]);
  const raft = status.consensus || {};
  const voters = Array.isArray(raft.voters) ? raft.voters : [];
  const self = (nodes.self || {}).name;
  const jobs = jobsOf(jobsReply).filter(isActive);
  const jobIds = jobs.map((j) => j.id);
  // Slots held on each node, by job, from the current rank maps.
  const held = {};
  for (const job of jobs) {
    for (const r of job.ranks || []) {
      (held[r.node] = held[r.node] || []).push({job: job.id, slots: r.slots || 0});
    }
  }
  const members = Array.isArray(nodes.members) ? nodes.members : [];
  const rows = members.map((m) => {
    let role = '-';
    if (m.name === self && raft.voter) role = raft.role || 'voter';
    else if (m.name === raft.leader) role = 'leader';
    else if (voters.includes(m.name)) role = 'voter';
    const holders = held[m.name] || [];
    const total = typeof m.slots === 'number' ? m.slots : 0;
    let boxes = '';
    let used = 0;
    for (const h of holders) {
      for (let i = 0; i < h.slots; i++, used++) {
        boxes += '<span class="slot" title="' + esc(h.job) + '" style="background:' +
                 colorOf(jobIds, h.job) + ';border-color:' + colorOf(jobIds, h.job) + '"></span>';
      }
    }
    for (let i = used; i < total; i++) boxes += '<span class="slot" title="free"></span>';
    const drained = m.drained === true ? 'yes' + (m.drain_reason ? ': ' + esc(m.drain_reason) : '')
                                       : (m.drained === false ? 'no' : '-');
    return [
      esc(m.name) + (m.name === self ? ' <span class="muted">(this daemon)</span>' : ''),
      state(m.state), role === '-' ? '-' : state(role),
      // Only the leader knows every node's slot count; elsewhere an unknown total says so.
      '<span class="slots">' + boxes + '</span> ' +
          (typeof m.slots === 'number' ? used + '/' + m.slots : used + ' used'),
      holders.length ? [...new Set(holders.map((h) => h.job))].map(jobLink).join(', ') : '-',
      drained,
      m.name === self ? '-' : ago(m.last_heard_ms_ago),
      '<code>' + esc(m.address) + '</code>',
    ];
  });
  const counts = status.members || {};
  let html = '<h1>Cluster <span class="muted">' + esc((status.self || {}).cluster_id) + '</span></h1>';
  html += cards([
    ['leader', raft.leader ? esc(raft.leader) : '<span class="muted">none</span>'],
    ['term', num(raft.term)],
    ['this daemon', esc(self) + (raft.voter ? ' ' + state(raft.role || 'voter') : '')],
    ['nodes', num(counts.alive) + ' alive' + (counts.suspect ? ', ' + counts.suspect + ' suspect' : '') +
              (counts.dead ? ', ' + counts.dead + ' dead' : '')],
    ['active jobs', String(jobs.length)],
  ]);
  html += '<h2>Nodes</h2>';
  html += table(['node', 'state', 'raft', 'slots', 'jobs', 'drained', 'last heard', 'address'], rows);
  if (jobIds.length) {
    html += '<div class="legend">' + jobIds.map((id) =>
      '<span><i style="background:' + colorOf(jobIds, id) + '"></i>' + esc(id) + '</span>').join('') +
      '<span><i style="background:#e2e8f0"></i>free</span></div>';
  }
  app.innerHTML = html;
}

// ---- the jobs page ----------------------------------------------------------------------------

function samplesPerS(job) {
  if (typeof job.samples_per_s === 'number') return job.samples_per_s;
  const series = job.series && job.series.samples_per_s;
  if (Array.isArray(series) && series.length) return series[series.length - 1][1];
  return undefined;
}

async function drawJobs(app) {
  const jobs = jobsOf(await api('jobs'));
  let html = '<h1>Jobs <span class="muted">' + jobs.length + '</span></h1>';
  if (!jobs.length) {
    app.innerHTML = html + '<div class="empty">No jobs. Submit one with <code>elasticctl submit</code>.</div>';
    return;
  }
  const rows = jobs.map((j) => {
    const queue = j.position ? '#' + j.position + (j.waiting ? ': ' + esc(j.waiting) : '')
                             : (j.waiting ? esc(j.waiting) : '-');
    return [jobLink(j.id), state(j.state), num(j.round), num(j.world_size),
            String((j.ranks || []).length), num(j.priority), queue, num(j.restarts),
            num(samplesPerS(j), 1), esc((j.spec || {}).user), esc(j.reason)];
  });
  html += table(['job', 'state', 'round', 'world', 'nodes', 'priority', 'queue', 'restarts',
                 'samples/s', 'user', 'reason'], rows, [2, 3, 4, 5, 7, 8]);
  app.innerHTML = html;
}

// ---- incident timelines -----------------------------------------------------------------------

const PHASES = [
  ['detected_s', 'detect', 'var(--detect)'],
  ['stopped_s', 'stop', 'var(--stop)'],
  ['rendezvous_s', 'rendezvous', 'var(--rdzv)'],
  ['first_step_s', 'first step', 'var(--step)'],
];

function incidentEnd(i) {
  let end = 0;
  for (const [key] of PHASES) if (typeof i[key] === 'number') end = Math.max(end, i[key]);
  return end;
}

// One bar: a segment per phase reached, from the previous point to this one.
function incidentBar(i, scale) {
  const width = 720, height = 26, left = 4;
  const px = (s) => left + (width - 2 * left) * Math.min(s / scale, 1);
  let svg = '<svg class="incident-bar" viewBox="0 0 ' + width + ' ' + height +
            '" role="img" aria-label="incident ' + esc(i.id) + ' timeline">';
  svg += '<rect x="' + left + '" y="4" width="' + (width - 2 * left) + '" height="14" fill="#edf2f7"/>';
  let from = 0;
  for (const [key, label, color] of PHASES) {
    const at = i[key];
    if (typeof at !== 'number') continue;
    const x0 = px(from), x1 = Math.max(px(at), x0 + 2);
    svg += '<rect class="phase" data-phase="' + esc(label) + '" x="' + x0.toFixed(1) + '" y="4" width="' +
           (x1 - x0).toFixed(1) + '" height="14" fill="' + color + '"><title>' + esc(label) + ' at ' +
           at.toFixed(2) + ' s</title></rect>';
    from = at;
  }
  svg += '</svg>';
  return svg;
}

function incidentText(i) {
  let text = '<b>#' + esc(i.id) + '</b> ' + jobLink(i.job) + ' <b>' + esc(i.cause) + '</b>';
  if (i.node) text += ' of ' + esc(i.node);
  text += ', round ' + esc(i.from_round) + ' &rarr; ' + (i.to_round ? esc(i.to_round) : '?');
  if (i.to_round && i.to_nodes) text += ' on ' + esc(i.to_nodes) + ' node(s)';
  text += ' at ' + clock(i.at_ms) + ': ';
  const parts = [];
  for (const [key, label] of PHASES) {
    if (typeof i[key] === 'number') parts.push(label + ' ' + i[key].toFixed(2) + ' s');
  }
  text += parts.length ? parts.join(', ') : 'nothing yet';
  if (typeof i.steps_lost === 'number') text += ', ' + i.steps_lost + ' step(s) lost';
  if (i.given_up) text += ' (given up)';
  else if (!i.complete) text += ' (in progress)';
  return text;
}

function timeline(incidents) {
  if (!incidents.length) return '<div class="empty">No incidents recorded by this leader.</div>';
  const scale = Math.max(1, ...incidents.map(incidentEnd));
  let html = '<div class="legend">' + PHASES.map(([, label, color]) =>
    '<span><i style="background:' + color + '"></i>' + esc(label) + '</span>').join('') +
    '<span class="muted">scale: 0 to ' + scale.toFixed(1) + ' s after the first evidence</span></div>';
  html += '<div class="timeline">';
  for (const i of incidents.slice().reverse()) {
    html += '<div class="incident" data-incident="' + esc(i.id) + '" data-job="' + esc(i.job) +
            '" data-cause="' + esc(i.cause) + '" data-node="' + esc(i.node) + '"><div class="what">' +
            incidentText(i) + '</div>' + incidentBar(i, scale) + '</div>';
  }
  return html + '</div>';
}

async function drawIncidents(app) {
  const reply = await api('events?limit=1000');
  const incidents = Array.isArray(reply.incidents) ? reply.incidents : [];
  let html = '<h1>Incidents <span class="muted">' + incidents.length + '</span></h1>';
  html += timeline(incidents);
  const cluster = Array.isArray(reply.cluster) ? reply.cluster : [];
  html += '<h2>Cluster events</h2>';
  html += cluster.length
      ? table(['time', 'kind', 'node', 'job', 'detail'], cluster.slice().reverse().slice(0, 200).map((e) =>
          [clock(e.at_ms), esc(e.kind), esc(e.node), e.job ? jobLink(e.job) : '-', esc(e.detail)]))
      : '<div class="empty">No cluster events.</div>';
  app.innerHTML = html;
}

// ---- one job ----------------------------------------------------------------------------------

// A line chart of [[t_ms, value], ...] with vertical markers ({at_ms, label, color}).
function lineChart(title, points, markers) {
  const width = 720, height = 200, padL = 52, padR = 12, padT = 10, padB = 26;
  const ts = points.map((p) => p[0]);
  const vs = points.map((p) => p[1]);
  const inRange = markers.filter((m) => m.at_ms >= Math.min(...ts) && m.at_ms <= Math.max(...ts));
  const t0 = Math.min(...ts), t1 = Math.max(t0 + 1, ...ts);
  let v0 = Math.min(...vs), v1 = Math.max(...vs);
  if (v1 - v0 < 1e-12) { v0 -= 1; v1 += 1; }
  const x = (t) => padL + (width - padL - padR) * (t - t0) / (t1 - t0);
  const y = (v) => padT + (height - padT - padB) * (1 - (v - v0) / (v1 - v0));
  let svg = '<svg class="line-chart" viewBox="0 0 ' + width + ' ' + height + '">';
  for (let k = 0; k <= 4; k++) {
    const v = v0 + (v1 - v0) * k / 4;
    svg += '<line x1="' + padL + '" x2="' + (width - padR) + '" y1="' + y(v).toFixed(1) + '" y2="' +
           y(v).toFixed(1) + '" stroke="#edf2f7"/><text x="' + (padL - 4) + '" y="' +
           (y(v) + 4).toFixed(1) + '" text-anchor="end">' + esc(Number(v.toPrecision(3))) + '</text>';
  }
  svg += '<text x="' + padL + '" y="' + (height - 6) + '">' + esc(clock(t0)) + '</text>';
  svg += '<text x="' + (width - padR) + '" y="' + (height - 6) + '" text-anchor="end">' + esc(clock(t1)) + '</text>';
  for (const m of inRange) {
    svg += '<line class="marker" data-kind="' + m.kind + '" x1="' + x(m.at_ms).toFixed(1) + '" x2="' +
           x(m.at_ms).toFixed(1) + '" y1="' + padT + '" y2="' + (height - padB) + '" stroke="' + m.color +
           '" stroke-width="2"' + (m.kind === 'incident' ? ' stroke-dasharray="5 3"' : '') +
           '><title>' + esc(m.label) + '</title></line>';
  }
  const path = points.map((p, k) => (k ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
  svg += '<path d="' + path + '" fill="none" stroke="#2b6cb0" stroke-width="1.6"/>';
  svg += '</svg>';
  return '<div class="chart"><div class="title">' + esc(title) + '</div>' + svg + '</div>';
}

function validSeries(series) {
  return Array.isArray(series) ? series.filter((p) => Array.isArray(p) && p.length >= 2 &&
      typeof p[0] === 'number' && typeof p[1] === 'number' && isFinite(p[1])) : [];
}

function curves(job, incidents) {
  const series = job.series && typeof job.series === 'object' ? job.series : null;
  const rate = series ? validSeries(series.samples_per_s) : [];
  const loss = series ? validSeries(series.loss) : [];
  if (!rate.length && !loss.length) {
    return '<div class="empty" id="no-metrics">no training metrics reported</div>';
  }
  // Round changes (from the job's events) and incidents as vertical markers.
  const markers = [];
  let round = null;
  for (const e of job.events || []) {
    if (round !== null && e.round !== round) {
      markers.push({at_ms: e.at_ms, kind: 'round', label: 'round ' + e.round, color: '#805ad5'});
    }
    round = e.round;
  }
  for (const i of incidents) {
    markers.push({at_ms: i.at_ms, kind: 'incident', label: 'incident #' + i.id + ' ' + i.cause,
                  color: '#d64545'});
  }
  let html = '<div class="legend"><span><i style="background:#805ad5"></i>round change (solid)</span>' +
             '<span><i style="background:#d64545"></i>incident (dashed)</span></div>';
  if (rate.length) html += lineChart('samples/s', rate, markers);
  if (loss.length) html += lineChart('loss', loss, markers);
  return html;
}

async function drawJob(app) {
  const id = new URLSearchParams(location.search).get('id') || '';
  if (!id) {
    app.innerHTML = '<div class="empty">No job named: open a job from the <a href="/jobs">jobs</a> page.</div>';
    return;
  }
  const q = encodeURIComponent(id);
  const [reply, events] = await Promise.all([api('job?id=' + q), api('events?job=' + q + '&limit=1000')]);
  const job = reply.job || {};
  const incidents = (Array.isArray(events.incidents) ? events.incidents : []).filter((i) => i.job === id);
  const spec = job.spec || {};
  let html = '<h1>Job ' + esc(job.id) + ' ' + state(job.state) + '</h1>';
  html += cards([
    ['round', num(job.round)], ['world size', num(job.world_size)],
    ['nodes', String((job.ranks || []).length)], ['restarts', num(job.restarts)],
    ['priority', num(job.priority)], ['samples/s', num(samplesPerS(job), 1)],
    ['user', esc(spec.user || '-')],
  ]);
  if (job.reason) html += '<p><span class="muted">reason:</span> ' + esc(job.reason) + '</p>';
  if (job.position || job.waiting) {
    html += '<p><span class="muted">queue:</span> ' + (job.position ? '#' + esc(job.position) + ' ' : '') +
            esc(job.waiting || '') + '</p>';
  }
  html += '<h2>Training</h2>' + curves(job, incidents);
  html += '<h2>Rank map <span class="muted">round ' + esc(job.round) + '</span></h2>';
  const ranks = job.ranks || [];
  // Each rank's log tail (the daemon serves it to the dashboard token's holder only).
  const logLinks = (r) => {
    const first = r.first_rank || 0, slots = r.slots || 0, links = [];
    for (let k = first; k < first + Math.min(slots, 8); ++k) {
      links.push('<a class="log-link" href="/log?job=' + encodeURIComponent(job.id) + '&rank=' + k +
                 '&node=' + encodeURIComponent(r.node) + '">' + k + '</a>');
    }
    return links.join(' ') + (slots > 8 ? ' &hellip;' : '');
  };
  html += ranks.length
      ? table(['node', 'ranks', 'slots', 'generation', 'restarts', 'log tail'], ranks.map((r) => {
          const first = r.first_rank || 0, slots = r.slots || 0;
          return [esc(r.node), slots > 1 ? first + '&ndash;' + (first + slots - 1) : String(first),
                  num(r.slots), num(r.generation), num(r.restarts), logLinks(r)];
        }), [2, 3, 4])
      : '<div class="empty">No ranks in the current round.</div>';
  html += '<h2>Incidents</h2>' + timeline(incidents);
  html += '<h2>Events</h2>';
  const log = Array.isArray(job.events) ? job.events : [];
  html += log.length
      ? table(['time', 'round', 'change', 'reason'], log.slice().reverse().map((e) =>
          [clock(e.at_ms), num(e.round), esc(e.from) + ' &rarr; ' + esc(e.to), esc(e.reason)]), [1])
      : '<div class="empty">No events.</div>';
  const command = Array.isArray(spec.command) ? spec.command.join(' ') : (spec.command || '');
  html += '<p class="muted">Command: <code>' + esc(command) + '</code>' +
          (spec.env_hidden ? ' (its environment is shown to its owner and admins only)' : '') + '</p>';
  app.innerHTML = html;
}

// ---- refresh loop -----------------------------------------------------------------------------

// One rank's log tail: the last 64 KiB of its file on its node (operators only: the daemon
// answers 403 without dashboard.token_file, and the page says why).
async function drawLog(app) {
  const params = new URLSearchParams(location.search);
  const job = params.get('job') || '', rank = params.get('rank') || '';
  let query = 'job=' + encodeURIComponent(job) + '&rank=' + encodeURIComponent(rank);
  for (const key of ['round', 'node']) {
    if (params.get(key)) query += '&' + key + '=' + encodeURIComponent(params.get(key));
  }
  let html = '<h1>Log of rank ' + esc(rank) + ' of ' + jobLink(job) + '</h1>';
  const {response, text, body} = await apiReply('logs?' + query);
  if (!response.ok || !body || body.ok === false) {
    html += '<div class="empty">' + esc((body && body.error) || text.trim()) + '</div>';
  } else {
    html += '<p class="muted">' + esc(body.path) + ' on ' + esc(body.node) + ', round ' +
            esc(body.round) + ', the last ' + num(String(body.data || '').length) + ' of ' +
            num(body.size) + ' bytes</p><pre class="log">' + esc(body.data || '') + '</pre>';
  }
  app.innerHTML = html;
}

const PAGES = {'/': drawCluster, '/jobs': drawJobs, '/job': drawJob, '/incidents': drawIncidents,
               '/log': drawLog};
const NAV = {'/': 'cluster', '/jobs': 'jobs', '/job': 'jobs', '/incidents': 'incidents',
             '/log': 'jobs'};

async function refresh() {
  const draw = PAGES[location.pathname];
  const app = document.getElementById('app');
  if (!draw) {
    app.innerHTML = '<div class="empty">Unknown page.</div>';
    return;
  }
  try {
    await draw(app);
    showProblem('');
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = 'true';
  } catch (e) {
    // The daemon or its leader may be briefly unreachable (an election): say so, keep the last
    // view, try again at the next tick.
    showProblem('Could not refresh: ' + (e && e.message ? e.message : e));
  }
}

async function start() {
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.dataset.page === NAV[location.pathname]) a.classList.add('active');
  }
  try {
    const status = await api('status');
    document.getElementById('via').textContent = 'via ' + ((status.self || {}).name || '?');
  } catch (e) {
    showProblem('Could not reach the daemon: ' + (e && e.message ? e.message : e));
  }
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

start();
