package mocker

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// TestTransferTime: blocks x block bytes x 8 / (Gbps x 10^9), divided by
// the speed-up; nothing for no blocks, no delay or a link of 0 (at once).
func TestTransferTime(t *testing.T) {
	cfg := func(speedup, gbps float64) Config {
		c := Config{Engine: simengine.DefaultConfig(), KVTransferGbps: gbps, KVBytesPerToken: DefaultKVBytesPerToken}
		c.Engine.SpeedupRatio = speedup
		return c
	}
	tests := []struct {
		name   string
		cfg    Config
		blocks int
		want   time.Duration
	}{
		// 16 tokens x 114,688 bytes x 8 = 14,680,064 bits: 146.8 us at 100 Gb/s.
		{"one block", cfg(1, 100), 1, 146800 * time.Nanosecond},
		{"512 blocks", cfg(1, 100), 512, 75161928 * time.Nanosecond},
		{"ten times faster", cfg(10, 100), 1, 14680 * time.Nanosecond},
		{"a 10 Gb/s link", cfg(1, 10), 1, 1468006 * time.Nanosecond},
		{"no blocks", cfg(1, 100), 0, 0},
		{"fewer than none (all cached)", cfg(1, 100), -2, 0},
		{"no delay", cfg(0, 100), 5, 0},
		{"a link of 0 arrives at once", cfg(1, 0), 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.transferTime(tt.blocks)
			if d := got - tt.want; d < -time.Nanosecond || d > time.Nanosecond {
				t.Fatalf("transferTime(%d) = %v, want %v", tt.blocks, got, tt.want)
			}
		})
	}
}
