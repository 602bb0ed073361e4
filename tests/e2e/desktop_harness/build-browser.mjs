// Builds the modules a browser page needs to run desktop/plugin.js the way the Desktop does
// (apps/desktop/src/sdk/runtime.ts maps `react`, `react/jsx-runtime` and `@hermes/plugin-sdk`
// to live modules of the app): one ESM bundle of React 19 (production build, as the Desktop
// ships it), react-dom/client and the Desktop's state library (nanostores, @nanostores/react),
// and the `react` / `react/jsx-runtime` modules re-exporting its members.
//   node build-browser.mjs <node_modules> <out dir>
import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'

const [nodeModules, out] = process.argv.slice(2)
const req = createRequire(path.join(nodeModules, 'harness.cjs'))
const esbuild = req('esbuild')
fs.mkdirSync(out, { recursive: true })
await esbuild.build({
  stdin: {
    contents: [
      "import * as React from 'react'", "import * as jsxRuntime from 'react/jsx-runtime'",
      "import { createRoot } from 'react-dom/client'", "import { atom } from 'nanostores'",
      "import { useStore } from '@nanostores/react'", 'export { React, jsxRuntime, createRoot, atom, useStore }'
    ].join('\n'),
    resolveDir: path.dirname(nodeModules), loader: 'js'
  },
  bundle: true, format: 'esm', outfile: path.join(out, 'vendor.mjs'), logLevel: 'error',
  define: { 'process.env.NODE_ENV': '"production"' }
})
const names = Object.keys(req('react')).filter(k => /^[A-Za-z_$][\w$]*$/.test(k) && k !== 'default')
fs.writeFileSync(path.join(out, 'react.mjs'),
  `import { React } from './vendor.mjs'\nexport default React\nexport const { ${names.join(', ')} } = React\n`)
fs.writeFileSync(path.join(out, 'jsx.mjs'),
  "import { jsxRuntime } from './vendor.mjs'\nexport const { jsx, jsxs, Fragment } = jsxRuntime\n")
console.log(JSON.stringify({ ok: true, react: req('react/package.json').version, names: names.length }))
