//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package cli

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal: whether it answers the terminal ioctl
// (TIOCGETA). /dev/null and other character devices do not.
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA)
	return err == nil
}
