package chattemplate

import "testing"

// LowerMacroCallLimit lowers the macro call bound to n for the rest of t,
// for tests whose runaway recursions only need to end, not to reach
// MaxMacroCalls.
func LowerMacroCallLimit(t testing.TB, n int) {
	limit := macroCallLimit
	macroCallLimit = n
	t.Cleanup(func() { macroCallLimit = limit })
}
