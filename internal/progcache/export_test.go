package progcache

// SetPreloadHook has f run before the preloader loads each entry (nil: none).
func SetPreloadHook(f func(key string)) { preloadHook = f }
