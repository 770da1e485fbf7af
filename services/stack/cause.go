package stack

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
)

// LogCause returns why a component stopped, from its log: the err (or the
// message) of the last error line, JSON or text, else the last line. A
// newcomer sees "listen tcp :8000: bind: address already in use" on the
// terminal instead of having to open the log.
func LogCause(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-200; i-- {
		if c := errorOf(lines[i]); c != "" {
			return c
		}
	}
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return "(empty log)"
}

// errorOf extracts the cause of one error log line, or "".
func errorOf(line string) string {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "{") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["level"] != "ERROR" {
			return ""
		}
		if e, ok := rec["err"].(string); ok && e != "" {
			return e
		}
		m, _ := rec["msg"].(string)
		return m
	}
	if !strings.Contains(line, "level=ERROR") {
		return ""
	}
	// slog's text format: key=value or key="quoted value".
	if i := strings.Index(line, " err="); i >= 0 {
		v := line[i+len(" err="):]
		if strings.HasPrefix(v, `"`) {
			var s string
			if dec := json.NewDecoder(bytes.NewReader([]byte(v))); dec.Decode(&s) == nil {
				return s
			}
		}
		return strings.Fields(v)[0]
	}
	return line
}
