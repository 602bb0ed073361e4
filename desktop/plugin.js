/*
 * chronos-git — Hermes Desktop pane (newer Desktop hosts, @hermes/plugin-sdk).
 *
 * One uncompiled ESM file: no JSX, no build step, and only the three
 * specifiers the Desktop loader resolves (the SDK, react, react/jsx-runtime).
 * The SDK is imported as a namespace so every member is feature-detected: a
 * host without `host.state.cwd`, `useValue`, `ctx.setInterval`, the palette or
 * the status bar still works.
 *
 * Backend: ctx.rest(path, {method, body, timeoutMs}) -> /api/plugins/chronos-git<path>,
 * the same router the web dashboard tab uses (api/router.py).  The Desktop's rest
 * door (apps/desktop/src/api/plugins.ts, PluginRestOptions) forwards only
 * method, body, upload and timeoutMs: no headers of the plugin's own, JSON bodies
 * sent as JSON, and a request silent for longer than the host's default deadline
 * fails, so every operation that can take long (restore, agent-only restore,
 * revert, undo, redo, verify, resolve) names its own `timeoutMs`.  A non-2xx
 * answer arrives as an Error whose message is "NNN: <body>" (through Electron's
 * IPC: "Error invoking remote method 'hermes:api': Error: NNN: <body>"); the
 * chronos-git body is a {"status": "error", "error": ..., "message"?: ...}
 * envelope.  A 404 that is not such an envelope (or the host's "got HTML ...
 * endpoint is likely missing") means the profile the Desktop talks to has no
 * chronos-git API: the pane says so and how to enable it.  Names that are not
 * UTF-8 arrive as `path` + `path_b64`; requests send the `_b64` form then.
 *
 * What it shows: the workspace (follows the session cwd when it has checkpoints),
 * the timeline as a tree (GET /checkpoints?all=true: every checkpoint with its
 * `number`, `role` (or `roles`, when the answer carries them), `parents` and
 * `restored_from`; branch points marked, the lines the workspace is not on dimmed
 * and still restorable), a scrubber (range slider or arrow keys; each checkpoint
 * is named as it is passed and its diff loaded once the scrub rests), the diff of
 * the selected checkpoint, restore and agent-only restore, revert of a journaled
 * call, undo and redo — each a dry run first (the plan: merges, conflicts with
 * what the agent and the person did), then a second click within 5 s that sends
 * the dry run's request with its `plan_token` — and the journal: integrity, gate,
 * unresolved operations with a resolve form, recent events, verify.  Protection
 * (`protection` of /journal/status, or /health when the API did not load) is a
 * badge when on and a banner with the reason and the fix when OFF or DEGRADED.
 *
 * Ways in: the pane (right), a command-palette row and a status-bar item.  Closing
 * a plugin's only pane hides it for good (the host persists `open: false`, and
 * re-enabling the plugin does not reopen it), so the palette row and the status
 * item reopen it through the host's pane door when it has one.
 *
 * The pane reads only what the OpenAPI schema declares for each route (the
 * models of service/results.py); tests/e2e/test_desktop_pane.py records every
 * field it reads and checks them against that schema.  Answers are kept as
 * they came (`{ res, ... }` beside the pane's own notes), never spread into
 * local state.
 */
import * as SDK from '@hermes/plugin-sdk'
import * as React from 'react'
import { jsx, jsxs } from 'react/jsx-runtime'

const PLUGIN_ID = 'chronos-git'
const PANE_ID = 'pane'
const POLL_MS = 5000
const ARM_MS = 5000
const SCRUB_MS = 250                   // a scrub that rests this long loads the checkpoint's diff
const LONG_MS = 180_000                // operations that may run long: the host's default gives up after ~15-30 s
const DIFF_MS = 60_000                 // a diff of a large workspace
const CHECKPOINT_LIMIT = 100
const EVENT_LIMIT = 10
const PANES = SDK.PANES_AREA || 'panes'

const { useState, useEffect, useRef, useCallback, useMemo } = React

// ------------------------------------------------------------------ helpers
function qs(params) {
  const parts = []
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
  }
  return parts.length ? `?${parts.join('&')}` : ''
}

function short(id, n = 12) {
  return id ? String(id).slice(0, n) : '—'
}

function ago(seconds) {
  if (!seconds) return ''
  const d = Math.max(0, Date.now() / 1000 - seconds)
  if (d < 60) return `${Math.round(d)}s ago`
  if (d < 3600) return `${Math.round(d / 60)}m ago`
  if (d < 86400) return `${Math.round(d / 3600)}h ago`
  return `${Math.round(d / 86400)}d ago`
}

function parseJsonTail(text) {
  const at = text.indexOf('{')
  if (at < 0) return null
  try {
    return JSON.parse(text.slice(at))
  } catch {
    return null
  }
}

/** Normalise whatever the host's rest door throws into {status, code, message, body, envelope}.
 *  `envelope`: the body is chronos-git's own {"status": "error", ...} (not a route the host
 *  or FastAPI answered for it). */
export function toApiError(err) {
  if (err && err.isChronosError) return err
  const e = err || {}
  let status = Number(e.status || e.statusCode || (e.response && e.response.status) || 0)
  let body = e.body || e.data || (e.response && (e.response.data || e.response.body)) || e.payload || null
  if (typeof body === 'string') body = parseJsonTail(body)
  const text = String(e.message || e)
  if (!body) body = parseJsonTail(text)
  if (!status) {
    // "409: {...}", or through Electron's IPC "Error invoking remote method 'hermes:api': Error: 409: {...}"
    const m = /(?:^|\s)([45]\d\d):/.exec(text) || /\b([45]\d\d)\b/.exec(text)
    if (m) status = Number(m[1])
  }
  const envelope = !!(body && body.status === 'error')
  if (body && body.detail !== undefined && !body.error) {
    body = { status: 'error', error: String(Array.isArray(body.detail) ? body.detail.map(d => d.msg).join('; ') : body.detail) }
  }
  const code = (body && typeof body.error === 'string' && body.error) || ''
  let message = code || text.replace(/^Error invoking remote method '[^']*': (?:Error: )?/, '')
  if (body && body.message && body.message !== message) message = `${message}: ${body.message}`
  return { isChronosError: true, status, code: code || 'error', message, body: body || {}, envelope }
}

/** The profile has no chronos-git API: a 404 that is not chronos-git's own answer, or the
 *  host's "Expected JSON ... got HTML ... endpoint is likely missing". */
export function missingApi(err) {
  const e = toApiError(err)
  return (e.status === 404 && !e.envelope) || /got HTML|endpoint is likely missing/i.test(e.message)
}

function api(ctx, path, opts) {
  // only what the host's rest door forwards: method, body, timeoutMs (headers would be dropped).
  // Every POST has a JSON body, even an empty one (the API refuses anything else), and may run long.
  const o = opts && opts.method && opts.method !== 'GET'
    ? { method: opts.method, body: opts.body || {}, timeoutMs: opts.timeoutMs || LONG_MS }
    : opts
  return Promise.resolve()
    .then(() => ctx.rest(path, o))
    .then(data => {
      if (data && data.status === 'error') throw toApiError({ status: 200, body: data })
      return data
    }, err => {
      throw toApiError(err)
    })
}

