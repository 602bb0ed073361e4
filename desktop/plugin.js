/*
 * chronos-git — Hermes Desktop pane (newer Desktop hosts, @hermes/plugin-sdk).
 *
 * One uncompiled ESM file: no JSX, no build step, and only the three
 * specifiers the Desktop loader resolves (the SDK, react, react/jsx-runtime).
 * The SDK is imported as a namespace so every member is feature-detected: a
 * host without `host.state.cwd`, `useValue` or `ctx.setInterval` still works.
 *
 * Backend: ctx.rest(path, {method, body}) -> /api/plugins/chronos-git<path>,
 * the same router the web dashboard tab uses (api/router.py).  Errors are
 * {"status": "error", "error": ..., "message"?: ...} envelopes with 4xx/5xx.
 * Every POST is JSON (the API answers 415 otherwise).  Names that are not
 * UTF-8 arrive as `path` + `path_b64`; requests send the `_b64` form then.
 *
 * Behaviour mirrors dashboard/dist/index.js: workspace (follows the session
 * cwd when it has checkpoints), checkpoint timeline, diff of the selected
 * checkpoint, restore with a dry-run preview and a two-click confirmation
 * (armed for 5 s; the confirm sends the dry run's request with its
 * `plan_token`), undo via the safety checkpoint (previewed and confirmed the
 * same way), and the journal: integrity,
 * gate, unresolved operations with a resolve form, recent events, verify.
 * Protection (`protection` of /journal/status, or /health when the API did
 * not load) is a badge when on and a banner with the reason and the fix when
 * OFF or DEGRADED.
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
const POLL_MS = 5000
const ARM_MS = 5000
const CHECKPOINT_LIMIT = 30
const EVENT_LIMIT = 10
const PANES = SDK.PANES_AREA || 'panes'

const { useState, useEffect, useRef, useCallback } = React

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

/** Normalise whatever the host's rest door throws into {status, code, message, body}. */
export function toApiError(err) {
  if (err && err.isChronosError) return err
  const e = err || {}
  let status = Number(e.status || e.statusCode || (e.response && e.response.status) || 0)
  let body = e.body || e.data || (e.response && (e.response.data || e.response.body)) || e.payload || null
  if (typeof body === 'string') body = parseJsonTail(body)
  const text = String(e.message || e)
  if (!body) body = parseJsonTail(text)
  if (!status) {
    const m = /\b([45]\d\d)\b/.exec(text)
    if (m) status = Number(m[1])
  }
  if (body && body.detail !== undefined && !body.error) {
    body = { status: 'error', error: String(Array.isArray(body.detail) ? body.detail.map(d => d.msg).join('; ') : body.detail) }
  }
  const code = (body && typeof body.error === 'string' && body.error) || ''
  let message = code || text
  if (body && body.message && body.message !== message) message = `${message}: ${body.message}`
  return { isChronosError: true, status, code: code || 'error', message, body: body || {} }
}

const JSON_HEADERS = { 'Content-Type': 'application/json' }

