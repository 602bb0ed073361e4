// Scenarios for desktop/plugin.js, run by tests/test_desktop_plugin.py:
//   node --import ./register.mjs scenarios.mjs <scenario>
// React (19, as the Desktop ships it) renders with react-test-renderer (no DOM); ctx is a
// fake shaped like the Desktop's (apps/desktop/src/contrib/plugin.ts createPluginContext)
// whose `rest` behaves like the host's door (apps/desktop/src/api/plugins.ts pluginRest ->
// electron/api-transport.ts): only method, body and timeoutMs reach the backend (headers
// the pane adds are dropped; a body goes as JSON), a request silent for longer than the
// host's default deadline fails unless its timeoutMs allows more, and a non-2xx answer is
// thrown as Error("NNN: <body>") — through Electron's IPC prefixed with "Error invoking
// remote method 'hermes:api': Error: ", a 404 keeping `statusCode` (electron/api-error-
// envelope.ts).  The backend either answers from a canned one (same envelopes as
// api/router.py) or, for the `real-*` scenarios, is a real chronos-git HTTP server on 127.0.0.1.
// Timers given to ctx.setInterval/ctx.setTimeout are NOT scheduled: the scenario fires
// them by hand, so nothing here depends on wall-clock time.
// Each scenario asserts with node:assert and prints one JSON summary line, which also
// carries every field the pane read (`reads`, recorded by field_recorder.js: ctx.rest
// answers behind recording Proxies) and every answer it was given (`served`): the
// Python side checks both against the API's OpenAPI schema and models.
import assert from 'node:assert/strict'
import { pathToFileURL } from 'node:url'
import * as React from 'react'
import TestRenderer from 'react-test-renderer'
import './field_recorder.js'

globalThis.IS_REACT_ACT_ENVIRONMENT = true
const act = React.act || TestRenderer.act

const plugin = await import(pathToFileURL(process.env.HARNESS_PLUGIN).href)
const scenario = process.argv[2]

// ------------------------------------------------------------------ helpers
const hex = c => c.repeat(40)
const CP = { newest: hex('a'), middle: hex('b'), oldest: hex('c'), other: hex('d'), safety: hex('e'), odd: hex('f') }
// a workspace whose root is not UTF-8 (b"/w/caf\xe9"): shown with U+FFFD, named by its bytes
const NON_UTF8 = { root: '/w/caf\ufffd', root_b64: 'L3cvY2Fm6Q==' }
const OP = '0123456789abcdef0123456789abcdef'
const OP2 = 'fedcba9876543210fedcba9876543210'
const TREE = { 1: hex('5'), 2: hex('6'), 3: hex('7'), 4: hex('8'), 5: '12'.repeat(20) }

// canned answers are the API's typed results (service/results.py); the test validates them
function cpSummary(id, i, extra = {}) {
  return {
    id, short_id: id.slice(0, 8), time: 1_800_000_000 + i, time_iso: '2027-01-15T08:00:00+00:00',
    description: extra.description || `checkpoint ${i}`, kind: extra.kind || 'full', tool: extra.tool === undefined ? 'write_file' : extra.tool,
    session_id: 's1', turn_id: null, tool_call_id: extra.tool_call_id || null, files: 2, skipped: extra.skipped || [],
    nested_repos: [], added_bytes: 4, index: i, number: extra.number === undefined ? null : extra.number,
    role: extra.role || null, parents: extra.parents || [], restored_from: extra.restored_from || null,
    ...(extra.roles ? { roles: extra.roles } : {})
  }
}

function wsInfo(root, list, extra = {}) {
  return { root, id: `id-${list[0].id.slice(0, 4)}`, ref: `refs/chronos/snapshots/${list[0].id.slice(0, 4)}`,
           gitdir: `/store/worktrees/${list[0].id.slice(0, 4)}`, exists: true, latest: list[0], checkpoints: list.length, ...extra }
}

const PROTECTION_ON = { state: 'on' }

class HttpError extends Error {}

/** A canned backend with just enough state for the flows: it throws {status, body} for a
 *  non-2xx answer, which the host door in fakeCtx turns into what the Desktop throws.
 *  `slow`: seconds a route takes to answer.  Like api/router.py it refuses a POST that is not JSON (415) and a real restore
 *  without the plan_token of a dry run of the same request (428 / 409). */
