//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package devstack

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock of f without waiting: errLocked when another open
// file holds it. A flock belongs to the open file, so it conflicts even with another
// Start in the same process, and the kernel releases it when the process ends.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errLocked
		}
		return err
	}
}

func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
