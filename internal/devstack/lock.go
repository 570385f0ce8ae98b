package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockName is the file in the data directory that a running `sluice dev` holds locked.
const lockName = ".lock"

// errLocked: another process holds the data directory's lock.
var errLocked = errors.New("locked by another process")

// lockDataDir takes the exclusive lock of dir (a lock on dir/.lock, held until unlock or
// the process's end, however it ends), so that two `sluice dev` never run two embedded
// NATS servers on one JetStream store. It fails at once, naming dir and the process that
// holds it, when another `sluice dev` does.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("-data %s: %w", dir, err)
	}
	if err := lockFile(f); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = " (pid " + strconv.Itoa(pid) + ")"
			}
		}
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("-data %s: another `sluice dev`%s is using this directory for its JetStream store; "+
				"stop it, or give this one a directory of its own with -data DIR (or SLUICE_DEV_DATA)", dir, holder)
		}
		return nil, fmt.Errorf("-data %s: lock %s: %w", dir, path, err)
	}
	// Who holds it, for the message above; the lock itself is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = unlockFile(f)
		f.Close()
	}, nil
}