/** ctx.setInterval / ctx.setTimeout when the host has them (auto-disposed with the
 *  plugin), else the globals; always returns a disposer. */
function every(ctx, fn, ms) {
  if (typeof ctx.setInterval === 'function') {
    const d = ctx.setInterval(fn, ms)
    return typeof d === 'function' ? d : () => clearInterval(d)
  }
  const id = setInterval(fn, ms)
  if (typeof ctx.onDispose === 'function') ctx.onDispose(() => clearInterval(id))
  return () => clearInterval(id)
}

function later(ctx, fn, ms) {
  if (typeof ctx.setTimeout === 'function') {
    const d = ctx.setTimeout(fn, ms)
    return typeof d === 'function' ? d : () => clearTimeout(d)
  }
  const id = setTimeout(fn, ms)
  return () => clearTimeout(id)
}

/** A host.state atom (nanostores: get / listen / subscribe), when the host has it. */
function hostAtom(name) {
  const host = SDK.host
  const atom = host && host.state && host.state[name]
  return atom && typeof atom.get === 'function' ? atom : null
}

const HAS_USE_VALUE = typeof SDK.useValue === 'function'

function useHostValue(name) {
  const atom = hostAtom(name)
  // HAS_USE_VALUE is fixed for the module's life, so the hook order is stable
  if (HAS_USE_VALUE) return atom ? SDK.useValue(atom) : null
  const [value, setValue] = useState(() => (atom ? atom.get() : null))
  useEffect(() => {
    if (!atom) return undefined
    const sub = atom.listen || atom.subscribe
    if (typeof sub !== 'function') return undefined
    const off = sub.call(atom, v => setValue(v === undefined ? atom.get() : v))
    return typeof off === 'function' ? off : undefined
  }, [atom])
  return value
}

/** Reopen the pane (a closed plugin pane stays closed, also across re-enabling the
 *  plugin): the host's pane door when it has one, else say where it is. */
export function openPane(ctx, render) {
  const host = SDK.host || {}
  const id = `${PLUGIN_ID}:${PANE_ID}`
  try {
    if (host.panes && typeof host.panes.setOpen === 'function') { host.panes.setOpen(id, true); return 'panes.setOpen' }
    if (typeof host.revealPane === 'function') { host.revealPane(id); return 'revealPane' }
    if (typeof host.openWorkspace === 'function') {
      host.openWorkspace(PLUGIN_ID, { title: 'chronos', render })
      return 'openWorkspace'
    }
  } catch (e) {
    // fall through to the notice
  }
  const say = typeof host.notify === 'function' ? host.notify : null
  if (say) say({ kind: 'info', message: 'The chronos pane is in the right-hand panes (View → panes); this Desktop has no door to reopen it.' })
  return 'notify'
}

/** The request fields naming workspace `root`: its exact bytes when they are not UTF-8. */
export function wsArgs(workspaces, root) {
  const w = (workspaces || []).find(x => x.root === root)
  return w && w.root_b64 ? { workspace_b64: w.root_b64 } : { workspace: root }
}

/** The workspace containing `cwd` (deepest root), or null. */
export function workspaceForCwd(workspaces, cwd) {
  if (!cwd) return null
  const norm = String(cwd).replace(/\/+$/, '')
  let best = null
  for (const w of workspaces || []) {
    const root = String(w.root).replace(/\/+$/, '')
    if ((norm === root || norm.startsWith(`${root}/`)) && (!best || root.length > best.length)) best = root
  }
  return best
}

/** The roles of a checkpoint: `roles` when the answer carries it (tested with `in`, so an
 *  answer without it is not read for it), else its own `role`. */
export function rolesOf(c) {
  if (c && 'roles' in c && Array.isArray(c.roles) && c.roles.length) return c.roles
  return c && c.role ? [c.role] : []
}

const parentOf = c => (Array.isArray(c.parents) && c.parents.length ? c.parents[0] : null)

/** The timeline of `list` (newest first, as GET /checkpoints?all=true lists it): the line
 *  the workspace is on (from the newest checkpoint back through each parent), the branch
 *  points (a parent of two), a lane per line (0: the current line; each line left behind
 *  by a restore the next, newest first) and each lane's extent in rows. */
export function timelineTree(list) {
  const byId = new Map(list.map(c => [c.id, c]))
  const row = new Map(list.map((c, i) => [c.id, i]))
  const onLine = new Set()
  for (let c = list[0]; c && !onLine.has(c.id); c = byId.get(parentOf(c))) onLine.add(c.id)
  const kids = new Map()
  for (const c of list) {
    const p = parentOf(c)
    if (p) kids.set(p, (kids.get(p) || 0) + 1)
  }
  const branchPoints = new Set([...kids].filter(([, n]) => n > 1).map(([id]) => id))
  const lane = new Map()
  for (const id of onLine) lane.set(id, 0)
  const spans = [[0, 0]]
  for (const [id] of lane) spans[0][1] = Math.max(spans[0][1], row.get(id))
  for (const c of list) {
    if (lane.has(c.id)) continue
    const l = spans.length
    let end = row.get(c.id)
    let x = c
    while (x && !lane.has(x.id)) {
      lane.set(x.id, l)
      end = row.get(x.id)
      const p = byId.get(parentOf(x))
      if (p && lane.has(p.id)) end = row.get(p.id)          // joins its branch point
      x = p
    }
    spans.push([row.get(c.id), end])
  }
  return { onLine, branchPoints, lane, spans, byId }
}

// every action a plan can hold (the engine's, not a guess)
const ACTION_HELP = {
  restore: "rewritten to the checkpoint's content", create: 'created from the checkpoint',
  delete: 'removed: not in the checkpoint', skip: 'left untouched',
  keep: 'left untouched: not captured by the safety checkpoint (ignored, too large or special)',
  failed: 'could not be written',
  conflict: "left exactly as it is: the agent's change and a later one overlap",
  merge: "the agent's change taken back, hunk by hunk; later edits in the file stay"
}
const ROLE_LABEL = {
  baseline: 'baseline', before_call: 'before call', after_call: 'after call', turn_start: 'turn start',
  safety: 'safety', manual: 'manual', restored: 'restored', boundary: 'boundary'
}

// in a merging operation (agent-only restore, revert, undo, redo) a file that keeps later
// changes is `merged` (a three-way merge); the others go back to what they were
const shownAction = (res, it) => (res.kind && it.action === 'restore' && it.merged ? 'merge' : it.action)

function actionCounts(res) {
  const n = {}
  for (const i of res.plan || []) {
    const a = shownAction(res, i)
    n[a] = (n[a] || 0) + 1
  }
  return Object.entries(n).map(([a, k]) => `${k} ${a}`).join(' · ')
}

