package admit

import "sync"

// SlicePool keeps the slices of finished batches for the next ones: a batch's slices of
// per-message structs are hundreds of bytes a message, allocated (and collected) once per
// batch otherwise.
type SlicePool[T any] struct{ p sync.Pool }

// Get returns a slice of n zero values (len n), reused when one large enough is kept.
func (sp *SlicePool[T]) Get(n int) []T {
	if v, ok := sp.p.Get().(*[]T); ok {
		if cap(*v) >= n {
			return (*v)[:n]
		}
		sp.p.Put(v)
	}
	return make([]T, n)
}

// Put keeps s for a later Get. Its elements up to len(s) are zeroed (they may hold
// references); those beyond must be zero already (not written since the Get).
func (sp *SlicePool[T]) Put(s []T) {
	clear(s)
	s = s[:0]
	sp.p.Put(&s)
}