function cannedBackend({ gate = 'open', partial = false, protection = PROTECTION_ON, settled = [], slow = {} } = {}) {
  const state = { gate, unresolved: gate === 'closed' ? 1 : 0, restored: [], seq: 6, plans: new Map(), tokens: 0,
                  undo: [], redo: [], done: [] }
  const planKey = (route, b) => JSON.stringify([route, b.checkpoint, b.workspace, b.workspace_b64, b.paths, b.paths_b64, b.clean,
                                                !!b.agent_only, b.operation, b.conflicts])
  // the API's error answers; the host door (fakeCtx) turns them into what the Desktop throws
  const fail = (status, body) => { throw Object.assign(new HttpError(`Request failed with status ${status}`), { status, body }) }
  const cps = {
    '/w/proj': [cpSummary(CP.newest, 1, { tool: 'patch', tool_call_id: 'call_patch', number: 3, role: 'after_call',
                                          roles: ['after_call'], parents: [CP.middle],
                                          skipped: [{ path: 'big.bin', reason: 'larger than max_file_size_mb', size: 99_000_000 }] }),
                cpSummary(CP.middle, 2, { tool_call_id: 'call_write', number: 2, role: 'after_call', roles: ['before_call', 'after_call'],
                                          parents: [CP.oldest] }),
                cpSummary(CP.oldest, 3, { kind: 'manual', tool: null, description: 'first', number: 1, role: 'manual' })],
    '/w/other': [cpSummary(CP.other, 1, { number: 1, role: 'baseline' })],
    [NON_UTF8.root_b64]: [cpSummary(CP.odd, 1)],
    // a timeline that branches: @2 was restored after @3 and @4 were made (@5 is the restore's own checkpoint)
    '/w/tree': [cpSummary(TREE[5], 1, { number: 5, role: 'restored', roles: ['restored'], parents: [TREE[2]], restored_from: TREE[2],
                                        tool: null, description: 'after restore to @2' }),
                cpSummary(TREE[4], 2, { number: 4, role: 'after_call', parents: [TREE[3]], description: 'after write_file (attempt 1)' }),
                cpSummary(TREE[3], 3, { number: 3, role: 'before_call', roles: ['after_call', 'before_call'], parents: [TREE[2]],
                                        description: 'before write_file' }),
                cpSummary(TREE[2], 4, { number: 2, role: 'after_call', parents: [TREE[1]], description: 'after patch' }),
                cpSummary(TREE[1], 5, { number: 1, role: 'baseline', tool: null, kind: 'manual', parents: [], description: 'first' })]
  }
  const planFor = (route, body) => {
    if (route === '/restore' && body.agent_only) {
      return { kind: 'agent-only restore', calls: [OP, OP2], conflicts: 1,
               note: '1 path left as it is: see the conflicts (--conflicts markers writes git-style markers into text files instead)',
               plan: [{ path: 'a.txt', action: 'restore', merged: true },
                      { path: 'b.txt', action: 'conflict', reason: "the agent's change and a later change overlap",
                        agent: `the agent modified line 1 (call ${OP2})`, person: 'modified afterwards: line 1' }] }
    }
    if (route === '/revert') return { kind: 'revert', calls: [body.operation], conflicts: 0, plan: [{ path: 'a.txt', action: 'restore', merged: true }] }
    if (route === '/undo' || route === '/redo') {
      return { kind: route.slice(1), calls: [OP], conflicts: 0, plan: [{ path: 'a.txt', action: 'restore', merged: true }, { path: 'n.txt', action: 'delete' }] }
    }
    return null
  }
  const backend = async (rawPath, opts = {}) => {
    const url = new URL(rawPath, 'http://x')
    const p = url.pathname
    const q = Object.fromEntries(url.searchParams)
    const method = opts.method || 'GET'
    const body = opts.body || {}
    // the host sends a body as JSON; a POST without one is refused like the API refuses it
    if (method !== 'GET' && (opts.headers || {})['Content-Type'] !== 'application/json') {
      fail(415, { status: 'error', error: 'requests that change state must be sent as Content-Type: application/json' })
    }
    const wsOf = x => (x.workspace_b64 !== undefined ? x.workspace_b64 : x.workspace)
    if (method === 'GET' && p === '/workspaces') {
      // /w/other is the most recently used workspace
      return { status: 'ok', workspaces: [
        wsInfo('/w/other', cps['/w/other']), wsInfo('/w/proj', cps['/w/proj']),
        wsInfo(NON_UTF8.root, cps[NON_UTF8.root_b64], { root_b64: NON_UTF8.root_b64 }), wsInfo('/w/tree', cps['/w/tree'])] }
    }
    if (method === 'GET' && p === '/checkpoints') {
      const list = cps[wsOf(q)]
      if (!list) fail(404, { status: 'error', error: `unknown workspace ${wsOf(q)}` })
      const named = q.workspace_b64 ? { workspace: NON_UTF8.root, workspace_b64: q.workspace_b64 } : { workspace: q.workspace }
      return { status: 'ok', ...named, checkpoints: list.slice(0, Number(q.limit || 20)) }
    }
    if (method === 'GET' && p.startsWith('/checkpoints/')) {
      const id = decodeURIComponent(p.slice('/checkpoints/'.length))
      const found = (cps[wsOf(q)] || []).find(c => c.id === id)
      if (!found) fail(404, { status: 'error', error: `no checkpoint ${id} in ${q.workspace}` })
      if (id === CP.oldest) return { status: 'ok', checkpoint: found }
      return { status: 'ok', checkpoint: found, changes: {
        from: CP.oldest, to: id, files: [{ path: 'b.txt', status: 'added', additions: 1, deletions: 0 }],
        stats: { files: 1, additions: 1, deletions: 0 },
        patch: 'diff --git a/b.txt b/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+bee\n' } }
    }
    if (method === 'GET' && p === '/diff') {
      return { status: 'ok', from: q.from, to: 'working tree',
               files: [{ path: 'a.txt', status: 'modified', additions: 1, deletions: 1 }],
               stats: { files: 1, additions: 1, deletions: 1 },
               patch: 'diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+one two\n' }
    }
    if (method === 'POST' && ['/restore', '/revert', '/undo', '/redo'].includes(p)) {
      if (p === '/restore' && !body.checkpoint) fail(400, { status: 'error', error: 'invalid request: checkpoint: Field required' })
      if (p === '/revert' && !body.operation && !body.session) fail(400, { status: 'error', error: 'revert needs an operation or --session' })
      const wsName = wsOf(body) || '/w/proj'
      if (p === '/undo' && !state.undo.length) fail(400, { status: 'error', error: `nothing to undo in ${wsName}: no restore, revert or redo of it is left to undo` })
      if (p === '/redo' && !state.redo.length) fail(400, { status: 'error', error: `nothing to redo in ${wsName}: no undo is left to redo` })
      const merging = planFor(p, body)
      let planItems = [{ path: 'a.txt', action: 'restore' }, { path: 'b.txt', action: 'delete' },
                       { path: 'big.bin', action: 'keep', reason: 'not captured by the safety checkpoint' }]
      if (body.workspace_b64) planItems.push({ path: 'caf\ufffd.txt', path_b64: 'Y2Fm6S50eHQ=', action: 'create' })
      if (merging) planItems = merging.plan
      const restoredTo = p === '/restore' ? body.checkpoint : p === '/undo' ? CP.safety : CP.newest
      const target = Object.values(cps).flat().find(c => c.id === restoredTo)
      const counts = { files_changed: planItems.filter(i => i.action === 'restore').length,
                       untracked_removed: planItems.filter(i => i.action === 'delete').length,
                       skipped: 0, kept: planItems.filter(i => i.action === 'keep').length, failed: 0,
                       conflicts: planItems.filter(i => i.action === 'conflict').length }
      const extra = merging ? { kind: merging.kind, calls: merging.calls, ...(merging.note ? { note: merging.note } : {}) } : {}
      if (body.dry_run) {
        const token = `plan-${++state.tokens}`
        state.plans.set(token, planKey(p, body))
        return { status: 'ok', restored_checkpoint: restoredTo, target, safety_checkpoint: null, dry_run: true, clean: true,
                 ...counts, plan: planItems, plan_token: token, ...extra }
      }
      if (!body.plan_token) fail(428, { status: 'error', error: 'a restore needs the plan_token of its dry run' })
      const planned = state.plans.get(body.plan_token)
      state.plans.delete(body.plan_token)
      if (planned !== planKey(p, body)) fail(409, { status: 'error', error: 'the plan token is unknown, used or expired' })
      if (state.gate === 'closed') {
        fail(409, { status: 'error', error: 'chronos_blocked', blocked: true, operation_ids: [OP],
                    message: `chronos-git recovery gate is closed: ${OP.slice(0, 12)} terminal cut off by a crash (pending)` })
      }
      state.restored.push(restoredTo)
      state.done.push(p)
      if (p === '/undo') state.redo.push(state.undo.pop())
      else if (p === '/redo') state.undo.push(state.redo.pop())
      else { state.undo.push(p); state.redo.length = 0 }
      const list = cps[wsName]
      if (!list.some(c => c.id === CP.safety)) {
        list.unshift(cpSummary(CP.safety, 0, { kind: 'safety', tool: null, number: list.length + 1, role: 'safety', parents: [list[0].id] }))
      }
      const done = { status: 'ok', restored_checkpoint: restoredTo, target, safety_checkpoint: CP.safety, dry_run: false,
                     clean: true, ...counts, plan: planItems, operation_id: 'f'.repeat(32), ...extra,
                     ...(merging ? { after_checkpoint: CP.newest } : {}) }
      if (partial && p === '/restore' && body.checkpoint !== CP.safety) {
        // like the API: an incomplete restore is a RestoreResult with status "error", sent with HTTP 409
        fail(409, { ...done, status: 'error', error: 'restore incomplete: 1 path(s) could not be changed (locked.txt: Permission denied)',
                    failed: 1, plan: [...planItems, { path: 'locked.txt', action: 'failed', reason: 'Permission denied' }] })
      }
      return done
    }
    if (method === 'GET' && p === '/journal/status') {
      return { status: 'ok', integrity: 'ok', gate: state.gate, events: state.seq + 1, head: hex('9'), journal_id: 'j1',
               unresolved: state.unresolved ? [{ operation_id: OP, tool: 'terminal', state: 'pending', session_id: 's1',
                                                  tool_call_id: 'call_term', workspace: '/w/proj', pre_checkpoint: CP.newest,
                                                  started_seq: 5, owner: { pid: 4242 }, reason: 'its process died' }] : [],
               running: [], replayable: [], totals: { started: 3 }, healed: null, checkpoint_file: '/store.journal-witness.json',
               settled_at_start: settled, protection }
    }
    if (method === 'GET' && p === '/journal/log') {
      const kinds = ['returned', 'started', 'returned', 'started', 'genesis']
      return { status: 'ok', events: kinds.slice(0, Number(q.limit || 50)).map((kind, i) => (
        { schema: 'chronos-git.journal.v1', kind, seq: 4 - i, id: hex(String(i)), operation_id: kind === 'genesis' ? null : i < 2 ? OP2 : OP,
          tool: kind === 'started' ? 'write_file' : undefined,
          status: kind === 'returned' ? 'ok' : undefined, timestamp_ns: 1_800_000_000e9 })) }
    }
    if (method === 'POST' && p === '/journal/resolve') {
      if (!body.evidence || !String(body.evidence).trim()) fail(400, { status: 'error', error: 'invalid request: evidence: String should have at least 1 character' })
      if (!state.unresolved) fail(400, { status: 'error', error: `no operation ${body.operation_id} is open` })
      state.unresolved = 0
      state.gate = 'open'
      state.seq += 1
      return { status: 'ok', operation_id: OP, outcome: body.outcome, event: state.seq, gate: 'open' }
    }
    if (method === 'POST' && p === '/journal/verify') {
      return { status: 'ok', integrity: 'ok', problems: [], events: state.seq + 1, head: hex('9'), journal_id: 'j1',
               external_checkpoint: null, healed: null, seconds: 0.001, checkpoint_trees: { checkpoints: 4, trees: 4, problems: [] } }
    }
    fail(404, { detail: 'Not Found' })
  }
  backend.slow = slow           // seconds a route takes to answer (the host door's deadline applies)
  backend.state = state
  return backend
}

