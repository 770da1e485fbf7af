// Package undo is the one cleanup style of service startup: each step that
// acquires something (a client, a listener, an embedded server) pushes how
// to release it, and an error return unwinds the stack in reverse order, so
// that no error path leaves a port bound or a connection open and no step
// closes by hand what an earlier one opened.
//
//	func Start(...) (_ *Service, err error) {
//		var u undo.Stack
//		defer u.OnError(&err)
//		reg, err := registryclient.Dial(...)
//		if err != nil {
//			return nil, err
//		}
//		u.Push(func() { _ = reg.Close() })
//		...
package undo

// Stack holds the releases of what a startup has acquired so far. The zero
// value is empty and ready.
type Stack struct {
	fns []func()
}

// Push adds the release of the step just taken.
func (s *Stack) Push(f func()) { s.fns = append(s.fns, f) }

// OnError unwinds the stack when *err is not nil. Defer it, with a named
// error result, right after declaring the stack.
func (s *Stack) OnError(err *error) {
	if *err != nil {
		s.Unwind()
	}
}

// Unwind runs the releases, last pushed first, and empties the stack.
func (s *Stack) Unwind() {
	for i := len(s.fns) - 1; i >= 0; i-- {
		s.fns[i]()
	}
	s.fns = nil
}
