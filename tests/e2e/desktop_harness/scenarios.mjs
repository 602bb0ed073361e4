// Scenarios for desktop/plugin.js, run by tests/test_desktop_plugin.py:
//   node --import ./register.mjs scenarios.mjs <scenario>
// React renders with react-test-renderer (no DOM); ctx is a fake whose `rest` either
// answers from a canned backend (same envelopes as api/router.py) or, for the
// `real-backend` scenario, proxies to a real chronos-git HTTP server on 127.0.0.1.
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
const { act } = TestRenderer

const plugin = await import(pathToFileURL(process.env.HARNESS_PLUGIN).href)
const scenario = process.argv[2]

// ------------------------------------------------------------------ helpers
const hex = c => c.repeat(40)
const CP = { newest: hex('a'), middle: hex('b'), oldest: hex('c'), other: hex('d'), safety: hex('e'), odd: hex('f') }
// a workspace whose root is not UTF-8 (b"/w/caf\xe9"): shown with U+FFFD, named by its bytes
const NON_UTF8 = { root: '/w/caf\ufffd', root_b64: 'L3cvY2Fm6Q==' }
const OP = '0123456789abcdef0123456789abcdef'

// canned answers are the API's typed results (service/results.py); the test validates them
function cpSummary(id, i, extra = {}) {
  return {
    id, short_id: id.slice(0, 8), time: 1_800_000_000 + i, time_iso: '2027-01-15T08:00:00+00:00',
    description: extra.description || `checkpoint ${i}`, kind: extra.kind || 'full', tool: extra.tool === undefined ? 'write_file' : extra.tool,
    session_id: 's1', turn_id: null, tool_call_id: extra.tool_call_id || null, files: 2, skipped: extra.skipped || [],
    nested_repos: [], added_bytes: 4, index: i
  }
}

function wsInfo(root, list, extra = {}) {
  return { root, id: `id-${list[0].id.slice(0, 4)}`, ref: `refs/chronos/snapshots/${list[0].id.slice(0, 4)}`,
           gitdir: `/store/worktrees/${list[0].id.slice(0, 4)}`, exists: true, latest: list[0], checkpoints: list.length, ...extra }
}

const PROTECTION_ON = { state: 'on' }

class HttpError extends Error {}

/** A canned backend with just enough state for the flows. `errorStyle` picks how a
 *  non-2xx is thrown: {status, body} fields, or only "409: {json}" in the message.
 *  Like api/router.py it refuses a POST that is not JSON (415) and a real restore
 *  without the plan_token of a dry run of the same request (428 / 409). */