/** A real backend: fetch against the chronos-git HTTP API the test started (the host door
 *  in fakeCtx has already reduced the request to what the Desktop forwards). */
function realBackend(base, token) {
  return async (path, opts = {}) => {
    const res = await fetch(`${base}${path}`, {
      method: opts.method || 'GET',
      headers: { 'X-Hermes-Session-Token': token, ...(opts.headers || {}) },      // the host's auth, and JSON for a body
      body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined
    })
    const text = await res.text()
    if (!res.ok) throw Object.assign(new HttpError(`HTTP ${res.status}`), { status: res.status, body: text })
    return JSON.parse(text)
  }
}

// the host's default deadline for a REST call (apps/desktop/electron/hardening.ts DEFAULT_FETCH_TIMEOUT_MS:
// 15 s in the version apps/desktop/src/api/client.ts describes, 30 s in later ones): the lower one
const HOST_DEFAULT_MS = 15_000

/** What the Desktop throws for an HTTP error answer (electron/api-transport.ts httpStatusError:
 *  "NNN: <body>"); only a 404 crosses the IPC as an envelope that keeps `statusCode`
 *  (electron/api-error-envelope.ts), every other rejection arrives as Electron's IPC error. */
function hostError(status, body, style) {
  const msg = `${status}: ${typeof body === 'string' ? body : JSON.stringify(body)}`
  if (style === 'fields') return Object.assign(new HttpError(`Request failed with status ${status}`), { status, body })
  if (status === 404) return Object.assign(new Error(msg), { statusCode: 404 })
  return new Error(`Error invoking remote method 'hermes:api': Error: ${msg}`)
}

