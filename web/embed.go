// Package web holds the dashboard's front end: TypeScript sources under src, built by
// esbuild (make web) into dist, which is committed so that a Go-only machine builds the
// binary with the pages inside.
package web

import "embed"

// Dist is the built front end: index.html, app.js, app.css.
//
//go:embed dist
var Dist embed.FS