const failedOf = r => (r.plan || []).filter(i => i.action === 'failed')
const conflictsOf = r => (r.plan || []).filter(i => i.action === 'conflict')
// a RestoreResult's `target` (CheckpointInfo): "abcdef12 “description”"
const targetText = r => (r.target ? `${r.target.short_id}${r.target.description ? ` “${r.target.description}”` : ''}`
  : short(r.restored_checkpoint, 12))
const keptText = r => `${r.kept} kept as they are: not captured by the safety checkpoint`
const PROTECTION_TONE = { on: 'ok', ready: undefined, degraded: 'warn', off: 'bad' }

// the time-machine operations: route, the button's words, the result's word
const OPS = {
  restore: { route: '/restore', name: 'Restore', verb: 'Restore…', confirm: 'Confirm restore', done: 'Restored', dry: 'Dry run' },
  agent_only: { route: '/restore', name: 'Agent-only restore', verb: 'Agent-only…', confirm: 'Confirm agent-only', done: 'Agent-only restore done',
                dry: 'Agent-only dry run' },
  revert: { route: '/revert', name: 'Revert', verb: 'Revert…', confirm: 'Confirm revert', done: 'Reverted', dry: 'Revert dry run' },
  undo: { route: '/undo', name: 'Undo', verb: 'Undo…', confirm: 'Confirm undo', done: 'Undone', dry: 'Undo dry run' },
  redo: { route: '/redo', name: 'Redo', verb: 'Redo…', confirm: 'Confirm redo', done: 'Redone', dry: 'Redo dry run' }
}
// ------------------------------------------------------------------- styles
const V = (name, fallback) => `var(--ui-${name}, ${fallback})`
const S = {
  pane: { display: 'flex', flexDirection: 'column', gap: 10, padding: 10, height: '100%', overflowY: 'auto',
          fontSize: 12, color: V('text-primary', 'inherit') },
  row: { display: 'flex', gap: 6, alignItems: 'center', flexWrap: 'wrap' },
  muted: { color: V('text-tertiary', '#888'), fontSize: 11 },
  mono: { fontFamily: 'ui-monospace, SFMono-Regular, Menlo, monospace', fontSize: 11 },
  section: { display: 'flex', flexDirection: 'column', gap: 6, paddingTop: 8, borderTop: `1px solid ${V('border', 'rgba(127,127,127,0.25)')}` },
  h: { fontWeight: 600, fontSize: 12 },
  item: { display: 'flex', flexDirection: 'column', gap: 1, padding: '4px 6px', textAlign: 'left', cursor: 'pointer',
          background: 'transparent', color: 'inherit', border: 'none', borderLeft: '2px solid transparent', width: '100%' },
  itemSel: { borderLeft: `2px solid ${V('accent', 'currentColor')}`, background: V('bg-hover', 'rgba(127,127,127,0.12)') },
  btn: { padding: '3px 8px', fontSize: 11, cursor: 'pointer', borderRadius: 4, color: 'inherit',
         border: `1px solid ${V('border', 'rgba(127,127,127,0.4)')}`, background: V('bg-secondary', 'transparent') },
  danger: { border: '1px solid rgba(220,70,70,0.8)', background: 'rgba(220,70,70,0.18)' },
  pre: { fontFamily: 'ui-monospace, SFMono-Regular, Menlo, monospace', fontSize: 11, whiteSpace: 'pre', overflow: 'auto',
         maxHeight: 260, margin: 0, padding: 6, background: V('bg-secondary', 'rgba(127,127,127,0.08)') },
  error: { border: '1px solid rgba(220,70,70,0.7)', background: 'rgba(220,70,70,0.12)', padding: 6 },
  notice: { border: '1px solid rgba(230,170,40,0.7)', background: 'rgba(230,170,40,0.12)', padding: 6 },
  ok: { border: '1px solid rgba(60,170,90,0.7)', background: 'rgba(60,170,90,0.12)', padding: 6 },
  badge: { display: 'inline-block', padding: '0 5px', borderRadius: 3, fontSize: 10,
           border: `1px solid ${V('border', 'rgba(127,127,127,0.4)')}` }
}
const TONE = { ok: 'rgb(60,170,90)', bad: 'rgb(220,70,70)', warn: 'rgb(210,150,30)' }

function Badge({ tone, testid, children }) {
  const style = tone ? { ...S.badge, color: TONE[tone], borderColor: TONE[tone] } : S.badge
  return jsx('span', { style, 'data-testid': testid, children })
}

function Btn({ testid, onClick, disabled, danger, children, type, dataKey }) {
  return jsx('button', {
    type: type || 'button', 'data-testid': testid, 'data-key': dataKey, disabled: !!disabled, onClick,
    style: { ...S.btn, ...(danger ? S.danger : null), ...(disabled ? { opacity: 0.5, cursor: 'default' } : null) },
    children
  })
}

function Patch({ text }) {
  if (!text) return jsx('div', { style: S.muted, 'data-testid': 'diff-empty', children: 'No textual changes.' })
  return jsx('pre', {
    style: S.pre, 'data-testid': 'diff-patch',
    children: text.split('\n').map((ln, i) => {
      let color
      if (/^(\+\+\+|---|diff --git|index )/.test(ln)) color = V('text-tertiary', '#888')
      else if (ln[0] === '+') color = 'rgb(70,180,100)'
      else if (ln[0] === '-') color = 'rgb(225,90,90)'
      else if (ln.startsWith('@@')) color = 'rgb(90,150,230)'
      return jsx('div', { style: color ? { color } : undefined, children: ln || ' ' }, i)
    })
  })
}

// ---------------------------------------------------------------- sections
function ErrorBox({ error, onDismiss }) {
  if (!error) return null
  const blocked = error.code === 'chronos_blocked'
  return jsxs('div', {
    role: 'alert', style: S.error, 'data-testid': 'chronos-error', 'data-code': error.code,
    children: [
      jsx('div', { children: `${error.context || 'Request'} failed${error.status ? ` (HTTP ${error.status})` : ''}: ` +
        (blocked ? 'the recovery gate is closed — resolve the unresolved operations below first.' : error.message) }),
      blocked && error.body && error.body.message ? jsx('div', { style: S.muted, children: error.body.message }) : null,
      jsx(Btn, { testid: 'chronos-error-dismiss', onClick: onDismiss, children: 'Dismiss' })
    ]
  })
}

function ResolveForm({ ctx, op, onDone }) {
  const [outcome, setOutcome] = useState('completed')
  const [evidence, setEvidence] = useState('')
  const [err, setErr] = useState(null)
  const [busy, setBusy] = useState(false)
  const submit = e => {
    if (e && e.preventDefault) e.preventDefault()
    if (!evidence.trim()) {
      setErr('Evidence is required: what shows the outcome?')
      return
    }
    setBusy(true)
    setErr(null)
    api(ctx, '/journal/resolve', { method: 'POST', body: { operation_id: op.operation_id, outcome, evidence: evidence.trim() } })
      .then(res => {
        setEvidence('')
        onDone(res)
      }, e2 => setErr(e2.message))
      .then(() => setBusy(false))
  }
  return jsxs('form', {
    onSubmit: submit, 'data-testid': 'resolve-form', style: { ...S.row, marginTop: 4 },
    children: [
      jsxs('select', {
        'data-testid': 'resolve-outcome', value: outcome, onChange: e => setOutcome(e.target.value),
        children: [jsx('option', { value: 'completed', children: 'completed' }, 'c'),
                   jsx('option', { value: 'not_applied', children: 'not_applied' }, 'n')]
      }),
      jsx('input', {
        'data-testid': 'resolve-evidence', value: evidence, placeholder: 'evidence (required)',
        onChange: e => setEvidence(e.target.value), style: { flex: 1, minWidth: 120 }
      }),
      jsx(Btn, { type: 'submit', testid: 'resolve-submit', disabled: busy || !evidence.trim(), children: 'Resolve' }),
      err ? jsx('div', { style: { ...S.mono, color: TONE.bad, width: '100%' }, 'data-testid': 'resolve-error', children: err }) : null
    ]
  })
}

