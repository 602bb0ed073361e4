// `node --import ./register.mjs scenarios.mjs <scenario>`; configuration from the environment.
import { register } from 'node:module'
import { pathToFileURL } from 'node:url'
import path from 'node:path'

const here = path.dirname(new URL(import.meta.url).pathname)
const stub = process.env.HARNESS_SDK === 'minimal' ? 'sdk-stub-minimal.mjs' : 'sdk-stub.mjs'
register('./loader.mjs', import.meta.url, {
  data: {
    nodeModules: process.env.HARNESS_NODE_MODULES,
    stubUrl: pathToFileURL(path.join(here, stub)).href,
    pluginUrl: pathToFileURL(process.env.HARNESS_PLUGIN).href
  }
})

// React 19's development build logs every re-render's changed props to the User Timing
// "Components" track, diffing old and new props field by field: those reads would show up
// in the field recorder as the pane's own.  The Desktop runs React's production build,
// which has no such track; without console.timeStamp React 19 turns it off.
console.timeStamp = undefined
