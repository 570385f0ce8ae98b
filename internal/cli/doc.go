// Package cli is the `sluice` command for people: operator verbs over the admin API
// (queues, queue, tune, pause, resume, purge, keys, dead, replay, status, submit, rules),
// `check` for rules files offline, and `dev` (the dev stack, injected by cmd/sluice).
//
// Every verb that talks to an ingress goes through the Go client (package client), so
// the command and Go programs share one retry policy and one error model. The command's
// entry is Main.Run, which takes the arguments and returns the exit code; cmd/sluice/main.go
// only builds a Main over the process's streams and environment, and tests run the same
// Main against a real ingress.
//
// # Configuration
//
// SLUICE_URL (default http://localhost:8080) and SLUICE_ADMIN_TOKEN, or SLUICE_ADMIN_TOKEN_FILE
// (a file holding the token), and SLUICE_SUBMIT_TOKEN for submit and status against an
// ingress run with -submit-tokens; the flags --url, --token, --token-file and
// --submit-token win over them.
// Nothing else is read from the environment.
//
// # Output
//
// Aligned tables for people; -o json writes the API's objects, one JSON document per
// command, for scripts.
//
// # Exit codes
//
//	0  done
//	1  the server said no: not found, invalid, over limit, changed by someone else (412),
//	   a conflict; `check`: the rules have problems
//	2  usage: unknown verb or flag, missing argument, a purge without --yes off a terminal
//	3  cannot reach the ingress, or it cannot serve now (connection refused, timeout,
//	   502/503/504)
//	4  not authorized (401, 403): set SLUICE_ADMIN_TOKEN
//
// A Main is not safe for concurrent use; it holds no state between Runs.
//
// # Files
//
//   - cli.go: Main, the verb table, common flags, help and exit codes
//   - verbs.go: the verbs, each over client/
//   - tune_keys.go: tune --key and --keys-file, the per-key overrides (client.Admin.TuneKey, TuneKeys)
//   - rate.go: rates and ages as people type and read them (5/s, 10/30s)
//   - terminal_linux.go: whether stdin is a terminal (purge's question), on Linux
//   - terminal_bsd.go: the same on the BSDs and macOS
//   - terminal_other.go: the same elsewhere (never a terminal)
//   - doc.go: this overview
package cli