function ProtectionBanner({ protection: p }) {
  if (!p || (p.state !== 'off' && p.state !== 'degraded')) return null
  return jsxs('div', {
    role: 'alert', 'data-testid': 'protection-banner', 'data-state': p.state, style: p.state === 'off' ? S.error : S.notice,
    children: [
      jsxs('div', { children: [jsx('b', { children: `Protection ${p.state.toUpperCase()}: ` }),
                               jsx('span', { 'data-testid': 'protection-reason', children: p.reason || 'no reason given' })] }),
      p.fix ? jsxs('div', { children: ['Fix: ', jsx('span', { style: S.mono, 'data-testid': 'protection-fix', children: p.fix })] }) : null
    ]
  })
}

function Journal({ ctx, status, events, verify, verifying, onVerify, onResolved, opButton }) {
  if (!status) return jsx('div', { style: S.muted, children: 'Loading journal…' })
  const unresolved = status.unresolved || []
  const settled = status.settled_at_start || []
  return jsxs('div', {
    style: S.section, 'data-testid': 'journal-panel',
    children: [
      jsxs('div', { style: S.row, children: [
        jsx('span', { style: S.h, children: 'Journal' }),
        jsx(Badge, { tone: status.integrity === 'ok' ? 'ok' : 'bad', testid: 'journal-integrity', children: status.integrity }),
        jsx(Badge, { tone: status.gate === 'open' ? 'ok' : 'bad', testid: 'journal-gate', children: `gate ${status.gate}` }),
        jsx('span', { style: S.muted, children: `${status.events} events` }),
        jsx(Btn, { testid: 'verify-button', onClick: onVerify, disabled: verifying, children: verifying ? 'Verifying…' : 'Verify' })
      ] }),
      verify ? jsx('div', {
        'data-testid': 'verify-result', 'data-integrity': verify.integrity, style: verify.integrity === 'ok' ? S.ok : S.error,
        children: verify.integrity === 'ok'
          ? `Verified ${verify.events} events: chain intact.`
          : `Verification failed: ${verify.integrity}`
      }) : null,
      jsxs('div', { 'data-testid': 'journal-unresolved', 'data-count': unresolved.length, children: [
        jsx('div', { style: S.h, children: `Unresolved (${unresolved.length})` }),
        ...unresolved.map(op => jsxs('div', {
          'data-testid': 'unresolved-op', 'data-operation-id': op.operation_id, style: { ...S.notice, marginTop: 4 },
          children: [
            jsx('div', { style: S.mono, children: `${short(op.operation_id, 12)} · ${op.tool} · ${op.state}` }),
            jsx('div', { style: S.muted, children: (op.workspace || '') + (op.pre_checkpoint ? ` · pre ${short(op.pre_checkpoint)}` : '') +
                                                   (op.reason ? ` · ${op.reason}` : '') }),
            jsx(ResolveForm, { ctx, op, onDone: onResolved })
          ]
        }, op.operation_id))
      ] }),
      settled.length ? jsxs('div', { 'data-testid': 'journal-settled', 'data-count': settled.length, children: [
        jsx('div', { style: S.h, children: `Settled by evidence at start (${settled.length})` }),
        ...settled.map(x => jsx('div', { style: S.mono, 'data-testid': 'settled-op', 'data-result': x.result,
          children: `${short(x.operation_id, 12)} ${x.tool || '?'} → ${x.result}${x.why ? ` (${x.why})` : ''}` }, x.operation_id))
      ] }) : null,
      jsx('div', { style: S.h, children: 'Recent events' }),
      jsx('div', { 'data-testid': 'journal-events', children: (events || []).map(e => jsxs('div', {
        'data-testid': 'journal-event', 'data-kind': e.kind, style: { ...S.row, ...S.mono },
        children: [
          jsx('span', { children: `#${e.seq}` }),
          jsx(Badge, { children: e.kind }),
          jsx('span', { children: e.operation_id ? short(e.operation_id, 10) : '' }),      // only what Event declares
          e.tool ? jsx('span', { 'data-testid': 'event-tool', children: e.tool }) : null,
          jsx('span', { style: S.muted, children: e.timestamp_ns ? ago(e.timestamp_ns / 1e9) : '' }),
          // a call's start: take back what it changed (a time-machine operation is undone, not reverted)
          e.kind === 'started' && e.operation_id && !String(e.tool || '').startsWith('chronos')
            ? opButton('revert', { operation: e.operation_id }, e.operation_id) : null
        ]
      }, e.id || e.seq)) })
    ]
  })
}

/** One row's gutter: the lanes' lines through this row and its own dot. */
function Gutter({ tree, i, c }) {
  const lanes = tree.spans.length
  const mine = tree.lane.get(c.id) || 0
  const on = tree.onLine.has(c.id)
  const parts = []
  tree.spans.forEach(([from, to], l) => {
    if (i < from || i > to || from === to) return
    const x = l * 12 + 5
    const line = { position: 'absolute', left: x, width: 2, background: l === 0 ? V('accent', 'rgb(90,150,230)') : 'rgba(127,127,127,0.55)' }
    if (i > from) parts.push(jsx('div', { style: { ...line, top: 0, height: 11 } }, `u${l}`))
    if (i < to) parts.push(jsx('div', { style: { ...line, top: 11, bottom: 0 } }, `d${l}`))
    if (l > 0 && i === to && tree.lane.get(c.id) === 0) {              // a line left behind joins its branch point
      parts.push(jsx('div', { style: { position: 'absolute', left: 6, width: l * 12, top: 10, height: 2,
                                       background: 'rgba(127,127,127,0.55)' } }, `j${l}`))
    }
  })
  parts.push(jsx('div', {
    'data-testid': 'tree-dot', 'data-lane': mine,
    style: { position: 'absolute', left: mine * 12 + 1, top: 6, width: 10, height: 10, borderRadius: 5, boxSizing: 'border-box',
             border: `2px solid ${mine === 0 ? V('accent', 'rgb(90,150,230)') : 'rgb(150,150,150)'}`,
             background: on ? V('accent', 'rgb(90,150,230)') : 'transparent' }
  }, 'dot'))
  return jsx('div', { style: { position: 'relative', alignSelf: 'stretch', flex: 'none', width: lanes * 12 + 2, minHeight: 22 },
                      children: parts })
}

