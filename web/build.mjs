// Builds src into dist: one script, one stylesheet and the page. The output is committed
// (the Go binary embeds it) and must be the same on every machine, so nothing in it
// depends on the time or the path it was built in.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

const out = process.argv[2] ?? "dist";
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: out,
  legalComments: "none",
  logLevel: "warning",
});
copyFileSync("src/index.html", `${out}/index.html`);
