package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often a Watcher looks at the rules files.
const DefaultPollInterval = time.Second

// WatcherConfig configures a Watcher. The zero value of every optional field means
// its documented default.
type WatcherConfig struct {
	// Paths are the rules files and directories, as for Load. Required.
	Paths []string
	// Interval between two looks at the files. Default DefaultPollInterval.
	Interval time.Duration
	// Logger receives one line per reload attempt. Default: discard.
	Logger *slog.Logger
	// OnReload, when set, is called after every reload attempt — that is, every
	// time the files' contents changed — with the new Set and a nil error, or a nil
	// Set and the error (the previous Set stays current). It runs on the watcher's
	// goroutine (or the caller's, for Poll) and must return quickly. The ingress
	// counts sluice_rules_reload_total{result} here; tests wait on it instead of
	// sleeping.
	OnReload func(set *Set, err error)
	// Options change how the files are combined (MergeDomains). Default: none.
	Options Options
}

// WithDefaults returns c with defaults filled in.
func (c WatcherConfig) WithDefaults() WatcherConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultPollInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c WatcherConfig) Validate() error {
	if len(c.Paths) == 0 {
		return errors.New("rules: watcher needs at least one path")
	}
	return nil
}

// Watcher keeps the current rules Set and replaces it when the files change.
//
// It polls: every Interval it reads the rules files and hashes their names and
// contents (they are small). Polling is chosen over inotify because it is robust to
// every way a file is replaced: editors that write a temporary file and rename it over
// the original (an inotify watch on the old inode goes silent), Kubernetes ConfigMap
// updates that swap a "..data" symlink to a new directory (no event on the file's own
// path), network file systems without notifications, and files that are deleted and
// re-created. A content hash rather than mtime+size also catches same-size edits
// within one mtime tick and ignores touches that change nothing.
//
// A change that fails to load or validate is logged and counted, and the last good Set
// stays current; the same broken contents are not retried (nor counted) again until
// they change. A Watcher is safe for concurrent use.
type Watcher struct {
	cfg     WatcherConfig
	current atomic.Pointer[Set]

	successes atomic.Uint64
	failures  atomic.Uint64

	pollMu  sync.Mutex // serialises Poll
	lastSum [sha256.Size]byte

	lifeMu  sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewWatcher loads the rules once and returns a Watcher holding them. It fails, like
// Load, when the rules cannot be loaded: a process must not start without rules.
// Call Start to follow changes.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srcs, sum, err := snapshot(cfg.Paths)
	if err != nil {
		return nil, err
	}
	set, err := build(srcs, cfg.Options)
	if err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, lastSum: sum}
	w.current.Store(set)
	return w, nil
}

// Current returns the rules in force. It never returns nil.
func (w *Watcher) Current() *Set { return w.current.Load() }

// Successes is the number of reloads that replaced the rules.
func (w *Watcher) Successes() uint64 { return w.successes.Load() }

// Failures is the number of changes that were refused (the last good rules stayed).
func (w *Watcher) Failures() uint64 { return w.failures.Load() }

// Start polls the files in a goroutine until ctx ends or Stop is called.
// Calling Start again while running does nothing.
func (w *Watcher) Start(ctx context.Context) error {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if w.started {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	w.started, w.cancel, w.done = true, cancel, make(chan struct{})
	go w.run(ctx, w.done)
	return nil
}

// Stop stops polling and waits for an attempt in progress to finish. It is safe to
// call more than once and before Start; a stopped Watcher can be started again.
func (w *Watcher) Stop() {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if !w.started {
		return
	}
	w.cancel()
	<-w.done
	w.started = false
}

func (w *Watcher) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Poll()
		}
	}
}

// Poll looks at the files now and reloads if their contents changed since the last
// attempt. It reports whether an attempt was made and its error. The polling goroutine
// calls it; it is exported for tests and for an explicit reload (e.g. on SIGHUP).
func (w *Watcher) Poll() (attempted bool, err error) {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()

	srcs, sum, err := snapshot(w.cfg.Paths)
	if err == nil && sum == w.lastSum {
		return false, nil
	}
	if err != nil {
		// Hash the error so a file that stays missing is reported once, not every poll.
		sum = sha256.Sum256([]byte("error\x00" + err.Error()))
		if sum == w.lastSum {
			return false, nil
		}
	}
	w.lastSum = sum

	var set *Set
	if err == nil {
		set, err = build(srcs, w.cfg.Options)
	}
	if err != nil {
		w.failures.Add(1)
		w.cfg.Logger.Error("rules reload failed; keeping the last good rules",
			"paths", w.cfg.Paths, "err", err)
	} else {
		w.current.Store(set)
		w.successes.Add(1)
		w.cfg.Logger.Info("rules reloaded",
			"paths", w.cfg.Paths, "rules", len(set.rules), "queue_rules", len(set.QueueRules()))
	}
	if w.cfg.OnReload != nil {
		w.cfg.OnReload(set, err)
	}
	return true, err
}

// snapshot reads the rules files and hashes their names and contents, so that what
// is hashed is exactly what is parsed.
func snapshot(paths []string) ([]source, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	srcs, err := readSources(paths)
	if err != nil {
		return nil, sum, err
	}
	h := sha256.New()
	for _, s := range srcs {
		fmt.Fprintf(h, "%d:%s%d:", len(s.name), s.name, len(s.data))
		h.Write(s.data)
	}
	copy(sum[:], h.Sum(nil))
	return srcs, sum, nil
}
