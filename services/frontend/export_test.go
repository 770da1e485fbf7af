package frontend

import "context"

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
	// PointPrefill, PointHandoff and PointDecodeToken are a two-leg
	// attempt's: its prefill leg sent, its handoff arrived, the decode
	// leg's first tokens arrived (before they are taken or found late).
	PointPrefill     = pointPrefill
	PointHandoff     = pointHandoff
	PointDecodeToken = pointDecodeToken
)

// SetLegHook makes the service call hook at the points of a two-leg
// attempt (PointPrefill, PointHandoff, PointDecodeToken) with the leg's
// context (the decode leg's ends at the handoff deadline), the request's
// X-Request-Id and its prefill worker's instance. Set it before the first
// request.
func (s *Service) SetLegHook(hook func(ctx context.Context, point, xRequestID string, prefill uint64)) {
	s.legHook = hook
}

// ShareQwenTokenizer builds the built-in Qwen3 tokenizer once for the whole
// test binary and keeps it, so that every frontend a test starts reuses it.
func ShareQwenTokenizer() error {
	_, err := qwenShared()
	return err
}
