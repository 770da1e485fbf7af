// JSON lines on stderr, one object per line ({time, level, msg, ...attrs}),
// like the Go services' slog JSON handler, so tests and log pipelines read
// every worker alike.
function write(level: string, msg: string, attrs: Record<string, unknown> = {}): void {
  const line = { time: new Date().toISOString(), level, msg, ...attrs };
  process.stderr.write(JSON.stringify(line, (_, v) => (typeof v === "bigint" ? v.toString() : v)) + "\n");
}

export const log = {
  info: (msg: string, attrs?: Record<string, unknown>) => write("INFO", msg, attrs),
  warn: (msg: string, attrs?: Record<string, unknown>) => write("WARN", msg, attrs),
  error: (msg: string, attrs?: Record<string, unknown>) => write("ERROR", msg, attrs),
};