function api(ctx, path, opts) {
  // every POST is JSON, with a body even when it is empty (the API refuses anything else)
  const o = opts && opts.method && opts.method !== 'GET'
    ? { ...opts, body: opts.body || {}, headers: { ...JSON_HEADERS, ...(opts.headers || {}) } }
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

/** The session cwd from host.state.cwd (a nanostore atom), when the host has it. */
function cwdAtom() {
  const host = SDK.host
  const atom = host && host.state && host.state.cwd
  return atom && typeof atom.get === 'function' ? atom : null
}

const HAS_USE_VALUE = typeof SDK.useValue === 'function'

function useHostCwd() {
  const atom = cwdAtom()
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

// every action a restore plan can hold (the engine's, not a guess)
const ACTION_HELP = {
  restore: "rewritten to the checkpoint's content", create: 'created from the checkpoint',
  delete: 'removed: not in the checkpoint', skip: 'left untouched',
  keep: 'left untouched: not captured by the safety checkpoint (ignored, too large or special)',
  failed: 'could not be written'
}

function actionCounts(items) {
  const n = {}
  for (const i of items) n[i.action] = (n[i.action] || 0) + 1
  return Object.entries(n).map(([a, k]) => `${k} ${a}`).join(' · ')
}

const failedOf = r => (r.plan || []).filter(i => i.action === 'failed')
// a RestoreResult's `target` (CheckpointInfo): "abcdef12 “description”"
const targetText = r => (r.target ? `${r.target.short_id}${r.target.description ? ` “${r.target.description}”` : ''}`
  : short(r.restored_checkpoint, 12))
const keptText = r => `${r.kept} kept as they are: not captured by the safety checkpoint`
const PROTECTION_TONE = { on: 'ok', ready: undefined, degraded: 'warn', off: 'bad' }

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

function Btn({ testid, onClick, disabled, danger, children, type }) {
  return jsx('button', {
    type: type || 'button', 'data-testid': testid, disabled: !!disabled, onClick,
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

function Journal({ ctx, status, events, verify, verifying, onVerify, onResolved }) {
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
          jsx('span', { style: S.muted, children: e.timestamp_ns ? ago(e.timestamp_ns / 1e9) : '' })
        ]
      }, e.id || e.seq)) })
    ]
  })
}