function Tree({ list, tree, selected, scrubbed, onSelect }) {
  return jsx('div', {
    'data-testid': 'checkpoint-list', style: { maxHeight: 300, overflowY: 'auto' },
    children: list.map((c, i) => {
      const on = tree.onLine.has(c.id)
      const branch = tree.branchPoints.has(c.id)
      const back = c.restored_from ? tree.byId.get(c.restored_from) : null
      return jsxs('button', {
        type: 'button', 'data-testid': 'checkpoint-row', 'data-checkpoint-id': c.id, 'data-on-line': on ? 'true' : 'false',
        'data-lane': tree.lane.get(c.id) || 0, 'data-scrubbed': c.id === scrubbed ? 'true' : undefined,
        title: on ? undefined : "not on the line the workspace is on: a restore left it behind (it can still be restored)",
        style: { ...S.item, flexDirection: 'row', gap: 6, padding: '0 6px 0 2px', ...(c.id === selected ? S.itemSel : null),
                 ...(on ? null : { opacity: 0.5 }) },
        onClick: () => onSelect(c.id),
        children: [
          jsx(Gutter, { tree, i, c }),
          jsxs('div', { style: { display: 'flex', flexDirection: 'column', gap: 1, padding: '3px 0', minWidth: 0 }, children: [
            jsxs('div', { style: S.row, children: [
              jsx('span', { style: { ...S.mono, fontWeight: 600 }, 'data-testid': 'checkpoint-number',
                            children: c.number !== null && c.number !== undefined ? `@${c.number}` : short(c.id, 8) }),
              jsx('span', { style: { ...S.mono, ...S.muted }, 'data-testid': 'checkpoint-id', children: c.short_id || short(c.id) }),
              ...rolesOf(c).map(r => jsx(Badge, { tone: r === 'safety' ? 'warn' : undefined, testid: 'checkpoint-role',
                                                  children: ROLE_LABEL[r] || r }, r)),
              rolesOf(c).length ? null : jsx(Badge, { children: c.kind }),
              branch ? jsx(Badge, { tone: 'warn', testid: 'branch-point', children: '⋔ branch point' }) : null,
              c.restored_from ? jsx('span', { style: S.muted, 'data-testid': 'restore-origin',
                children: `↩ restored ${back && back.number !== null && back.number !== undefined ? `@${back.number}` : short(c.restored_from, 8)}` }) : null,
              c.tool ? jsx('span', { style: S.mono, children: c.tool }) : null,
              (c.skipped || []).length ? jsx(Badge, { tone: 'warn', testid: 'checkpoint-skipped', children: `${c.skipped.length} skipped` }) : null
            ] }),
            jsx('div', { children: c.description }),
            jsx('div', { style: S.muted, children: ago(c.time) + (c.tool_call_id ? ` · ${c.tool_call_id}` : '') })
          ] })
        ]
      }, c.id)
    })
  })
}

/** A dry run's plan: what each path gets, conflicts with what the agent and the person did. */
function PlanView({ plan, armed }) {
  const res = plan.res
  const op = OPS[plan.op]
  const conflicts = conflictsOf(res)
  return jsxs('div', { 'data-testid': 'restore-plan', 'data-op': plan.op, style: armed ? S.notice : S.muted, children: [
    jsx('div', { 'data-testid': 'restore-plan-summary',
                 children: `${plan.undo ? 'Undo' : op.dry}: ${actionCounts(res) || 'no changes'}` }),
    jsx('div', { style: S.muted, 'data-testid': 'restore-plan-target',
                 children: res.kind ? `${res.kind}${(res.calls || []).length ? `: takes back ${res.calls.length} call(s)` : ''} · to ${targetText(res)}`
                   : `to ${targetText(res)}` }),
    res.kept ? jsx('div', { style: S.muted, 'data-testid': 'restore-plan-kept', children: keptText(res) }) : null,
    conflicts.length ? jsx('div', { 'data-testid': 'restore-plan-conflicts', style: { ...S.error, padding: 4 },
      children: `${conflicts.length} conflict(s): left exactly as they are` }) : null,
    ...(res.plan || []).map(it => {
      const a = shownAction(res, it)
      return jsxs('div', {
        style: S.mono, 'data-testid': 'restore-plan-item', 'data-action': it.action, title: ACTION_HELP[a] || '',
        children: [
          jsx('div', { children: `${a} ${it.path}${it.reason && it.action !== 'conflict' ? ` (${it.reason})` : ''}` }),
          it.agent ? jsx('div', { style: { ...S.muted, paddingLeft: 10 }, 'data-testid': 'conflict-agent', children: `agent: ${it.agent}` }) : null,
          it.person ? jsx('div', { style: { ...S.muted, paddingLeft: 10 }, 'data-testid': 'conflict-person', children: `later: ${it.person}` }) : null
        ]
      }, `${it.action}:${it.path_b64 || it.path}`)
    }),
    res.note ? jsx('div', { style: S.muted, 'data-testid': 'restore-plan-note', children: res.note }) : null
  ] })
}

