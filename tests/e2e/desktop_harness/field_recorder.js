// Which fields of the API's answers a pane reads: `wrap(body, route)` returns the body
// behind deep recording Proxies, and every property read through them is kept as
// "<route>: <field path>", e.g. "GET /checkpoints: checkpoints[].short_id" (an element
// of an array is `[]`).  Reads of JS built-ins are not fields: symbols, `then` (a
// promise resolving to the body), `toJSON`, `$$typeof`, Object.prototype members, and
// `length` and Array.prototype members of arrays.  The tests compare the reads with
// the OpenAPI schema (tests/surfaces/test_api_schema.py: undeclared).
// A plain script: the browser test injects it as an init script, the desktop harness
// imports it; both find it at globalThis.__fieldRecorder.
(function (g) {
  'use strict'
  const reads = new Set()
  const proxies = new WeakMap()            // target -> Map(route + path -> proxy)
  const NOT_FIELDS = new Set(['then', 'toJSON', '$$typeof'])

  function builtin(target, prop) {
    if (typeof prop === 'symbol' || NOT_FIELDS.has(prop) || prop in Object.prototype) return true
    return Array.isArray(target) && (prop === 'length' || prop in Array.prototype)
  }

  function wrap(value, route, path) {
    if (value === null || typeof value !== 'object') return value
    const key = `${route}: ${path || ''}`
    let byKey = proxies.get(value)
    if (!byKey) proxies.set(value, (byKey = new Map()))
    if (!byKey.has(key)) {
      byKey.set(key, new Proxy(value, {
        get(target, prop, receiver) {
          const v = Reflect.get(target, prop, receiver)
          if (builtin(target, prop)) return v
          const field = Array.isArray(target) && /^\d+$/.test(prop) ? `${path || ''}[]`
            : path ? `${path}.${prop}` : prop
          reads.add(`${route}: ${field}`)
          return wrap(v, route, field)
        }
      }))
    }
    return byKey.get(key)
  }

  g.__fieldRecorder = { wrap, reads: () => [...reads].sort(), clear: () => reads.clear() }
})(globalThis);
