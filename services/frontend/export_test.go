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
)
