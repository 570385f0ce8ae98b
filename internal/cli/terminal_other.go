//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package cli

// isTerminal reports false where the command has no terminal check: purge asks for --yes.
func isTerminal(uintptr) bool { return false }
