// A stand-in for @hermes/plugin-sdk on a NEW Desktop host: PANES_AREA, host.state.cwd
// (a nanostore-like atom the test drives) and useValue.
import * as React from 'react'

export const PANES_AREA = 'panes'
export const STATUSBAR_AREAS = { left: 'statusBar.left', right: 'statusBar.right' }

function atom(initial) {
  let value = initial
  const listeners = new Set()
  return {
    get: () => value,
    set(next) {
      value = next
      for (const l of [...listeners]) l(next)
    },
    listen(l) {
      listeners.add(l)
      return () => listeners.delete(l)
    },
    subscribe(l) {
      listeners.add(l)
      l(value)
      return () => listeners.delete(l)
    }
  }
}

export const host = {
  state: { cwd: atom(process.env.HARNESS_CWD || null) },
  notify: () => {}
}
globalThis.__harnessHost = host

export function useValue(a) {
  return React.useSyncExternalStore(a.listen, a.get, a.get)
}
