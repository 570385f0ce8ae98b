// Package console is sluice's operator console: a web page, served by the ingress at /ui/,
// to see and steer every queue (outflow, pause, purge, hottest keys, dead letters) at 3 a.m.
// without reading docs/http-api.md.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no CDN, no build
// step). It holds no data of its own: it reads and writes the admin JSON API
// (/v1/admin/...) with the admin token as a bearer token, kept in the browser's session
// storage — never in a URL or a cookie — so the API answers 401 without it, as for curl.
// Live numbers refresh every 2 s; the sparklines of depth and delivered/s keep the last
// 10 minutes in the page.
//
// Handler is safe for concurrent use; it serves the same bytes for the process's life.
package console
