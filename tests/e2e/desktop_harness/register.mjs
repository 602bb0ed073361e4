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
