//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package devstack

import "os"

// lockFile does nothing where there is no flock: the data directory is not guarded there.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) error { return nil }