// --------------------------------------------------------------------- pane
export function ChronosPane({ ctx }) {
  const cwd = useHostValue('cwd')
  const profile = useHostValue('profile')
  const [workspaces, setWorkspaces] = useState([])
  const [ws, setWs] = useState(null)
  const [follow, setFollow] = useState(true)           // follow the session cwd
  const [checkpoints, setCheckpoints] = useState(null)
  const [selected, setSelected] = useState(null)
  const [scrubbing, setScrubbing] = useState(false)     // a scrub's diff is waiting for the scrub to rest
  const [mode, setMode] = useState('changes')
  const [detail, setDetail] = useState(null)
  const [plan, setPlan] = useState(null)
  const [armed, setArmed] = useState(false)
  const [busy, setBusy] = useState(false)
  const [result, setResult] = useState(null)
  const [jstatus, setJstatus] = useState(null)
  const [events, setEvents] = useState([])
  const [verify, setVerify] = useState(null)
  const [verifying, setVerifying] = useState(false)
  const [error, setError] = useState(null)
  const [offProtection, setOffProtection] = useState(null)   // from /health when the API did not load
  const [missing, setMissing] = useState(null)               // this profile has no chronos-git API

  const wsRef = useRef(null)
  wsRef.current = ws
  const listRef = useRef([])
  listRef.current = workspaces
  const followRef = useRef(true)
  followRef.current = follow
  const cwdRef = useRef(cwd)
  cwdRef.current = cwd
  const disarmRef = useRef(null)
  const detailSeq = useRef(0)
  const scrubRef = useRef(false)          // the next detail load comes from a scrub: debounce it
  const scrubTimer = useRef(null)
  const alive = useRef(true)
  useEffect(() => () => { alive.current = false }, [])

  const fail = useCallback(context => e => {
    if (alive.current) setError({ ...toApiError(e), context })
  }, [])

  const refresh = useCallback(() => {
    return api(ctx, '/workspaces').then(r => {
      const list = r.workspaces || []
      if (!alive.current) return null
      listRef.current = list
      setWorkspaces(list)
      setMissing(null)
      let root = wsRef.current
      if (root && !list.some(w => w.root === root)) root = null         // gone, or another profile's
      const fromCwd = followRef.current ? workspaceForCwd(list, cwdRef.current) : null
      if (fromCwd) root = fromCwd
      else if (!root && list.length) root = list[0].root
      if (root !== wsRef.current) {
        wsRef.current = root
        setWs(root)
      }
      setError(cur => (cur && cur.context === 'Refresh' ? null : cur))   // polling works again
      setOffProtection(null)
      return Promise.all([
        root ? api(ctx, `/checkpoints${qs({ ...wsArgs(list, root), all: 'true', limit: CHECKPOINT_LIMIT })}`)
          .then(c => { if (alive.current && wsRef.current === root) setCheckpoints(c.checkpoints || []) }) : null,
        api(ctx, '/journal/status').then(s => { if (alive.current) setJstatus(s) }),
        api(ctx, `/journal/log${qs({ limit: EVENT_LIMIT })}`).then(l => { if (alive.current) setEvents(l.events || []) })
      ])
    }).catch(e => {
      // never silently off: when the API did not load, its /health still says why (503); when
      // /health is not chronos-git's either, this profile's backend has no chronos-git at all
      return api(ctx, '/health').then(h => ({ p: h.protection }), e2 => {
        const x = toApiError(e2)
        return missingApi(x) && missingApi(e) ? { missing: true } : { p: x.body.protection || null }
      }).then(({ p, missing: gone }) => {
        if (!alive.current) return
        if (gone) {
          setMissing(toApiError(e))
          setOffProtection(null)
          setError(cur => (cur && cur.context === 'Refresh' ? null : cur))
          return
        }
        setMissing(null)
        fail('Refresh')(e)
        setOffProtection(p)
      })
    })
  }, [ctx, fail])

  // first load, then poll
  useEffect(() => every(ctx, refresh, POLL_MS), [ctx, refresh])
  // ... and again whenever the session cwd, the profile or the follow mode changes
  useEffect(() => { refresh() }, [refresh, cwd, profile, follow])

  // the diff of the selected checkpoint
  const loadDetail = useCallback(() => {
    if (!selected || !ws) {
      setDetail(null)
      return
    }
    const seq = ++detailSeq.current
    // a diff against the working tree reads the whole workspace: give it longer than the host's default
    const req = mode === 'changes'
      ? api(ctx, `/checkpoints/${encodeURIComponent(selected)}${qs(wsArgs(listRef.current, ws))}`, { timeoutMs: DIFF_MS })
      : api(ctx, `/diff${qs({ ...wsArgs(listRef.current, ws), from: selected })}`, { timeoutMs: DIFF_MS })
    req.then(r => { if (alive.current && seq === detailSeq.current) setDetail({ mode, id: selected, res: r }) },
             e => { if (seq === detailSeq.current) fail('Loading the diff')(e) })
  }, [ctx, selected, mode, ws, fail])
  useEffect(() => {
    if (scrubTimer.current) scrubTimer.current()
    scrubTimer.current = null
    if (!scrubRef.current) {
      loadDetail()
      return
    }
    // scrubbing: each checkpoint is named as it is passed; its diff loads once the scrub rests
    scrubRef.current = false
    setScrubbing(true)
    scrubTimer.current = later(ctx, () => {
      scrubTimer.current = null
      if (!alive.current) return
      setScrubbing(false)
      loadDetail()
    }, SCRUB_MS)
  }, [loadDetail])  // eslint-disable-line react-hooks/exhaustive-deps
  useEffect(() => () => { if (scrubTimer.current) scrubTimer.current() }, [])

  const disarm = () => {
    if (disarmRef.current) disarmRef.current()
    disarmRef.current = null
    setArmed(false)
  }
  useEffect(() => () => { if (disarmRef.current) disarmRef.current() }, [])
  // another workspace: its checkpoints are other ids
  useEffect(() => {
    setSelected(null)
    setPlan(null)
    setDetail(null)
    disarm()
  }, [ws])  // eslint-disable-line react-hooks/exhaustive-deps

  const select = (id, fromScrub) => {
    if (id !== selected) {
      disarm()
      setPlan(null)
      scrubRef.current = !!fromScrub
    }
    setSelected(id)
  }

  const chooseWorkspace = root => {
    followRef.current = false
    setFollow(false)
    wsRef.current = root
    setWs(root)
    setResult(null)
    setCheckpoints(null)
    refresh()
  }

  // show a plan and arm the confirm for ARM_MS
  const arm = p => {
    setPlan(p)
    setArmed(true)
    if (disarmRef.current) disarmRef.current()
    disarmRef.current = later(ctx, () => { disarmRef.current = null; if (alive.current) setArmed(false) }, ARM_MS)
  }

  // first click: the dry run, which arms the confirm for ARM_MS
  const preview = (op, request, extra) => {
    setBusy(true)
    api(ctx, OPS[op].route, { method: 'POST', body: { ...request, dry_run: true } })
      .then(res => {
        if (!alive.current) return
        arm({ op, request, res, ...extra })
      }, fail(`${extra && extra.undo ? 'Undo' : OPS[op].name} preview`))
      .then(() => { if (alive.current) setBusy(false) })
  }

  // second click: the dry run's request again, with its plan_token (a restore names the full checkpoint id)
  const confirm = p => {
    setBusy(true)
    const body = { ...p.request, dry_run: false, plan_token: p.res.plan_token }
    if (p.op === 'restore' || p.op === 'agent_only') body.checkpoint = p.res.restored_checkpoint
    const context = p.undo ? 'Undo' : OPS[p.op].name
    return api(ctx, OPS[p.op].route, { method: 'POST', body })
      .then(r => {
        if (!alive.current) return
        setResult({ res: r, op: p.op, undo: p.undo })
        setPlan(null)
        setError(null)
        refresh()
        loadDetail()
      }, e => {
        const err = toApiError(e)
        // an incomplete operation (HTTP 409) is still a RestoreResult: show what failed, offer undo
        if (alive.current && err.body.safety_checkpoint && err.body.plan) {
          setResult({ res: err.body, op: p.op, undo: p.undo })
          setPlan(null)
          refresh()
        }
        // the workspace changed since the preview (HTTP 409, nothing done): the new plan, armed
        if (alive.current && err.body.code === 'plan_changed' && err.body.plan_token) arm({ ...p, res: err.body })
        fail(context)(err)
      })
      .then(() => { if (alive.current) setBusy(false) })
  }

  const isArmed = (op, key) => armed && plan && plan.op === op && plan.key === key

  // one button per operation: the first click previews, the second (within ARM_MS) confirms
  const onOp = (op, request, key, extra) => {
    if (busy) return
    if (isArmed(op, key)) {
      disarm()
      confirm(plan)
      return
    }
    disarm()
    setPlan(null)
    preview(op, request, { key, ...extra })
  }

  const opButton = (op, request, key) => jsx(Btn, {
    testid: `op-${op}`, dataKey: key, danger: isArmed(op, key), disabled: busy,
    onClick: () => onOp(op, { ...request, ...wsArgs(listRef.current, ws) }, key),
    children: isArmed(op, key) ? OPS[op].confirm : OPS[op].verb
  }, `${op}:${key}`)

  const onRestoreClick = () => {
    if (!selected) return
    onOp('restore', { checkpoint: selected, ...wsArgs(listRef.current, ws) }, selected, { selected })
  }

  const onAgentOnlyClick = () => {
    if (!selected) return
    onOp('agent_only', { checkpoint: selected, ...wsArgs(listRef.current, ws), agent_only: true }, selected, { selected })
  }

  // undo a restore = restore its safety checkpoint, previewed and confirmed like any restore
  const onUndo = id => {
    disarm()
    setPlan(null)
    setSelected(id)
    preview('restore', { checkpoint: id, ...wsArgs(listRef.current, ws) }, { key: id, selected: id, undo: true })
  }

  const onVerify = () => {
    setVerifying(true)
    api(ctx, '/journal/verify', { method: 'POST', body: {} })
      .then(r => { if (alive.current) setVerify(r) },
            e => { const err = toApiError(e); if (err.body && err.body.integrity) setVerify(err.body); else fail('Verify')(err) })
      .then(() => { if (alive.current) setVerifying(false) })
  }

  // the timeline: newest first (as listed), and oldest first for the scrubber
  const list = checkpoints || []
  const tree = useMemo(() => timelineTree(list), [checkpoints])  // eslint-disable-line react-hooks/exhaustive-deps
  const chrono = useMemo(() => [...list].reverse(), [checkpoints])  // eslint-disable-line react-hooks/exhaustive-deps
  const selIndex = chrono.findIndex(c => c.id === selected)
  const scrubIndex = selIndex >= 0 ? selIndex : chrono.length - 1
  const scrubTo = i => {
    const c = chrono[Math.max(0, Math.min(chrono.length - 1, i))]
    if (c) select(c.id, true)
  }
  const onScrubKey = e => {
    const step = { ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1, PageDown: -10, PageUp: 10 }[e.key]
    let to = null
    if (step) to = scrubIndex + step
    else if (e.key === 'Home') to = 0
    else if (e.key === 'End') to = chrono.length - 1
    if (to === null) return
    if (e.preventDefault) e.preventDefault()          // the slider does not step a second time
    scrubTo(to)
  }
  const scrubbed = chrono[scrubIndex]

  // detail: {mode, id, res}: a ShowResult ("changes") or a DiffResult ("worktree") of checkpoint `id`
  // (never the previous checkpoint's diff under this one's name, e.g. while a scrub is moving)
  const shown = detail && detail.mode === mode && detail.id === selected ? detail.res : null
  const cp = list.find(c => c.id === selected) ||
    (shown && mode === 'changes' && shown.checkpoint.id === selected ? shown.checkpoint : null)
  const diff = shown && (mode === 'changes' ? shown.changes : shown)
  const protection = offProtection || (jstatus && jstatus.protection) || null
  const res = result && result.res
  const following = follow && cwd && workspaceForCwd(workspaces, cwd) === ws
  const cpPlan = plan && (plan.op === 'restore' || plan.op === 'agent_only') ? plan : null
  const opPlan = plan && !cpPlan ? plan : null
  const resultWord = result ? (res.failed ? 'Incomplete' : result.undo ? 'Undone' : OPS[result.op].done) : ''
  const label = c => `${c.number !== null && c.number !== undefined ? `@${c.number}` : short(c.id, 8)} ` +
    `${rolesOf(c).map(r => ROLE_LABEL[r] || r).join(', ') || c.kind} — ${c.description}`

  return jsxs('div', {
    style: S.pane, 'data-testid': 'chronos-pane',
    children: [
      jsxs('div', { style: { ...S.row, justifyContent: 'space-between' }, children: [
        jsx('span', { style: { ...S.h, fontSize: 13 }, children: 'Chronos' }),
        protection ? jsx(Badge, { tone: PROTECTION_TONE[protection.state], testid: 'header-protection',
                                  children: `protection ${protection.state === 'on' || protection.state === 'ready' ? protection.state : protection.state.toUpperCase()}` }) : null,
        jstatus ? jsx(Badge, { tone: jstatus.gate === 'open' ? 'ok' : 'bad', testid: 'header-gate', children: `gate ${jstatus.gate}` }) : null,
        jsx(Btn, { testid: 'refresh-button', onClick: () => refresh(), children: 'Refresh' })
      ] }),
      missing ? jsxs('div', { role: 'alert', style: S.notice, 'data-testid': 'not-installed', children: [
        jsx('div', { children: jsx('b', { children: `chronos-git is not enabled in ${profile ? `the profile “${profile}”` : 'this profile'}.` }) }),
        jsx('div', { children: 'Its backend answered that it has no chronos-git API (HTTP 404). Enable the plugin in that profile, then restart its backend:' }),
        jsx('div', { style: S.mono, children: `hermes${profile && profile !== 'default' ? ` --profile ${profile}` : ''} plugins enable chronos-git` }),
        jsx('div', { style: S.muted, children: `(${missing.message})` })
      ] }) : null,
      jsx(ProtectionBanner, { protection }),
      jsx(ErrorBox, { error, onDismiss: () => setError(null) }),
      res ? jsxs('div', { style: res.failed || res.conflicts ? S.notice : S.ok, 'data-testid': 'restore-result', 'data-op': result.op,
        children: [
          jsx('div', { children: `${resultWord}: now at ${targetText(res)} — ` +
            `${res.files_changed} written, ${res.untracked_removed} removed${res.failed ? `, ${res.failed} failed` : ''}` +
            `${res.conflicts ? `, ${res.conflicts} conflict(s) left as they are` : ''}.` }),
          res.kept ? jsx('div', { style: S.muted, 'data-testid': 'restore-kept', children: keptText(res) }) : null,
          ...failedOf(res).map(it => jsx('div', { style: S.mono, 'data-testid': 'restore-failed',
            children: `failed ${it.path}${it.reason ? ` (${it.reason})` : ''}` }, it.path_b64 || it.path)),
          ...conflictsOf(res).map(it => jsx('div', { style: S.mono, 'data-testid': 'restore-conflict',
            children: `conflict ${it.path}${it.person ? ` (later: ${it.person})` : ''}` }, it.path_b64 || it.path)),
          jsxs('div', { style: S.row, children: [
            jsx('span', { children: 'Safety checkpoint' }),
            jsx('span', { style: S.mono, 'data-testid': 'safety-checkpoint-id', 'data-checkpoint-id': res.safety_checkpoint || '',
                          children: short(res.safety_checkpoint, 12) }),
            res.safety_checkpoint && result.op === 'restore'
              ? jsx(Btn, { testid: 'undo-button', disabled: busy, onClick: () => onUndo(res.safety_checkpoint),
                           children: 'Undo' })
              : res.safety_checkpoint ? jsx('span', { style: S.muted, children: '(Undo… above takes it back)' }) : null
          ] })
        ] }) : null,
      jsxs('div', { style: S.row, children: [
        jsx('span', { style: S.muted, children: 'Workspace' }),
        workspaces.length
          ? jsx('select', {
              'data-testid': 'workspace-select', value: ws || '', style: { maxWidth: '100%' },
              onChange: e => chooseWorkspace(e.target.value),
              children: workspaces.map(w => jsx('option', { value: w.root, children: `${w.root} (${w.checkpoints})` }, w.root))
            })
          : jsx('span', { style: S.muted, 'data-testid': 'no-workspaces', children: 'no checkpoints yet' }),
        following ? jsx(Badge, { testid: 'follows-cwd', children: 'session cwd' }) : null,
        !follow && cwd ? jsx(Btn, { testid: 'follow-cwd', onClick: () => { followRef.current = true; setFollow(true) },
                                    children: 'Follow session cwd' }) : null
      ] }),
      jsxs('div', { style: S.section, children: [
        jsxs('div', { style: { ...S.row, justifyContent: 'space-between' }, children: [
          jsx('span', { style: S.h, children: `Timeline${checkpoints ? ` (${checkpoints.length})` : ''}` }),
          ws ? jsxs('span', { style: S.row, children: [opButton('undo', {}, 'undo'), opButton('redo', {}, 'redo')] }) : null
        ] }),
        opPlan ? jsx(PlanView, { plan: opPlan, armed }) : null,
        checkpoints === null ? jsx('div', { style: S.muted, children: 'Loading…' })
          : checkpoints.length === 0 ? jsx('div', { style: S.muted, 'data-testid': 'no-checkpoints', children: 'No checkpoints.' })
          : jsxs('div', { style: { display: 'flex', flexDirection: 'column', gap: 6 }, children: [
              chrono.length > 1 ? jsxs('div', { 'data-testid': 'scrubber', style: { display: 'flex', flexDirection: 'column', gap: 2 }, children: [
                jsx('input', {
                  type: 'range', 'data-testid': 'scrub', min: 0, max: chrono.length - 1, step: 1, value: scrubIndex,
                  'aria-label': 'scrub the timeline', style: { width: '100%' },
                  onChange: e => scrubTo(Number(e.target.value)), onKeyDown: onScrubKey
                }),
                jsxs('div', { style: { ...S.row, ...S.mono }, children: [
                  jsx('span', { 'data-testid': 'scrub-label', 'data-checkpoint-id': scrubbed ? scrubbed.id : '',
                                children: scrubbed ? label(scrubbed) : '' }),
                  scrubbing ? jsx('span', { style: S.muted, 'data-testid': 'scrub-pending', children: '· loading when you stop…' }) : null
                ] })
              ] }) : null,
              jsx(Tree, { list, tree, selected, scrubbed: selected ? scrubbed && scrubbed.id : null, onSelect: id => select(id, false) })
            ] })
      ] }),
      cp ? jsxs('div', { style: S.section, 'data-testid': 'checkpoint-detail', 'data-checkpoint-id': cp.id,
                         'data-on-line': tree.onLine.has(cp.id) ? 'true' : 'false', children: [
        jsx('div', { style: S.mono, children: `${cp.number !== null && cp.number !== undefined ? `@${cp.number} ` : ''}${cp.id}` }),
        tree.onLine.has(cp.id) ? null : jsx('div', { style: S.muted, 'data-testid': 'off-line-note',
          children: 'Not on the line the workspace is on: a restore left it behind. It can still be restored.' }),
        jsxs('div', { style: S.row, children: [
          jsx(Btn, { testid: 'diff-mode-changes', onClick: () => setMode('changes'), danger: false,
                     children: mode === 'changes' ? '● changes' : 'changes' }),
          jsx(Btn, { testid: 'diff-mode-worktree', onClick: () => setMode('worktree'),
                     children: mode === 'worktree' ? '● vs working tree' : 'vs working tree' })
        ] }),
        shown && mode === 'changes' && !shown.changes
          ? jsx('div', { style: S.muted, 'data-testid': 'diff-empty', children: 'First checkpoint: nothing earlier to compare with.' })
          : null,
        diff ? jsxs('div', { 'data-testid': 'diff-view', 'data-mode': mode, children: [
          jsx('div', { style: S.muted, children: (diff.files || []).map(f => `${f.status} ${f.path}`).join(', ') }),
          jsx(Patch, { text: diff.patch })
        ] }) : null,
        jsxs('div', { style: S.row, children: [
          jsx(Btn, { testid: 'restore-button', danger: isArmed('restore', selected), disabled: busy, onClick: onRestoreClick,
                     children: isArmed('restore', selected) ? 'Confirm restore' : 'Restore…' }),
          jsx(Btn, { testid: 'agent-only-button', danger: isArmed('agent_only', selected), disabled: busy, onClick: onAgentOnlyClick,
                     children: isArmed('agent_only', selected) ? OPS.agent_only.confirm : OPS.agent_only.verb }),
          armed && cpPlan ? jsx('span', { style: S.muted, 'data-testid': 'restore-armed', children: `click again within ${ARM_MS / 1000} s` }) : null
        ] }),
        cpPlan ? jsx(PlanView, { plan: cpPlan, armed }) : null
      ] }) : jsx('div', { style: S.muted, 'data-testid': 'checkpoint-detail-empty', children: 'Select a checkpoint to see its diff.' }),
      jsx(Journal, { ctx, status: jstatus, events, verify, verifying, onVerify, opButton,
                     onResolved: () => refresh() })
    ]
  })
}

