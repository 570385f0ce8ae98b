package drain

// DropNotices makes d's own engine ignore the NATS notices of new messages, as if every one
// were lost: only the repair listing finds new keys.
func DropNotices(d *Drainer, drop bool) { d.dropNotices.Store(drop) }
