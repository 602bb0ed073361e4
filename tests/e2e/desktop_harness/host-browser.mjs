// The Desktop's side of the browser page: a ctx shaped like createPluginContext's
// (apps/desktop/src/contrib/plugin.ts) whose rest door forwards method, body and timeoutMs
// only, sends a body as JSON with the session token, and throws a non-2xx answer as the
// host does ("NNN: <body>", through Electron's IPC but for a 404).  The plugin registers,
// and its pane renders into #pane at the right pane's width.
import plugin from '/__desktop/plugin.js'
import { createRoot } from '/__desktop/vendor.mjs'

const H = window.__HARNESS
const contributions = []
const held = []
const ctx = {
  source: 'plugin:chronos-git',
  register(c) { contributions.push(c); return () => {} },
  registerMany(cs) { cs.forEach(c => contributions.push(c)); return () => {} },
  async rest(path, o = {}) {
    const res = await fetch(`/api/plugins/chronos-git${path}`, {
      method: o.method || 'GET',
      headers: { 'X-Hermes-Session-Token': H.token, ...(o.body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      body: o.body !== undefined ? JSON.stringify(o.body) : undefined
    })
    const text = await res.text()
    if (!res.ok) {
      const msg = `${res.status}: ${text}`
      throw res.status === 404 ? Object.assign(new Error(msg), { statusCode: 404 })
        : new Error(`Error invoking remote method 'hermes:api': Error: ${msg}`)
    }
    return JSON.parse(text)
  },
  setInterval(fn, ms) { const id = setInterval(fn, ms); return () => clearInterval(id) },
  // a scrub's debounce (250 ms) can be held, so a page can be looked at mid-scrub
  setTimeout(fn, ms) {
    if (ms === 250 && window.__holdScrub) {
      const t = { fn, live: true }
      held.push(t)
      return () => { t.live = false }
    }
    const id = setTimeout(fn, ms)
    return () => clearTimeout(id)
  },
  onDispose() {},
  storage: { get: (k, d) => d, set() {}, remove() {} },
  os: {}
}
window.__releaseScrub = () => {
  window.__holdScrub = false
  for (const t of held.splice(0)) if (t.live) t.fn()
}
plugin.register(ctx)
window.__contributions = contributions.map(c => `${c.area}:${c.id}`)
createRoot(document.getElementById('pane')).render(contributions.find(c => c.area === 'panes').render())
