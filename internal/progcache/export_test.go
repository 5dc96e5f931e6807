package progcache

// SetPreloadHook has f run before the preloader loads each entry (nil: none).
func SetPreloadHook(f func(key string)) { preloadHook = f }

// SetWarmMaxBytes replaces warming's bound and returns a func restoring it.
func SetWarmMaxBytes(n int64) (restore func()) {
	old := warmMaxBytes
	warmMaxBytes = n
	return func() { warmMaxBytes = old }
}
