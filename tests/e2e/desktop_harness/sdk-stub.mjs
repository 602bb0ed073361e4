// A stand-in for @hermes/plugin-sdk on a NEW Desktop host (apps/desktop/src/sdk/index.ts):
// the contribution areas, `host.state.*` as real nanostores atoms (the Desktop's state
// library, nanostores + @nanostores/react), `useValue` = @nanostores/react's useStore,
// `host.notify`, and the pane door (`host.panes.setOpen`) the test drives.
import { atom } from 'nanostores'
import { useStore } from '@nanostores/react'

export const PANES_AREA = 'panes'
export const PALETTE_AREA = 'palette'
export const STATUSBAR_AREAS = { left: 'statusBar.left', right: 'statusBar.right' }

const opened = []
const notified = []
export const host = {
  state: { cwd: atom(process.env.HARNESS_CWD || ''), profile: atom(process.env.HARNESS_PROFILE || 'default') },
  notify: n => { notified.push(n) },
  panes: { setOpen: (id, open) => { opened.push([id, open]) }, open: id => atom(opened.some(([x, o]) => x === id && o)) }
}
globalThis.__harnessHost = host
globalThis.__harnessOpened = opened
globalThis.__harnessNotified = notified

export function useValue(a) {
  return useStore(a)
}