// --------------------------------------------------------------------- pane
export function ChronosPane({ ctx }) {
  const cwd = useHostCwd()
  const [workspaces, setWorkspaces] = useState([])
  const [ws, setWs] = useState(null)
  const [follow, setFollow] = useState(true)           // follow the session cwd
  const [checkpoints, setCheckpoints] = useState(null)
  const [selected, setSelected] = useState(null)
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
      let root = wsRef.current
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
        root ? api(ctx, `/checkpoints${qs({ ...wsArgs(list, root), limit: CHECKPOINT_LIMIT })}`)
          .then(c => { if (alive.current && wsRef.current === root) setCheckpoints(c.checkpoints || []) }) : null,
        api(ctx, '/journal/status').then(s => { if (alive.current) setJstatus(s) }),
        api(ctx, `/journal/log${qs({ limit: EVENT_LIMIT })}`).then(l => { if (alive.current) setEvents(l.events || []) })
      ])
    }).catch(e => {
      fail('Refresh')(e)
      // never silently off: when the API did not load, its /health still says why (503)
      return api(ctx, '/health').then(h => h.protection, e2 => toApiError(e2).body.protection || null)
        .then(p => { if (alive.current) setOffProtection(p) })
    })
  }, [ctx, fail])

  // first load, then poll
  useEffect(() => every(ctx, refresh, POLL_MS), [ctx, refresh])
  // ... and again whenever the session cwd or the follow mode changes
  useEffect(() => { refresh() }, [refresh, cwd, follow])

  // the diff of the selected checkpoint
  const loadDetail = useCallback(() => {
    if (!selected || !ws) {
      setDetail(null)
      return
    }
    const seq = ++detailSeq.current
    const req = mode === 'changes'
      ? api(ctx, `/checkpoints/${encodeURIComponent(selected)}${qs(wsArgs(listRef.current, ws))}`)
      : api(ctx, `/diff${qs({ ...wsArgs(listRef.current, ws), from: selected })}`)
    req.then(r => { if (alive.current && seq === detailSeq.current) setDetail({ mode, res: r }) },
             e => { if (seq === detailSeq.current) fail('Loading the diff')(e) })
  }, [ctx, selected, mode, ws, fail])
  useEffect(() => { loadDetail() }, [loadDetail])

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

  const select = id => {
    if (id !== selected) {
      disarm()
      setPlan(null)
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

  // second click: the dry run's request again, with its plan_token and the full checkpoint id
  const doRestore = p => {
    setBusy(true)
    const body = { ...p.request, checkpoint: p.res.restored_checkpoint, dry_run: false, plan_token: p.res.plan_token }
    return api(ctx, '/restore', { method: 'POST', body })
      .then(r => {
        if (!alive.current) return
        setResult({ res: r, undo: p.undo })
        setPlan(null)
        setError(null)
        refresh()
        loadDetail()
      }, e => {
        const err = toApiError(e)
        // an incomplete restore (HTTP 409) is still a RestoreResult: show what failed, offer undo
        if (alive.current && err.body.safety_checkpoint && err.body.plan) {
          setResult({ res: err.body, undo: p.undo })
          setPlan(null)
          refresh()
        }
        // the workspace changed since the preview (HTTP 409, nothing restored): the new plan, armed
        if (alive.current && err.body.code === 'plan_changed' && err.body.plan_token) arm({ ...p, res: err.body })
        fail(p.undo ? 'Undo' : 'Restore')(err)
      })
      .then(() => { if (alive.current) setBusy(false) })
  }

  // first click: the dry run, which arms the confirm for ARM_MS
  const preview = (checkpoint, undo) => {
    const request = { checkpoint, ...wsArgs(listRef.current, ws) }
    setBusy(true)
    api(ctx, '/restore', { method: 'POST', body: { ...request, dry_run: true } })
      .then(p => {
        if (!alive.current) return
        arm({ res: p, request, undo, selected: checkpoint })
      }, fail(undo ? 'Undo preview' : 'Restore preview'))
      .then(() => { if (alive.current) setBusy(false) })
  }

  // show a plan and arm the confirm for ARM_MS
  const arm = plan => {
    setPlan(plan)
    setArmed(true)
    if (disarmRef.current) disarmRef.current()
    disarmRef.current = later(ctx, () => { disarmRef.current = null; if (alive.current) setArmed(false) }, ARM_MS)
  }

  const onRestoreClick = () => {
    if (!selected || busy) return
    if (armed && plan && plan.selected === selected) {       // second click
      disarm()
      doRestore(plan)
      return
    }
    preview(selected, false)
  }

  // undo = restore the safety checkpoint, previewed and confirmed like any restore
  const onUndo = id => {
    disarm()
    setPlan(null)
    setSelected(id)
    preview(id, true)
  }

  const onVerify = () => {
    setVerifying(true)
    api(ctx, '/journal/verify', { method: 'POST', body: {} })
      .then(r => { if (alive.current) setVerify(r) },
            e => { const err = toApiError(e); if (err.body && err.body.integrity) setVerify(err.body); else fail('Verify')(err) })
      .then(() => { if (alive.current) setVerifying(false) })
  }

  // detail: {mode, res}: a ShowResult ("changes") or a DiffResult ("worktree")
  const shown = detail && detail.mode === mode ? detail.res : null
  const cp = (checkpoints || []).find(c => c.id === selected) ||
    (shown && mode === 'changes' && shown.checkpoint.id === selected ? shown.checkpoint : null)
  const diff = shown && (mode === 'changes' ? shown.changes : shown)
  const protection = offProtection || (jstatus && jstatus.protection) || null
  const res = result && result.res
  const following = follow && cwd && workspaceForCwd(workspaces, cwd) === ws

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
      jsx(ProtectionBanner, { protection }),
      jsx(ErrorBox, { error, onDismiss: () => setError(null) }),
      res ? jsxs('div', { style: res.failed ? S.notice : S.ok, 'data-testid': 'restore-result', children: [
        jsx('div', { children: `${res.failed ? 'Incomplete' : result.undo ? 'Undone' : 'Restored'}: now at ${targetText(res)} — ` +
          `${res.files_changed} written, ${res.untracked_removed} removed${res.failed ? `, ${res.failed} failed` : ''}.` }),
        res.kept ? jsx('div', { style: S.muted, 'data-testid': 'restore-kept', children: keptText(res) }) : null,
        ...failedOf(res).map(it => jsx('div', { style: S.mono, 'data-testid': 'restore-failed',
          children: `failed ${it.path}${it.reason ? ` (${it.reason})` : ''}` }, it.path_b64 || it.path)),
        jsxs('div', { style: S.row, children: [
          jsx('span', { children: 'Safety checkpoint' }),
          jsx('span', { style: S.mono, 'data-testid': 'safety-checkpoint-id', 'data-checkpoint-id': res.safety_checkpoint || '',
                        children: short(res.safety_checkpoint, 12) }),
          res.safety_checkpoint
            ? jsx(Btn, { testid: 'undo-button', disabled: busy, onClick: () => onUndo(res.safety_checkpoint),
                         children: 'Undo' })
            : null
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
        jsx('div', { style: S.h, children: `Checkpoints${checkpoints ? ` (${checkpoints.length})` : ''}` }),
        checkpoints === null ? jsx('div', { style: S.muted, children: 'Loading…' })
          : checkpoints.length === 0 ? jsx('div', { style: S.muted, 'data-testid': 'no-checkpoints', children: 'No checkpoints.' })
          : jsx('div', { 'data-testid': 'checkpoint-list', style: { maxHeight: 260, overflowY: 'auto' }, children: checkpoints.map(c => jsxs('button', {
              type: 'button', 'data-testid': 'checkpoint-row', 'data-checkpoint-id': c.id,
              style: { ...S.item, ...(c.id === selected ? S.itemSel : null) }, onClick: () => select(c.id),
              children: [
                jsxs('div', { style: S.row, children: [
                  jsx('span', { style: S.mono, 'data-testid': 'checkpoint-id', children: c.short_id || short(c.id) }),
                  jsx(Badge, { tone: c.kind === 'safety' ? 'warn' : undefined, children: c.kind }),
                  c.tool ? jsx('span', { style: S.mono, children: c.tool }) : null,
                  (c.skipped || []).length ? jsx(Badge, { tone: 'warn', testid: 'checkpoint-skipped', children: `${c.skipped.length} skipped` }) : null
                ] }),
                jsx('div', { children: c.description }),
                jsx('div', { style: S.muted, children: ago(c.time) + (c.tool_call_id ? ` · ${c.tool_call_id}` : '') })
              ]
            }, c.id)) })
      ] }),
      cp ? jsxs('div', { style: S.section, 'data-testid': 'checkpoint-detail', 'data-checkpoint-id': cp.id, children: [
        jsx('div', { style: S.mono, children: cp.id }),
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
          jsx(Btn, { testid: 'restore-button', danger: armed, disabled: busy, onClick: onRestoreClick,
                     children: armed ? 'Confirm restore' : 'Restore…' }),
          armed ? jsx('span', { style: S.muted, 'data-testid': 'restore-armed', children: `click again within ${ARM_MS / 1000} s` }) : null
        ] }),
        plan ? jsxs('div', { 'data-testid': 'restore-plan', style: armed ? S.notice : S.muted, children: [
          jsx('div', { 'data-testid': 'restore-plan-summary',
                       children: `${plan.undo ? 'Undo' : 'Dry run'}: ${actionCounts(plan.res.plan || []) || 'no changes'}` }),
          jsx('div', { style: S.muted, 'data-testid': 'restore-plan-target', children: `to ${targetText(plan.res)}` }),
          plan.res.kept ? jsx('div', { style: S.muted, 'data-testid': 'restore-plan-kept', children: keptText(plan.res) }) : null,
          ...(plan.res.plan || []).map(it => jsx('div', {
            style: S.mono, 'data-testid': 'restore-plan-item', 'data-action': it.action, title: ACTION_HELP[it.action] || '',
            children: `${it.action} ${it.path}${it.reason ? ` (${it.reason})` : ''}`
          }, `${it.action}:${it.path_b64 || it.path}`))
        ] }) : null
      ] }) : jsx('div', { style: S.muted, 'data-testid': 'checkpoint-detail-empty', children: 'Select a checkpoint to see its diff.' }),
      jsx(Journal, { ctx, status: jstatus, events, verify, verifying, onVerify,
                     onResolved: () => refresh() })
    ]
  })
}

export default {
  id: PLUGIN_ID,
  name: 'Chronos',
  description: 'Checkpoints, diffs, two-click rollback and the crash-safe journal of chronos-git',
  register(ctx) {
    ctx.register({
      id: 'pane',
      area: PANES,
      title: 'chronos',
      data: { placement: 'right', width: '380px' },
      render: () => jsx(ChronosPane, { ctx })
    })
  }
}