function fakeCtx(backend, { timers = true, errors = process.env.HARNESS_ERROR_STYLE || 'host' } = {}) {
  const h = { contributions: [], calls: [], intervals: [], timeouts: [], disposers: [], disposed: 0, timedOut: [] }
  const ctx = {
    source: 'plugin:chronos-git',
    register(c) {
      h.contributions.push(c)
      return () => { h.contributions = h.contributions.filter(x => x !== c) }
    },
    registerMany(cs) {
      const ds = cs.map(c => ctx.register(c))
      return () => ds.forEach(d => d())
    },
    // the Desktop's door: pluginRest(id, path, {method, body, upload, timeoutMs}) -> hermes:api
    rest(path, opts) {
      assert.equal(typeof path, 'string')
      assert.ok(path.startsWith('/') && !path.startsWith('/api/'), `ctx.rest paths are relative to the namespace: ${path}`)
      assert.ok(!path.split(/[?#]/, 1)[0].split('/').includes('..'), 'pluginRest: illegal path traversal')
      const o = opts || {}
      const call = { path, method: o.method || 'GET', body: o.body }
      // what the pane asked for but the host does not forward (headers) or forwards unseen (timeoutMs),
      // kept out of deepEqual on the calls
      Object.defineProperty(call, 'headers', { value: o.headers || {}, enumerable: false })
      Object.defineProperty(call, 'timeoutMs', { value: o.timeoutMs, enumerable: false })
      h.calls.push(call)
      const route = `${call.method} ${new URL(path, 'http://x').pathname}`
      const forwarded = { method: o.method, body: o.body,
                          headers: o.body !== undefined ? { 'Content-Type': 'application/json' } : {} }
      const answer = Promise.resolve().then(() => backend(path, forwarded)).then(body => {
        served.push({ route, body: JSON.parse(JSON.stringify(body)) })     // as it would go over the wire
        return globalThis.__fieldRecorder.wrap(body, route)
      }, err => {
        if (err instanceof HttpError && err.status) {
          throw hostError(err.status, err.body, errors)
        }
        throw err
      })
      // a request silent for longer than its deadline fails on the host's side (the backend may still finish it)
      const seconds = (backend.slow || {})[route] || 0
      const deadline = o.timeoutMs > 0 ? o.timeoutMs : HOST_DEFAULT_MS
      if (seconds * 1000 > deadline) {
        h.timedOut.push(route)
        return answer.then(() => { throw new Error(`Timed out after ${deadline / 1000}s waiting for ${route}`) },
                           () => { throw new Error(`Timed out after ${deadline / 1000}s waiting for ${route}`) })
      }
      return answer
    },
    onDispose(fn) { h.disposers.push(fn) },
    storage: { get: (k, d) => d, set() {}, remove() {} },
    os: {}
  }
  if (timers) {
    ctx.setInterval = (fn, ms) => {
      const t = { fn, ms, active: true }
      h.intervals.push(t)
      return () => { t.active = false; h.disposed += 1 }
    }
    ctx.setTimeout = (fn, ms) => {
      const t = { fn, ms, active: true }
      h.timeouts.push(t)
      return () => { t.active = false }
    }
  }
  return { ctx, h }
}

async function settle(rounds = 8) {
  for (let i = 0; i < rounds; i++) {
    await act(async () => { await new Promise(r => setImmediate(r)) })
  }
}

async function until(pred, what, rounds = 400) {
  for (let i = 0; i < rounds; i++) {
    if (pred()) return
    await act(async () => { await new Promise(r => setTimeout(r, 10)) })
  }
  assert.fail(`never happened: ${what}`)
}

const all = (r, id) => r.root.findAll(n => typeof n.type === 'string' && n.props['data-testid'] === id)
const one = (r, id) => {
  const found = all(r, id)
  assert.equal(found.length, 1, `exactly one [data-testid=${id}], found ${found.length}`)
  return found[0]
}
const text = node => (typeof node === 'string' ? node : (node.children || []).map(text).join(''))
const click = async node => {
  await act(async () => { node.props.onClick({ preventDefault() {} }) })
  await settle()
}
const rows = r => all(r, 'checkpoint-row')
// a timer the pane gave ctx.setTimeout, fired by hand (once)
const fire = async t => {
  t.active = false
  await act(async () => { t.fn() })
  await settle()
}
const realCalls = h => h.calls.filter(c => c.path === '/restore' && c.body && c.body.dry_run === false)
const dryCalls = h => h.calls.filter(c => c.path === '/restore' && c.body && c.body.dry_run === true)

const paneOf = h => h.contributions.find(c => c.area === 'panes')

async function mount(ctx, h) {
  assert.equal(h.contributions.length, 0)
  plugin.default.register(ctx)
  assert.ok(paneOf(h), 'a pane is registered')
  let r
  await act(async () => { r = TestRenderer.create(paneOf(h).render()) })
  await settle()
  return r
}

const out = { scenario }
const served = []

// ---------------------------------------------------------------- scenarios
const scenarios = {
  async register() {
    const p = plugin.default
    assert.equal(p.id, 'chronos-git')
    assert.equal(typeof p.name, 'string')
    assert.equal(typeof p.register, 'function')
    const { ctx, h } = fakeCtx(cannedBackend())
    p.register(ctx)
    assert.deepEqual(h.contributions.map(x => `${x.area}:${x.id}`), ['panes:pane', 'palette:open', 'statusBar.right:status'])
    const c = paneOf(h)
    assert.equal(c.area, 'panes')
    assert.equal(c.id, 'pane')
    assert.equal(c.data.placement, 'right')
    assert.ok(typeof c.title === 'string' && c.title.length > 0)
    assert.equal(typeof c.render, 'function')
    const el = c.render()
    assert.ok(React.isValidElement(el))
    assert.equal(el.type, plugin.ChronosPane)
    assert.equal(h.calls.length, 0, 'register() itself makes no request')
    out.contribution = { id: c.id, area: c.area, data: c.data, title: c.title }
    // the second way in: the palette row and the status item reopen the closed pane through the host
    const palette = h.contributions.find(x => x.area === 'palette')
    assert.equal(palette.data.id, 'chronos-git.open')
    assert.ok(palette.data.label.includes('Chronos') && palette.data.keywords.includes('restore'))
    assert.equal(typeof palette.data.run, 'function')
    palette.data.run()
    assert.deepEqual(globalThis.__harnessOpened, [['chronos-git:pane', true]])
    const status = h.contributions.find(x => x.area === 'statusBar.right')
    let sr
    await act(async () => { sr = TestRenderer.create(status.render()) })
    await click(one(sr, 'chronos-status-item'))
    assert.deepEqual(globalThis.__harnessOpened, [['chronos-git:pane', true], ['chronos-git:pane', true]])
    assert.equal(h.calls.length, 0, 'opening the pane makes no request')
    // a host with an older pane door (revealPane) or none but openWorkspace, or none at all
    const sdk = await import('@hermes/plugin-sdk')
    const panes = sdk.host.panes
    delete sdk.host.panes
    const revealed = []
    sdk.host.revealPane = id => revealed.push(id)
    assert.equal(plugin.openPane(ctx, c.render), 'revealPane')
    assert.deepEqual(revealed, ['chronos-git:pane'])
    delete sdk.host.revealPane
    const workspaces = []
    sdk.host.openWorkspace = (id, o) => { workspaces.push([id, o.title, typeof o.render]) }
    assert.equal(plugin.openPane(ctx, c.render), 'openWorkspace')
    assert.deepEqual(workspaces, [['chronos-git', 'chronos', 'function']])
    delete sdk.host.openWorkspace
    assert.equal(plugin.openPane(ctx, c.render), 'notify')
    assert.equal(globalThis.__harnessNotified.length, 1)
    sdk.host.panes = panes
    await act(async () => { sr.unmount() })
  },

  async timeline() {
    const { ctx, h } = fakeCtx(cannedBackend())
    const r = await mount(ctx, h)
    // the session cwd is inside /w/proj, which is NOT the most recent workspace: it wins
    assert.deepEqual(h.calls.slice(0, 2).map(c => c.path), ['/workspaces', '/checkpoints?workspace=%2Fw%2Fproj&all=true&limit=100'])
    assert.ok(h.calls.some(c => c.path === '/journal/status'))
    assert.ok(h.calls.some(c => c.path === '/journal/log?limit=10'))
    one(r, 'follows-cwd')
    assert.equal(one(r, 'workspace-select').props.value, '/w/proj')
    const rows = all(r, 'checkpoint-row')
    assert.deepEqual(rows.map(n => n.props['data-checkpoint-id']), [CP.newest, CP.middle, CP.oldest])
    assert.equal(text(rows[0]).includes('call_patch'), true)
    assert.equal(text(one(r, 'checkpoint-skipped')), '1 skipped')
    assert.equal(all(r, 'journal-event').length, 5)
    assert.equal(text(one(r, 'journal-gate')), 'gate open')

    h.calls.length = 0
    await click(rows[1])
    assert.deepEqual(h.calls.map(c => c.path), [`/checkpoints/${CP.middle}?workspace=%2Fw%2Fproj`])
    assert.equal(one(r, 'checkpoint-detail').props['data-checkpoint-id'], CP.middle)
    assert.ok(text(one(r, 'diff-patch')).includes('+bee'))
    h.calls.length = 0
    await click(one(r, 'diff-mode-worktree'))
    assert.deepEqual(h.calls.map(c => c.path), [`/diff?workspace=%2Fw%2Fproj&from=${CP.middle}`])
    assert.equal(one(r, 'diff-view').props['data-mode'], 'worktree')
    assert.ok(text(one(r, 'diff-patch')).includes('+one two'))

    // the session moves to another directory with checkpoints: the pane follows
    h.calls.length = 0
    await act(async () => { globalThis.__harnessHost.state.cwd.set('/w/other') })
    await settle()
    assert.ok(h.calls.some(c => c.path === '/checkpoints?workspace=%2Fw%2Fother&all=true&limit=100'))
    assert.deepEqual(all(r, 'checkpoint-row').map(n => n.props['data-checkpoint-id']), [CP.other])
    assert.equal(all(r, 'checkpoint-detail').length, 0, 'the selection does not leak across workspaces')
    // picking a workspace by hand stops following the cwd
    await act(async () => { one(r, 'workspace-select').props.onChange({ target: { value: '/w/proj' } }) })
    await settle()
    assert.deepEqual(all(r, 'checkpoint-row').map(n => n.props['data-checkpoint-id']), [CP.newest, CP.middle, CP.oldest])
    assert.equal(all(r, 'follows-cwd').length, 0)
    one(r, 'follow-cwd')
    await act(async () => { r.unmount() })
  },

  async restore() {
    const { ctx, h } = fakeCtx(cannedBackend({ partial: true }))
    const r = await mount(ctx, h)
    await click(all(r, 'checkpoint-row')[2])
    h.calls.length = 0
    await click(one(r, 'restore-button'))                       // first click: preview only
    assert.deepEqual(h.calls, [{ path: '/restore', method: 'POST',
                                 body: { checkpoint: CP.oldest, workspace: '/w/proj', dry_run: true } }])
    assert.equal(text(one(r, 'restore-button')), 'Confirm restore')
    one(r, 'restore-armed')
    assert.deepEqual(all(r, 'restore-plan-item').map(n => `${n.props['data-action']} ${text(n)}`),
                     ['restore restore a.txt', 'delete delete b.txt',
                      'keep keep big.bin (not captured by the safety checkpoint)'])
    assert.equal(text(one(r, 'restore-plan-summary')), 'Dry run: 1 restore · 1 delete · 1 keep')
    assert.equal(text(one(r, 'restore-plan-target')), `to ${CP.oldest.slice(0, 8)} “first”`)
    assert.ok(text(one(r, 'restore-plan-kept')).startsWith('1 kept'))
    assert.equal(realCalls(h).length, 0)
    const armTimer = h.timeouts.filter(t => t.active)
    assert.equal(armTimer.length, 1)
    assert.equal(armTimer[0].ms, 5000)

    await click(one(r, 'restore-button'))                       // second click: restore, with the plan's token
    assert.deepEqual(realCalls(h).map(c => c.body),
                     [{ checkpoint: CP.oldest, workspace: '/w/proj', dry_run: false, plan_token: 'plan-1' }])
    assert.ok(h.calls.every(c => c.method === 'GET' || (c.body && typeof c.body === 'object' &&
                                                         Object.keys(c.headers).length === 0 && c.timeoutMs >= 60_000)),
              'every POST has a body (sent as JSON), no headers of its own (the host drops them) and a long timeoutMs')
    assert.ok(h.calls.every(c => c.method !== 'GET' || c.timeoutMs === (/^\/(diff|checkpoints\/)/.test(c.path) ? 60_000 : undefined)),
              'polls keep the host default, diffs may take a minute')
    assert.equal(armTimer[0].active, false, 'the arm timer is cancelled once used')
    // incomplete (HTTP 409 with the RestoreResult): what failed, the error, and undo all the same
    assert.ok(text(one(r, 'restore-result')).startsWith(`Incomplete: now at ${CP.oldest.slice(0, 8)} “first”`), text(one(r, 'restore-result')))
    assert.ok(text(one(r, 'chronos-error')).includes('restore incomplete'))
    assert.equal(one(r, 'safety-checkpoint-id').props['data-checkpoint-id'], CP.safety)
    assert.equal(text(one(r, 'restore-button')), 'Restore…')
    assert.deepEqual(all(r, 'restore-failed').map(text), ['failed locked.txt (Permission denied)'])
    assert.ok(h.calls.filter(c => c.path === '/workspaces').length >= 1, 'refreshes after restoring')

    await click(one(r, 'undo-button'))                          // undo = restore the safety checkpoint: preview ...
    assert.equal(realCalls(h).length, 1)
    assert.equal(dryCalls(h).at(-1).body.checkpoint, CP.safety)
    assert.equal(one(r, 'checkpoint-detail').props['data-checkpoint-id'], CP.safety)
    assert.ok(text(one(r, 'restore-plan-summary')).startsWith('Undo:'))
    await click(one(r, 'restore-button'))                       // ... and confirm
    assert.deepEqual(realCalls(h).map(c => [c.body.checkpoint, c.body.plan_token]), [[CP.oldest, 'plan-1'], [CP.safety, 'plan-2']])
    assert.ok(text(one(r, 'restore-result')).startsWith('Undone'))
    assert.equal(all(r, 'chronos-error').length, 0)
    out.restore_calls = realCalls(h).map(c => c.body)
    await act(async () => { r.unmount() })
  },

  async 'arm-expiry'() {
    const { ctx, h } = fakeCtx(cannedBackend())
    const r = await mount(ctx, h)
    await click(all(r, 'checkpoint-row')[2])
    await click(one(r, 'restore-button'))
    assert.equal(one(r, 'restore-button').props.children, 'Confirm restore')
    // the 5 s window passes (fired by hand): the next click previews again
    const t = h.timeouts.find(x => x.active)
    await act(async () => { t.fn() })
    await settle()
    assert.equal(all(r, 'restore-armed').length, 0)
    assert.equal(one(r, 'restore-button').props.children, 'Restore…')
    await click(one(r, 'restore-button'))
    assert.equal(dryCalls(h).length, 2)
    assert.equal(realCalls(h).length, 0)
    // armed, then another checkpoint is selected: disarmed, its click previews
    await click(all(r, 'checkpoint-row')[1])
    assert.equal(all(r, 'restore-plan').length, 0)
    await click(one(r, 'restore-button'))
    assert.equal(dryCalls(h).length, 3)
    assert.equal(dryCalls(h)[2].body.checkpoint, CP.middle)
    assert.equal(realCalls(h).length, 0)
    await act(async () => { r.unmount() })
  },

  async 'blocked-and-resolve'() {
    const { ctx, h } = fakeCtx(cannedBackend({ gate: 'closed' }))
    const r = await mount(ctx, h)
    assert.equal(text(one(r, 'journal-gate')), 'gate closed')
    assert.equal(text(one(r, 'header-gate')), 'gate closed')
    const ops = all(r, 'unresolved-op')
    assert.deepEqual(ops.map(n => n.props['data-operation-id']), [OP])

    await click(all(r, 'checkpoint-row')[2])
    await click(one(r, 'restore-button'))
    await click(one(r, 'restore-button'))
    assert.equal(realCalls(h).length, 1)
    const err = one(r, 'chronos-error')
    assert.equal(err.props['data-code'], 'chronos_blocked')
    assert.ok(text(err).includes('HTTP 409'), text(err))
    assert.ok(text(err).includes(OP.slice(0, 12)), text(err))
    assert.equal(all(r, 'restore-result').length, 0)

    // resolve: evidence required; outcome from the select
    assert.equal(one(r, 'resolve-submit').props.disabled, true)
    await act(async () => { one(r, 'resolve-outcome').props.onChange({ target: { value: 'not_applied' } }) })
    await act(async () => { one(r, 'resolve-form').props.onSubmit({ preventDefault() {} }) })
    await settle()
    assert.equal(h.calls.filter(c => c.path === '/journal/resolve').length, 0, 'blank evidence never reaches the backend')
    assert.ok(text(one(r, 'resolve-error')).includes('Evidence is required'))
    await act(async () => { one(r, 'resolve-evidence').props.onChange({ target: { value: '  checked by hand  ' } }) })
    assert.equal(one(r, 'resolve-submit').props.disabled, false)
    await act(async () => { one(r, 'resolve-form').props.onSubmit({ preventDefault() {} }) })
    await settle()
    const resolves = h.calls.filter(c => c.path === '/journal/resolve')
    assert.deepEqual(resolves, [{ path: '/journal/resolve', method: 'POST',
                                  body: { operation_id: OP, outcome: 'not_applied', evidence: 'checked by hand' } }])
    assert.equal(text(one(r, 'journal-gate')), 'gate open')
    assert.equal(all(r, 'unresolved-op').length, 0)

    await click(one(r, 'chronos-error-dismiss'))
    assert.equal(all(r, 'chronos-error').length, 0)
    await click(one(r, 'restore-button'))
    await click(one(r, 'restore-button'))
    assert.equal(realCalls(h).length, 2)
    one(r, 'restore-result')

    await click(one(r, 'verify-button'))
    assert.ok(h.calls.some(c => c.path === '/journal/verify' && c.method === 'POST'))
    assert.equal(one(r, 'verify-result').props['data-integrity'], 'ok')
    await act(async () => { r.unmount() })
  },

  async polling() {
    let backendDown = false
    const canned = cannedBackend()
    const { ctx, h } = fakeCtx(async (path, opts) => {
      if (backendDown) throw Object.assign(new HttpError('HTTP 503'), { status: 503, body: { status: 'error', error: 'Service Unavailable' } })
      return canned(path, opts)
    })
    const r = await mount(ctx, h)
    const active = h.intervals.filter(t => t.active)
    assert.equal(active.length, 1, 'one poller, through ctx.setInterval')
    assert.equal(active[0].ms, 5000)
    const before = h.calls.filter(c => c.path === '/workspaces').length
    await act(async () => { active[0].fn() })
    await settle()
    assert.equal(h.calls.filter(c => c.path === '/workspaces').length, before + 1)
    assert.ok(h.calls.filter(c => c.path === '/journal/status').length >= 2)
    // a failed poll shows its error; the next successful poll clears it
    backendDown = true
    await act(async () => { active[0].fn() })
    await settle()
    assert.equal(one(r, 'chronos-error').props['data-code'], 'Service Unavailable')
    assert.ok(text(one(r, 'chronos-error')).includes('Refresh failed (HTTP 503)'))
    backendDown = false
    await act(async () => { active[0].fn() })
    await settle()
    assert.equal(all(r, 'chronos-error').length, 0)
    await act(async () => { r.unmount() })
    assert.equal(h.intervals.filter(t => t.active).length, 0, 'unmounting stops the poller')
  },

  async 'minimal-host'() {
    // no PANES_AREA / host.state.cwd / useValue in the SDK, no ctx.setInterval / setTimeout
    const { ctx, h } = fakeCtx(cannedBackend(), { timers: false })
    const r = await mount(ctx, h)
    assert.deepEqual(h.contributions.map(c => c.area), ['panes'], 'no palette or status bar on a host without them')
    assert.equal(all(r, 'follows-cwd').length, 0)
    // without a cwd: the most recent workspace
    assert.equal(one(r, 'workspace-select').props.value, '/w/other')
    assert.deepEqual(all(r, 'checkpoint-row').map(n => n.props['data-checkpoint-id']), [CP.other])
    assert.equal(h.disposers.length >= 1, true, 'the global interval is cleared with the plugin')
    await click(all(r, 'checkpoint-row')[0])
    await click(one(r, 'restore-button'))
    await click(one(r, 'restore-button'))
    assert.deepEqual(realCalls(h).map(c => c.body.checkpoint), [CP.other])
    await act(async () => { r.unmount() })
    h.disposers.forEach(d => d())
  },

  async 'non-utf8'() {
    // a workspace whose root is not UTF-8: listed by its display name, named by its bytes in every request
    const { ctx, h } = fakeCtx(cannedBackend(), { timers: false })
    const r = await mount(ctx, h)
    await act(async () => { one(r, 'workspace-select').props.onChange({ target: { value: NON_UTF8.root } }) })
    await settle()
    assert.deepEqual(all(r, 'checkpoint-row').map(n => n.props['data-checkpoint-id']), [CP.odd])
    await click(all(r, 'checkpoint-row')[0])
    await click(one(r, 'restore-button'))
    assert.ok(text(one(r, 'restore-plan')).includes('create caf\ufffd.txt'))
    await click(one(r, 'restore-button'))
    one(r, 'restore-result')
    const named = h.calls.filter(c => c.path.includes('L3cvY2Fm6Q') || (c.body && c.body.workspace_b64))
    assert.ok(named.length >= 4, JSON.stringify(h.calls))
    assert.ok(!h.calls.some(c => c.path.includes(encodeURIComponent(NON_UTF8.root)) ||
                                 (c.body && c.body.workspace === NON_UTF8.root)), 'never the display name')
    assert.deepEqual(realCalls(h).map(c => c.body),
                     [{ checkpoint: CP.odd, workspace_b64: NON_UTF8.root_b64, dry_run: false, plan_token: 'plan-1' }])
    await act(async () => { r.unmount() })
    h.disposers.forEach(d => d())
  },

  async protection() {
    // degraded: a banner with the reason and the fix; what was settled at start is listed
    const degraded = { state: 'degraded', reason: 'auto_snapshot is off: calls are journaled but not checkpointed',
                       fix: 'fix the settings in config.yaml' }
    const settled = [{ operation_id: OP, tool: 'write_file', result: 'completed', evidence: 'every path at its post-image',
                       paths: ['/w/proj/a.txt'] }]
    let off = false
    const canned = cannedBackend({ protection: degraded, settled })
    const { ctx, h } = fakeCtx(async (path, opts) => {
      if (!off) return canned(path, opts)
      // the API could not load (dashboard/plugin_api.py): only /health answers, 503 with why
      const body = path === '/health'
        ? { status: 'error', error: 'chronos-git protection is OFF', protection: { state: 'off', reason: 'pygit2 is missing', fix: 'hermes chronos-git setup' } }
        : { detail: 'Not Found' }
      throw Object.assign(new HttpError(`HTTP ${path === '/health' ? 503 : 404}`), { status: path === '/health' ? 503 : 404, body })
    })
    const r = await mount(ctx, h)
    assert.equal(one(r, 'protection-banner').props['data-state'], 'degraded')
    assert.equal(text(one(r, 'protection-reason')), degraded.reason)
    assert.equal(text(one(r, 'protection-fix')), degraded.fix)
    assert.equal(text(one(r, 'header-protection')), 'protection DEGRADED')
    assert.deepEqual(all(r, 'settled-op').map(n => n.props['data-result']), ['completed'])
    off = true
    await act(async () => { h.intervals.find(t => t.active).fn() })
    await settle()
    assert.equal(one(r, 'protection-banner').props['data-state'], 'off')
    assert.equal(text(one(r, 'protection-reason')), 'pygit2 is missing')
    assert.equal(text(one(r, 'protection-fix')), 'hermes chronos-git setup')
    assert.equal(text(one(r, 'header-protection')), 'protection OFF')
    off = false                                       // it loads again: the journal's word counts
    await act(async () => { h.intervals.find(t => t.active).fn() })
    await settle()
    assert.equal(one(r, 'protection-banner').props['data-state'], 'degraded')
    await act(async () => { r.unmount() })
  },

  async errors() {
    // both shapes a host may throw become one readable error with the envelope's text
    const a = plugin.toApiError(Object.assign(new Error('x'), { status: 404, body: { status: 'error', error: 'no checkpoint abc' } }))
    assert.deepEqual([a.status, a.code, a.message], [404, 'no checkpoint abc', 'no checkpoint abc'])
    const b = plugin.toApiError(new Error('409: {"status":"error","error":"chronos_blocked","message":"gate is closed"}'))
    assert.deepEqual([b.status, b.code, b.message], [409, 'chronos_blocked', 'chronos_blocked: gate is closed'])
    const c = plugin.toApiError(Object.assign(new Error('HTTP 400'), { status: 400, body: '{"status":"error","error":"invalid request: evidence"}' }))
    assert.deepEqual([c.status, c.code], [400, 'invalid request: evidence'])
    // through Electron's IPC (every status but 404), and the 404 envelope that keeps statusCode
    const e = plugin.toApiError(new Error(`Error invoking remote method 'hermes:api': Error: 409: {"status":"error","error":"chronos_blocked","message":"gate is closed"}`))
    assert.deepEqual([e.status, e.code, e.message, e.envelope], [409, 'chronos_blocked', 'chronos_blocked: gate is closed', true])
    const f = plugin.toApiError(Object.assign(new Error('404: {"detail":"Not Found"}'), { statusCode: 404 }))
    assert.deepEqual([f.status, f.message, f.envelope, plugin.missingApi(f)], [404, 'Not Found', false, true])
    const g = plugin.toApiError(Object.assign(new Error('404: {"status":"error","error":"unknown workspace /x"}'), { statusCode: 404 }))
    assert.deepEqual([g.status, g.envelope, plugin.missingApi(g)], [404, true, false])
    assert.equal(plugin.missingApi(new Error('Expected JSON from http://h/api/plugins/chronos-git/workspaces but got HTML (status 200). The endpoint is likely missing on the Hermes backend.')), true)
    const t = plugin.toApiError(new Error("Error invoking remote method 'hermes:api': Error: socket hang up"))
    assert.deepEqual([t.status, t.message], [0, 'socket hang up'])
    assert.deepEqual(plugin.rolesOf({ role: 'after_call' }), ['after_call'])
    assert.deepEqual(plugin.rolesOf({ role: 'after_call', roles: ['before_call', 'after_call'] }), ['before_call', 'after_call'])
    assert.deepEqual(plugin.rolesOf({ role: null }), [])
    const d = plugin.toApiError(new Error('Hermes desktop bridge unavailable'))
    assert.deepEqual([d.status, d.message], [0, 'Hermes desktop bridge unavailable'])
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }, { root: '/a/b' }], '/a/b/c'), '/a/b')
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }], '/ab'), null)
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }], null), null)
  },

  async 'long-requests'() {
    // restore, agent-only restore, undo, verify and resolve answer after 20 s (a big workspace): longer than
    // the host's default deadline, so each must name its own timeoutMs or the host gives up on it
    const slow = Object.fromEntries(['POST /restore', 'POST /undo', 'POST /redo', 'POST /revert', 'POST /journal/verify',
                                     'POST /journal/resolve'].map(r => [r, 20]))
    const { ctx, h } = fakeCtx(cannedBackend({ gate: 'closed', slow }))
    // the door itself: without timeoutMs such a request fails on the host's side
    await assert.rejects(ctx.rest('/journal/verify', { method: 'POST', body: {} }), /Timed out after 15s/)
    h.calls.length = 0
    h.timedOut.length = 0
    const r = await mount(ctx, h)
    await act(async () => { one(r, 'resolve-evidence').props.onChange({ target: { value: 'checked by hand' } }) })
    await act(async () => { one(r, 'resolve-form').props.onSubmit({ preventDefault() {} }) })
    await settle()
    assert.equal(text(one(r, 'journal-gate')), 'gate open')
    await click(all(r, 'checkpoint-row')[2])
    await click(one(r, 'restore-button'))
    await click(one(r, 'restore-button'))
    one(r, 'restore-result')
    await click(one(r, 'op-undo'))
    await click(one(r, 'op-undo'))
    assert.ok(text(one(r, 'restore-result')).startsWith('Undone'), text(one(r, 'restore-result')))
    await click(one(r, 'verify-button'))
    assert.equal(one(r, 'verify-result').props['data-integrity'], 'ok')
    assert.deepEqual(h.timedOut, [], 'no request ran into the host deadline')
    assert.equal(all(r, 'chronos-error').length, 0)
    const posts = h.calls.filter(c => c.method === 'POST')
    assert.deepEqual([...new Set(posts.map(c => c.path))].sort(), ['/journal/resolve', '/journal/verify', '/restore', '/undo'])
    assert.ok(posts.every(c => c.timeoutMs >= 20_000), JSON.stringify(posts.map(c => [c.path, c.timeoutMs])))
    out.timeouts = [...new Set(posts.map(c => c.timeoutMs))]
    await act(async () => { r.unmount() })
  },

  async 'not-installed'() {
    // a profile without chronos-git: the backend has no such routes (Hermes answers 404, or, from the
    // SPA fallback, HTML the host reports as "got HTML ... endpoint is likely missing")
    const html = process.env.HARNESS_MISSING === 'html'
    let installed = false
    const canned = cannedBackend()
    const { ctx, h } = fakeCtx(async (path, opts) => {
      if (installed) return canned(path, opts)
      if (html) {
        throw new Error(`Expected JSON from http://127.0.0.1:9119/api/plugins/chronos-git${path} but got HTML (status 200). ` +
                        'The endpoint is likely missing on the Hermes backend.')
      }
      throw Object.assign(new HttpError('HTTP 404'), { status: 404, body: { detail: 'Not Found' } })
    })
    globalThis.__harnessHost.state.profile.set('work')
    const r = await mount(ctx, h)
    const note = one(r, 'not-installed')
    assert.ok(text(note).includes('chronos-git is not enabled in the profile “work”'), text(note))
    assert.ok(text(note).includes('hermes --profile work plugins enable chronos-git'), text(note))
    assert.equal(all(r, 'chronos-error').length, 0, 'no raw error beside it')
    assert.equal(all(r, 'protection-banner').length, 0)
    assert.deepEqual(h.calls.map(c => c.path), ['/workspaces', '/health'])
    // enabled (and the backend restarted): the next poll finds it
    installed = true
    await act(async () => { h.intervals.find(t => t.active).fn() })
    await settle()
    assert.equal(all(r, 'not-installed').length, 0)
    assert.equal(all(r, 'checkpoint-row').length, 3)
    await act(async () => { r.unmount() })
  },

  async tree() {
    const { ctx, h } = fakeCtx(cannedBackend())
    globalThis.__harnessHost.state.cwd.set('/w/tree/src')
    const r = await mount(ctx, h)
    assert.ok(h.calls.some(c => c.path === '/checkpoints?workspace=%2Fw%2Ftree&all=true&limit=100'))
    const rows = all(r, 'checkpoint-row')
    const attr = k => rows.map(n => n.props[k])
    assert.deepEqual(attr('data-checkpoint-id'), [TREE[5], TREE[4], TREE[3], TREE[2], TREE[1]])
    assert.deepEqual(rows.map(n => text(all({ root: n }, 'checkpoint-number')[0])), ['@5', '@4', '@3', '@2', '@1'])
    // the workspace is on @5 <- @2 <- @1; @4 <- @3 is the line the restore left behind: dimmed, its own lane
    assert.deepEqual(attr('data-on-line'), ['true', 'false', 'false', 'true', 'true'])
    assert.deepEqual(attr('data-lane').map(Number), [0, 1, 1, 0, 0])
    assert.ok(rows[1].props.style.opacity < 1 && rows[0].props.style.opacity === undefined)
    // @2 is the branch point; @5 names what it was restored from
    const branch = all(r, 'branch-point')
    assert.equal(branch.length, 1)
    assert.ok(text(rows[3]).includes('⋔ branch point'))
    assert.equal(text(one(r, 'restore-origin')), '↩ restored @2')
    // roles: `roles` where the answer has it, else `role`
    const roles = n => all({ root: n }, 'checkpoint-role').map(text)
    assert.deepEqual(rows.map(roles), [['restored'], ['after call'], ['after call', 'before call'], ['after call'], ['baseline']])
    // a checkpoint of the line left behind is still restorable
    await click(rows[1])
    one(r, 'off-line-note')
    assert.equal(one(r, 'checkpoint-detail').props['data-on-line'], 'false')
    await click(one(r, 'restore-button'))
    await click(one(r, 'restore-button'))
    assert.deepEqual(realCalls(h).map(c => c.body.checkpoint), [TREE[4]])
    out.lanes = attr('data-lane').map(Number)
    await act(async () => { r.unmount() })
  },

  async scrub() {
    const { ctx, h } = fakeCtx(cannedBackend())
    globalThis.__harnessHost.state.cwd.set('/w/tree')
    const r = await mount(ctx, h)
    const slider = () => one(r, 'scrub')
    assert.equal(slider().props.type, 'range')
    assert.deepEqual([slider().props.min, slider().props.max, slider().props.value], [0, 4, 4])   // oldest .. newest
    assert.ok(text(one(r, 'scrub-label')).startsWith('@5 restored'))
    h.calls.length = 0
    const timers = () => h.timeouts.filter(t => t.active && t.ms === 250)
    // drag: @5 -> @3 -> @2; each is named as it is passed, nothing is loaded while the scrub moves
    for (const v of [3, 2, 1]) {
      await act(async () => { slider().props.onChange({ target: { value: String(v) } }) })
      await settle()
    }
    assert.ok(text(one(r, 'scrub-label')).startsWith('@2 after call'), text(one(r, 'scrub-label')))
    assert.equal(one(r, 'checkpoint-detail').props['data-checkpoint-id'], TREE[2])
    one(r, 'scrub-pending')
    assert.equal(rows(r).find(n => n.props['data-scrubbed'] === 'true').props['data-checkpoint-id'], TREE[2])
    assert.equal(h.calls.length, 0, 'no request while scrubbing')
    assert.equal(timers().length, 1, 'one debounce timer, restarted at each step')
    await fire(timers()[0])
    assert.deepEqual(h.calls.map(c => c.path), [`/checkpoints/${TREE[2]}?workspace=%2Fw%2Ftree`])
    assert.equal(all(r, 'scrub-pending').length, 0)
    one(r, 'diff-patch')
    // arrow keys: one checkpoint per press (the slider does not step again), Home / End
    h.calls.length = 0
    let prevented = 0
    const key = async k => {
      await act(async () => { slider().props.onKeyDown({ key: k, preventDefault: () => { prevented += 1 } }) })
      await settle()
    }
    await key('ArrowLeft')
    assert.ok(text(one(r, 'scrub-label')).startsWith('@1 baseline'))
    await key('ArrowRight')
    await key('ArrowRight')
    assert.ok(text(one(r, 'scrub-label')).startsWith('@3 '), text(one(r, 'scrub-label')))
    assert.equal(prevented, 3)
    await key('End')
    assert.ok(text(one(r, 'scrub-label')).startsWith('@5 '))
    await key('Home')
    assert.ok(text(one(r, 'scrub-label')).startsWith('@1 '))
    await key('ArrowLeft')                                         // already the oldest
    assert.ok(text(one(r, 'scrub-label')).startsWith('@1 '))
    assert.equal(h.calls.length, 0)
    assert.equal(timers().length, 1)
    await fire(timers()[0])
    assert.deepEqual(h.calls.map(c => c.path), [`/checkpoints/${TREE[1]}?workspace=%2Fw%2Ftree`])
    // a click is not a scrub: its diff loads at once
    h.calls.length = 0
    await click(rows(r)[0])
    assert.deepEqual(h.calls.map(c => c.path), [`/checkpoints/${TREE[5]}?workspace=%2Fw%2Ftree`])
    await act(async () => { r.unmount() })
  },

  async 'agent-only'() {
    const { ctx, h } = fakeCtx(cannedBackend())
    const r = await mount(ctx, h)
    await click(all(r, 'checkpoint-row')[2])
    h.calls.length = 0
    await click(one(r, 'agent-only-button'))
    assert.deepEqual(h.calls.map(c => [c.path, c.body]),
                     [['/restore', { checkpoint: CP.oldest, workspace: '/w/proj', agent_only: true, dry_run: true }]])
    assert.equal(text(one(r, 'agent-only-button')), 'Confirm agent-only')
    assert.equal(text(one(r, 'restore-button')), 'Restore…', 'the full restore is not armed')
    assert.equal(text(one(r, 'restore-plan-summary')), 'Agent-only dry run: 1 merge · 1 conflict')
    assert.ok(text(one(r, 'restore-plan-target')).startsWith('agent-only restore: takes back 2 call(s)'))
    one(r, 'restore-plan-conflicts')
    const items = all(r, 'restore-plan-item')
    assert.deepEqual(items.map(n => n.props['data-action']), ['restore', 'conflict'])
    assert.ok(text(items[0]).startsWith('merge a.txt'))
    assert.equal(text(one(r, 'conflict-agent')), `agent: the agent modified line 1 (call ${OP2})`)
    assert.equal(text(one(r, 'conflict-person')), 'later: modified afterwards: line 1')
    assert.ok(text(one(r, 'restore-plan-note')).includes('conflict'))
    // the full restore's first click replaces the agent-only plan: never confirms it
    await click(one(r, 'restore-button'))
    assert.equal(realCalls(h).length, 0)
    assert.equal(text(one(r, 'restore-plan-summary')), 'Dry run: 1 restore · 1 delete · 1 keep')
    await click(one(r, 'agent-only-button'))
    await click(one(r, 'agent-only-button'))
    assert.deepEqual(realCalls(h).map(c => c.body),
                     [{ checkpoint: CP.oldest, workspace: '/w/proj', agent_only: true, dry_run: false, plan_token: 'plan-3' }])
    const res = one(r, 'restore-result')
    assert.equal(res.props['data-op'], 'agent_only')
    assert.ok(text(res).startsWith('Agent-only restore done'), text(res))
    assert.ok(text(res).includes('1 conflict(s) left as they are'))
    assert.deepEqual(all(r, 'restore-conflict').map(text), ['conflict b.txt (later: modified afterwards: line 1)'])
    assert.equal(all(r, 'undo-button').length, 0, 'a merging operation is taken back by Undo… (the time machine)')
    await act(async () => { r.unmount() })
  },

  async 'undo-redo-revert'() {
    const { ctx, h } = fakeCtx(cannedBackend())
    const r = await mount(ctx, h)
    const posts = p => h.calls.filter(c => c.path === p)
    // nothing to undo yet: the API's word
    await click(one(r, 'op-undo'))
    assert.ok(text(one(r, 'chronos-error')).includes('nothing to undo'), text(one(r, 'chronos-error')))
    assert.ok(text(one(r, 'chronos-error')).startsWith('Undo preview failed (HTTP 400)'), text(one(r, 'chronos-error')))
    await click(one(r, 'chronos-error-dismiss'))
    // revert one call from the journal: previewed, then confirmed
    const revert = all(r, 'op-revert')
    assert.equal(revert.length, 2, 'one per started call')
    await click(revert[0])
    assert.deepEqual(posts('/revert').map(c => c.body), [{ operation: OP2, workspace: '/w/proj', dry_run: true }])
    assert.equal(one(r, 'restore-plan').props['data-op'], 'revert')
    assert.equal(text(one(r, 'restore-plan-summary')), 'Revert dry run: 1 merge')
    assert.equal(text(all(r, 'op-revert')[0]), 'Confirm revert')
    assert.equal(text(all(r, 'op-revert')[1]), 'Revert…', 'only the previewed one is armed')
    await click(all(r, 'op-revert')[0])
    assert.deepEqual(posts('/revert').map(c => c.body.plan_token), [undefined, 'plan-1'])
    assert.ok(text(one(r, 'restore-result')).startsWith('Reverted'))
    // undo it, then redo it: each previewed and confirmed on its own button
    await click(one(r, 'op-undo'))
    assert.equal(text(one(r, 'restore-plan-summary')), 'Undo dry run: 1 merge · 1 delete')
    assert.equal(text(one(r, 'op-undo')), 'Confirm undo')
    const armTimers = h.timeouts.filter(t => t.active && t.ms === 5000)
    assert.equal(armTimers.length, 1)
    await click(one(r, 'op-undo'))
    assert.ok(text(one(r, 'restore-result')).startsWith('Undone'))
    await click(one(r, 'op-redo'))
    // the arm window passes: the next click previews again instead of confirming
    await act(async () => { h.timeouts.filter(t => t.active && t.ms === 5000)[0].fn() })
    await settle()
    assert.equal(text(one(r, 'op-redo')), 'Redo…')
    await click(one(r, 'op-redo'))
    await click(one(r, 'op-redo'))
    assert.ok(text(one(r, 'restore-result')).startsWith('Redone'))
    assert.deepEqual(posts('/undo').map(c => [c.body.dry_run, c.body.plan_token]), [[true, undefined], [true, undefined], [false, 'plan-2']])
    assert.deepEqual(posts('/redo').map(c => [c.body.dry_run, c.body.plan_token]), [[true, undefined], [true, undefined], [false, 'plan-4']])
    assert.ok([...posts('/undo'), ...posts('/redo'), ...posts('/revert')].every(c => c.body.workspace === '/w/proj' && c.timeoutMs >= 60_000))
    assert.equal(all(r, 'chronos-error').length, 0)
    await act(async () => { r.unmount() })
  },

  async 'real-tree'() {
    // the real API and store: a timeline with a line left behind, an agent-only restore with a conflict, undo
    const { ctx, h } = fakeCtx(realBackend(process.env.HARNESS_API, process.env.HARNESS_TOKEN))
    const r = await mount(ctx, h)
    await until(() => rows(r).length > 0, 'checkpoint rows from the real store')
    const number = n => text(all({ root: n }, 'checkpoint-number')[0])
    out.rows = rows(r).map(n => [number(n), n.props['data-on-line'], Number(n.props['data-lane']),
                                 all({ root: n }, 'checkpoint-role').map(text).join('+')])
    out.branch_rows = rows(r).filter(n => all({ root: n }, 'branch-point').length).map(number)
    out.origins = all(r, 'restore-origin').map(text)
    // scrub to @1: named at once, its diff once the scrub rests
    await act(async () => { one(r, 'scrub').props.onKeyDown({ key: 'Home', preventDefault() {} }) })
    await settle()
    assert.ok(text(one(r, 'scrub-label')).startsWith('@1 '), text(one(r, 'scrub-label')))
    await fire(h.timeouts.filter(t => t.active && t.ms === 250)[0])
    await until(() => all(r, 'diff-view').length + all(r, 'diff-empty').length > 0, 'the diff of @1')
    await click(one(r, 'agent-only-button'))
    await until(() => all(r, 'restore-plan').length === 1 || all(r, 'chronos-error').length === 1, 'the agent-only plan')
    assert.equal(all(r, 'chronos-error').length, 0, all(r, 'chronos-error').map(text).join())
    out.plan = all(r, 'restore-plan-item').map(n => `${n.props['data-action']} ${text(n).split('\n')[0]}`)
    out.summary = text(one(r, 'restore-plan-summary'))
    out.conflict = [text(one(r, 'conflict-agent')), text(one(r, 'conflict-person'))]
    await click(one(r, 'agent-only-button'))
    await until(() => all(r, 'restore-result').length === 1 || all(r, 'chronos-error').length === 1, 'the agent-only restore')
    assert.equal(all(r, 'chronos-error').length, 0, all(r, 'chronos-error').map(text).join())
    out.result = text(one(r, 'restore-result'))
    out.after_restore = realCalls(h).map(c => c.body)
    await click(one(r, 'op-undo'))
    await until(() => all(r, 'restore-plan').length === 1 || all(r, 'chronos-error').length === 1, 'the undo plan')
    assert.equal(all(r, 'chronos-error').length, 0, all(r, 'chronos-error').map(text).join())
    out.undo_plan = text(one(r, 'restore-plan-summary'))
    await click(one(r, 'op-undo'))
    await until(() => (all(r, 'restore-result').length === 1 && text(one(r, 'restore-result')).startsWith('Undone')) ||
                      all(r, 'chronos-error').length === 1, 'the undo')
    assert.equal(all(r, 'chronos-error').length, 0, all(r, 'chronos-error').map(text).join())
    out.undo = h.calls.filter(c => c.path === '/undo').map(c => [c.body.dry_run, !!c.body.plan_token])
    await act(async () => { r.unmount() })
  },

  async 'real-backend'() {
    const { ctx, h } = fakeCtx(realBackend(process.env.HARNESS_API, process.env.HARNESS_TOKEN))
    const target = process.env.HARNESS_TARGET
    const r = await mount(ctx, h)
    await until(() => all(r, 'checkpoint-row').length > 0, 'checkpoint rows from the real store')
    out.rows = all(r, 'checkpoint-row').map(n => n.props['data-checkpoint-id'])
    const row = all(r, 'checkpoint-row').find(n => n.props['data-checkpoint-id'] === target)
    assert.ok(row, `checkpoint ${target} listed`)
    await click(row)
    await until(() => all(r, 'diff-view').length + all(r, 'diff-empty').length > 0, 'the diff')
    await click(one(r, 'restore-button'))
    await until(() => all(r, 'restore-plan').length === 1, 'the dry-run plan')
    out.plan = all(r, 'restore-plan-item').map(n => `${n.props['data-action']} ${text(n).split(' ').pop()}`)
    out.after_first_click = realCalls(h).length
    await click(one(r, 'restore-button'))
    await until(() => all(r, 'restore-result').length === 1 || all(r, 'chronos-error').length === 1, 'the restore')
    assert.equal(all(r, 'chronos-error').length, 0, all(r, 'chronos-error').map(text).join())
    out.safety = one(r, 'safety-checkpoint-id').props['data-checkpoint-id']
    out.confirm = realCalls(h).map(c => c.body)
    await until(() => one(r, 'journal-panel') && all(r, 'journal-event').some(n => n.props['data-kind'] === 'returned'), 'journal events')
    out.gate = text(one(r, 'journal-gate'))
    out.event_tools = all(r, 'event-tool').map(text)
    out.revert_buttons = all(r, 'journal-event').filter(n => n.props['data-kind'] === 'started')
      .map(n => n.findAll(x => typeof x.type === 'string' && x.props['data-testid'] === 'op-revert').length)
    await act(async () => { r.unmount() })
  }
}

if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}; known: ${Object.keys(scenarios).join(', ')}`)
  process.exit(2)
}
await scenarios[scenario]()
console.log(JSON.stringify({ ok: true, ...out, reads: globalThis.__fieldRecorder.reads(), served }))
