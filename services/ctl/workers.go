package ctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

func workersFlags(fs *flag.FlagSet) func(context.Context, Config, io.Writer) error {
	watch := fs.Bool("watch", false, "refresh the table every --interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	frames := fs.Int("frames", 0, "with --watch, stop after this many refreshes (0: until interrupted)")
	return func(ctx context.Context, c Config, out io.Writer) error {
		if *interval <= 0 || *frames < 0 {
			return fmt.Errorf("--interval must be positive and --frames not negative")
		}
		return workers(ctx, c, out, *watch, *interval, *frames)
	}
}

// workers prints the instance table, once or every interval. On a terminal
// each refresh redraws the screen; otherwise frames follow each other.
func workers(ctx context.Context, c Config, out io.Writer, watch bool, interval time.Duration, frames int) error {
	clear := false
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			clear = true
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		st, err := Gather(ctx, c)
		switch {
		case err != nil && !watch:
			return err
		case err != nil:
			fmt.Fprintf(out, "%s  %v\n", time.Now().Format(time.TimeOnly), err)
		case c.Output == "json":
			if err := json.NewEncoder(out).Encode(st.Instances); err != nil {
				return err
			}
		default:
			if clear {
				fmt.Fprint(out, "\x1b[H\x1b[2J")
			}
			if watch {
				fmt.Fprintf(out, "%s  every %v, Ctrl-C stops\n", time.Now().Format(time.TimeOnly), interval)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			printInstances(tw, st.Instances)
			tw.Flush()
		}
		if !watch || (frames > 0 && n >= frames) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
