package cli

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal: whether it answers the terminal ioctl
// (TCGETS). /dev/null and other character devices do not.
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
