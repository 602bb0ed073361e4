// @hermes/plugin-sdk for the browser page (browser.html): what sdk-stub.mjs gives the Node
// harness, on the bundled nanostores / @nanostores/react.
import { atom, useStore } from './vendor.mjs'

export const PANES_AREA = 'panes'
export const PALETTE_AREA = 'palette'
export const STATUSBAR_AREAS = { left: 'statusBar.left', right: 'statusBar.right' }
export const host = {
  state: { cwd: atom(window.__HARNESS.cwd || ''), profile: atom('default') },
  notify: n => { (window.__notified = window.__notified || []).push(n) },
  panes: { setOpen: (id, open) => { (window.__opened = window.__opened || []).push([id, open]) } }
}
export const useValue = a => useStore(a)
