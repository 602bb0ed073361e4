// Node module hooks for running desktop/plugin.js outside Electron.
//  * `@hermes/plugin-sdk` -> a stub (sdk-stub.mjs, or sdk-stub-minimal.mjs for an old host)
//  * `react`, `react/jsx-runtime`, `react-test-renderer`, and the host's state library
//    (`nanostores`, `@nanostores/react`, as apps/desktop/package.json pins them) -> the
//    harness' node_modules, resolved as Node resolves them from there (CommonJS React 19,
//    ESM nanostores)
//  * anything else imported BY THE PLUGIN FILE is refused, like the Desktop loader does.
import { pathToFileURL } from 'node:url'

let nodeModules = null
let stubUrl = null
let pluginUrl = null
const PLUGIN_ALLOWED = new Set(['@hermes/plugin-sdk', 'react', 'react/jsx-runtime'])
const FROM_NODE_MODULES = new Set(['react', 'react/jsx-runtime', 'react-test-renderer', 'react-dom', 'react-dom/client',
                                   'nanostores', '@nanostores/react'])

export async function initialize(data) {
  nodeModules = data.nodeModules
  stubUrl = data.stubUrl
  pluginUrl = data.pluginUrl
}

export async function resolve(specifier, context, next) {
  if (context.parentURL === pluginUrl && !PLUGIN_ALLOWED.has(specifier)) {
    throw new Error(`desktop/plugin.js imports ${JSON.stringify(specifier)}: only ${[...PLUGIN_ALLOWED].join(', ')} resolve in Hermes Desktop`)
  }
  if (specifier === '@hermes/plugin-sdk') return { url: stubUrl, shortCircuit: true }
  if (FROM_NODE_MODULES.has(specifier)) {
    return next(specifier, { ...context, parentURL: pathToFileURL(`${nodeModules}/harness.mjs`).href })
  }
  return next(specifier, context)
}
