package frontend

// SetTestHook makes the service call hook at each point of a request's
// path (testPoint), so that a test can inject a failure there. Set it
// before the first request.
func (s *Service) SetTestHook(hook func(point string)) { s.hook = hook }

// Points where the test hook is called.
const (
	PointServe  = pointServe
	PointRouted = pointRouted
	PointToken  = pointToken
	PointEnd    = pointEnd
	// PointPrefill and PointHandoff are a two-leg attempt's: its prefill
	// leg sent, its handoff arrived.
	PointPrefill = pointPrefill
	PointHandoff = pointHandoff
)

// SetLegHook makes the service call hook at the points of a two-leg
// attempt (PointPrefill, PointHandoff) with the request's X-Request-Id and
// its prefill worker's instance. Set it before the first request.
func (s *Service) SetLegHook(hook func(point, xRequestID string, prefill uint64)) { s.legHook = hook }

// ShareQwenTokenizer builds the built-in Qwen3 tokenizer once for the whole
// test binary and keeps it, so that every frontend a test starts reuses it.
func ShareQwenTokenizer() error {
	_, err := qwenShared()
	return err
}
