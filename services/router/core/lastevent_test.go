package core

import (
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
)

// TestLastEventTime: GetStats gives each worker the time of its last KV
// event (none before the first; duplicates count, they arrived), and a
// worker that leaves the registry takes its time with it.
func TestLastEventTime(t *testing.T) {
	now := time.Unix(1000, 0)
	c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }}, 2)
	at := func(id uint64) (time.Time, bool) {
		t.Helper()
		for _, w := range c.Stats().GetWorkers() {
			if w.InstanceId == id && w.LastEventTime != nil {
				return w.LastEventTime.AsTime(), true
			}
		}
		return time.Time{}, false
	}
	if _, ok := at(1); ok {
		t.Fatal("a last event time before any event")
	}
	stored(c, 1, 1, tokens(8, 1))
	if got, ok := at(1); !ok || !got.Equal(now) {
		t.Fatalf("after an event at %v: last event %v %v", now, got, ok)
	}
	if _, ok := at(2); ok {
		t.Fatal("worker 2 has a last event time without events")
	}
	now = now.Add(3 * time.Second)
	stored(c, 1, 1, tokens(8, 1)) // the same id again: a duplicate
	if got, _ := at(1); !got.Equal(now) {
		t.Fatalf("after a duplicate at %v: last event %v", now, got)
	}
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: true, Item: &registryv1.Instance{Namespace: "dynamo",
		Component: "backend", Endpoint: "generate", InstanceId: 1}}})
	c.mu.Lock()
	_, kept := c.lastEvent[1]
	c.mu.Unlock()
	if kept {
		t.Fatal("a departed worker's last event time is kept")
	}
	stored(c, 99, 1, tokens(8, 1)) // not in the registry: not recorded
	c.mu.Lock()
	_, unknown := c.lastEvent[99]
	c.mu.Unlock()
	if unknown {
		t.Fatal("an unregistered instance's event time is kept")
	}
}

// TestStatsIndexCoversCountedEvents: an event applied while Stats runs is
// in the index figures if the counters count it (the index is read after
// the counters). Read the other way round, a fresh router that had applied
// every event of its stream reported an index short of the last ones.
func TestStatsIndexCoversCountedEvents(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 1)
	stored(c, 1, 1, tokens(8, 1)) // 2 blocks
	defer func() { statsRead = func() {} }()
	statsRead = func() {
		statsRead = func() {}
		stored(c, 1, 2, tokens(16, 2)) // 4 more, meanwhile
	}
	st := c.Stats()
	perEvent := map[uint64]uint64{1: 2, 2: 6} // entries once events 1..k are applied
	if st.IndexedEntries < perEvent[st.EventsApplied] {
		t.Fatalf("stats count %d events applied and %d index entries; those events alone hold %d", st.EventsApplied, st.IndexedEntries, perEvent[st.EventsApplied])
	}
	if st := c.Stats(); st.EventsApplied != 2 || st.IndexedEntries != 6 {
		t.Fatalf("after both events: %d applied, %d entries; want 2 and 6", st.EventsApplied, st.IndexedEntries)
	}
}