function cannedBackend({ gate = 'open', errorStyle = 'fields', partial = false, protection = PROTECTION_ON, settled = [] } = {}) {
  const state = { gate, unresolved: gate === 'closed' ? 1 : 0, restored: [], seq: 6, plans: new Map(), tokens: 0 }
  const planKey = b => JSON.stringify([b.checkpoint, b.workspace, b.workspace_b64, b.paths, b.paths_b64, b.clean])
  const fail = (status, body) => {
    if (errorStyle === 'fields') throw Object.assign(new HttpError(`Request failed with status ${status}`), { status, body })
    throw new HttpError(`${status}: ${JSON.stringify(body)}`)
  }
  const cps = {
    '/w/proj': [cpSummary(CP.newest, 1, { tool: 'patch', tool_call_id: 'call_patch',
                                          skipped: [{ path: 'big.bin', reason: 'larger than max_file_size_mb', size: 99_000_000 }] }),
                cpSummary(CP.middle, 2, { tool_call_id: 'call_write' }),
                cpSummary(CP.oldest, 3, { kind: 'manual', tool: null, description: 'first' })],
    '/w/other': [cpSummary(CP.other, 1)],
    [NON_UTF8.root_b64]: [cpSummary(CP.odd, 1)]
  }
  return async (rawPath, opts = {}) => {
    const url = new URL(rawPath, 'http://x')
    const p = url.pathname
    const q = Object.fromEntries(url.searchParams)
    const method = opts.method || 'GET'
    const body = opts.body || {}
    if (method !== 'GET' && (opts.headers || {})['Content-Type'] !== 'application/json') {
      fail(415, { status: 'error', error: 'requests that change state must be sent as Content-Type: application/json' })
    }
    const wsOf = x => (x.workspace_b64 !== undefined ? x.workspace_b64 : x.workspace)
    if (method === 'GET' && p === '/workspaces') {
      // /w/other is the most recently used workspace
      return { status: 'ok', workspaces: [
        wsInfo('/w/other', cps['/w/other']), wsInfo('/w/proj', cps['/w/proj']),
        wsInfo(NON_UTF8.root, cps[NON_UTF8.root_b64], { root_b64: NON_UTF8.root_b64 })] }
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
    if (method === 'POST' && p === '/restore') {
      if (!body.checkpoint) fail(400, { status: 'error', error: 'invalid request: checkpoint: Field required' })
      const planItems = [{ path: 'a.txt', action: 'restore' }, { path: 'b.txt', action: 'delete' },
                         { path: 'big.bin', action: 'keep', reason: 'not captured by the safety checkpoint' }]
      if (body.workspace_b64) planItems.push({ path: 'caf\ufffd.txt', path_b64: 'Y2Fm6S50eHQ=', action: 'create' })
      const target = Object.values(cps).flat().find(c => c.id === body.checkpoint)
      if (body.dry_run) {
        const token = `plan-${++state.tokens}`
        state.plans.set(token, planKey(body))
        return { status: 'ok', restored_checkpoint: body.checkpoint, target, safety_checkpoint: null, dry_run: true, clean: true,
                 files_changed: 1, untracked_removed: 1, skipped: 0, kept: 1, failed: 0, plan: planItems, plan_token: token }
      }
      if (!body.plan_token) fail(428, { status: 'error', error: 'a restore needs the plan_token of its dry run' })
      const planned = state.plans.get(body.plan_token)
      state.plans.delete(body.plan_token)
      if (planned !== planKey(body)) fail(409, { status: 'error', error: 'the plan token is unknown, used or expired' })
      if (state.gate === 'closed') {
        fail(409, { status: 'error', error: 'chronos_blocked', blocked: true, operation_ids: [OP],
                    message: `chronos-git recovery gate is closed: ${OP.slice(0, 12)} terminal cut off by a crash (pending)` })
      }
      state.restored.push(body.checkpoint)
      const list = cps[wsOf(body)]
      if (!list.some(c => c.id === CP.safety)) list.unshift(cpSummary(CP.safety, 0, { kind: 'safety', tool: null }))
      const done = { status: 'ok', restored_checkpoint: body.checkpoint, target, safety_checkpoint: CP.safety, dry_run: false,
                     clean: true, files_changed: 1, untracked_removed: 1, skipped: 0, kept: 1, failed: 0, plan: planItems,
                     operation_id: 'f'.repeat(32) }
      if (partial && body.checkpoint !== CP.safety) {
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
        { schema: 'chronos-git.journal.v1', kind, seq: 4 - i, id: hex(String(i)), operation_id: kind === 'genesis' ? null : OP,
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
}

/** A real backend: fetch against the chronos-git HTTP API the test started. */
function realBackend(base, token) {
  return async (path, opts = {}) => {
    const res = await fetch(`${base}${path}`, {
      method: opts.method || 'GET',
      headers: { 'X-Hermes-Session-Token': token, ...(opts.headers || {}) },      // only what the pane sends
      body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined
    })
    const text = await res.text()
    if (!res.ok) throw Object.assign(new HttpError(`HTTP ${res.status}`), { status: res.status, body: text })
    return JSON.parse(text)
  }
}

function fakeCtx(backend, { timers = true } = {}) {
  const h = { contributions: [], calls: [], intervals: [], timeouts: [], disposers: [], disposed: 0 }
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
    rest(path, opts) {
      assert.equal(typeof path, 'string')
      assert.ok(path.startsWith('/') && !path.startsWith('/api/'), `ctx.rest paths are relative to the namespace: ${path}`)
      const call = { path, method: (opts && opts.method) || 'GET', body: opts && opts.body }
      // the headers ride along unseen by deepEqual on the calls
      Object.defineProperty(call, 'headers', { value: (opts && opts.headers) || {}, enumerable: false })
      h.calls.push(call)
      const route = `${call.method} ${new URL(path, 'http://x').pathname}`
      return backend(path, opts).then(body => {
        served.push({ route, body: JSON.parse(JSON.stringify(body)) })     // as it would go over the wire
        return globalThis.__fieldRecorder.wrap(body, route)
      })
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
const realCalls = h => h.calls.filter(c => c.path === '/restore' && c.body && c.body.dry_run === false)
const dryCalls = h => h.calls.filter(c => c.path === '/restore' && c.body && c.body.dry_run === true)

async function mount(ctx, h) {
  assert.equal(h.contributions.length, 0)
  plugin.default.register(ctx)
  assert.equal(h.contributions.length, 1)
  let r
  await act(async () => { r = TestRenderer.create(h.contributions[0].render()) })
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
    assert.equal(h.contributions.length, 1)
    const c = h.contributions[0]
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
  },

  async timeline() {
    const { ctx, h } = fakeCtx(cannedBackend())
    const r = await mount(ctx, h)
    // the session cwd is inside /w/proj, which is NOT the most recent workspace: it wins
    assert.deepEqual(h.calls.slice(0, 2).map(c => c.path), ['/workspaces', '/checkpoints?workspace=%2Fw%2Fproj&limit=30'])
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
    assert.ok(h.calls.some(c => c.path === '/checkpoints?workspace=%2Fw%2Fother&limit=30'))
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
    assert.ok(h.calls.every(c => c.method === 'GET' || c.headers['Content-Type'] === 'application/json'),
              'every POST is JSON')
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
    const { ctx, h } = fakeCtx(cannedBackend({ gate: 'closed', errorStyle: process.env.HARNESS_ERROR_STYLE || 'fields' }))
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
    assert.equal(h.contributions[0].area, 'panes')
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
    const d = plugin.toApiError(new Error('Hermes desktop bridge unavailable'))
    assert.deepEqual([d.status, d.message], [0, 'Hermes desktop bridge unavailable'])
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }, { root: '/a/b' }], '/a/b/c'), '/a/b')
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }], '/ab'), null)
    assert.equal(plugin.workspaceForCwd([{ root: '/a' }], null), null)
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
    await act(async () => { r.unmount() })
  }
}

if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}; known: ${Object.keys(scenarios).join(', ')}`)
  process.exit(2)
}
await scenarios[scenario]()
console.log(JSON.stringify({ ok: true, ...out, reads: globalThis.__fieldRecorder.reads(), served }))
