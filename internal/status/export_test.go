package status

// SetBeforeDelete sets a hook that runs just before Cancel deletes a queued message, so a
// test can stop the store for real at that moment.
func SetBeforeDelete(l *Locator, f func()) { l.beforeDelete = f }