function StatusItem({ ctx, render }) {
  return jsx('button', {
    type: 'button', 'data-testid': 'chronos-status-item', title: 'Open the chronos pane (checkpoints, restore, journal)',
    onClick: () => openPane(ctx, render),
    style: { background: 'transparent', border: 'none', color: 'inherit', cursor: 'pointer', fontSize: 11, padding: '0 6px' },
    children: '⟲ chronos'
  })
}

export default {
  id: PLUGIN_ID,
  name: 'Chronos',
  description: 'Checkpoints as a tree, diffs, two-click rollback (full or agent-only), undo/redo and the crash-safe journal of chronos-git',
  register(ctx) {
    const render = () => jsx(ChronosPane, { ctx })
    ctx.register({
      id: PANE_ID,
      area: PANES,
      title: 'chronos',
      data: { placement: 'right', width: '380px' },
      render
    })
    // a second way in: closing the only pane hides it for good (the host remembers it closed)
    if (SDK.PALETTE_AREA) {
      ctx.register({
        id: 'open',
        area: SDK.PALETTE_AREA,
        data: { id: `${PLUGIN_ID}.open`, label: 'Chronos: open the time machine pane',
                keywords: ['chronos', 'checkpoint', 'restore', 'rollback', 'undo', 'timeline', 'journal'],
                run: () => openPane(ctx, render) }
      })
    }
    if (SDK.STATUSBAR_AREAS && SDK.STATUSBAR_AREAS.right) {
      ctx.register({ id: 'status', area: SDK.STATUSBAR_AREAS.right, order: 130,
                     render: () => jsx(StatusItem, { ctx, render }) })
    }
  }
}
