package ctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// Status is what `switchyard status` shows; -o json prints it as is.
type Status struct {
	Models    []ModelStatus    `json:"models"`
	Instances []InstanceStatus `json:"instances"`
	Routers   []RouterStatus   `json:"routers"`
	Streams   []StreamStatus   `json:"streams"`
	// Planner is the planner's last decision (from the registry), when a
	// planner has written one.
	Planner *core.Decision `json:"planner,omitempty"`
	// Queues are the admission queues of the frontends asked (--frontend-addr),
	// by frontend and model.
	Queues []QueueStatus `json:"queues,omitempty"`
	// Problems are the services that did not answer, and why.
	Problems []string `json:"problems,omitempty"`
}

// QueueStatus is one frontend's admission queue of one model, as its
// /status.json tells it.
type QueueStatus struct {
	Frontend  string `json:"frontend"`
	Model     string `json:"model"`
	Saturated bool   `json:"saturated"`
	Queued    int    `json:"queued"`
	Bands     []struct {
		Priority int32 `json:"priority"`
		Queued   int   `json:"queued"`
	} `json:"bands"`
	TopTenants []struct {
		Tenant              string `json:"tenant"`
		InFlight            uint32 `json:"in_flight"`
		Queued              uint32 `json:"queued"`
		FleetInFlightTokens uint64 `json:"fleet_in_flight_tokens"`
	} `json:"top_tenants"`
}

// ModelStatus is one served model.
type ModelStatus struct {
	Name          string `json:"name"`
	Instances     int    `json:"instances"`
	BlockSize     uint32 `json:"block_size"`
	ContextLength uint32 `json:"context_length"`
	// Pool counts the model's instances by role (agg, prefill, decode).
	Pool registryclient.Pool `json:"pool"`
}

// InstanceStatus is one registered worker instance, with the router's view
// of it when a router answered.
type InstanceStatus struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Component string `json:"component"`
	Endpoint  string `json:"endpoint"`
	Transport string `json:"transport"`
	Address   string `json:"address"`
	// Role is agg, prefill or decode.
	Role string `json:"role"`
	// State is fenced when a frontend keeps the instance out of routing
	// because it cannot reach it, else live for a registered instance the
	// router knows, registered when no router reports it.
	State string `json:"state"`
	// FencedBy are the frontends that have it fenced.
	FencedBy []string `json:"fenced_by,omitempty"`
	// LastEventAge is the age of the router's last KV event of the
	// instance; empty when it has none.
	LastEventAge  string `json:"last_event_age,omitempty"`
	Models        string `json:"models,omitempty"`
	Requests      uint32 `json:"requests"`
	PrefillBlocks uint32 `json:"prefill_blocks"`
	DecodeBlocks  uint32 `json:"decode_blocks"`
	IndexedBlocks uint64 `json:"indexed_blocks"`
}

// RouterStatus is one router replica.
type RouterStatus struct {
	Addr            string `json:"addr"`
	Health          string `json:"health"`
	Mode            string `json:"mode,omitempty"`
	Workers         int    `json:"workers"`
	IndexedBlocks   uint64 `json:"indexed_blocks"`
	EventsApplied   uint64 `json:"events_applied"`
	EventsDuplicate uint64 `json:"events_duplicate"`
	EventsGap       uint64 `json:"events_gap"`
	RestoredFrom    string `json:"restored_snapshot_time,omitempty"`
	Error           string `json:"error,omitempty"`
}

// StreamStatus is one namespace's event stream.
type StreamStatus struct {
	Namespace     string `json:"namespace"`
	Stream        string `json:"stream"`
	Messages      uint64 `json:"messages"`
	Bytes         uint64 `json:"bytes"`
	FirstSequence uint64 `json:"first_sequence"`
	LastSequence  uint64 `json:"last_sequence"`
	LastEventAge  string `json:"last_event_age,omitempty"`
	Consumers     int64  `json:"consumers"`
	Error         string `json:"error,omitempty"`
}

func statusFlags(*flag.FlagSet) func(context.Context, Config, io.Writer) error {
	return func(ctx context.Context, c Config, out io.Writer) error {
		st, err := Gather(ctx, c)
		if err != nil {
			return err
		}
		if c.Output == "json" {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		st.Print(out)
		return nil
	}
}

// Gather asks the registry, every router replica and the eventbus for the
// fleet's state. Only a registry that does not answer is an error; the others
// are listed as problems.
func Gather(ctx context.Context, c Config) (*Status, error) {
	reg, err := c.registry()
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	ins, err := reg.Raw().ListInstances(cctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{}})
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", c.RegistryAddr, err)
	}
	cards, err := reg.Raw().ListModels(cctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{}})
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", c.RegistryAddr, err)
	}
	st := &Status{Models: []ModelStatus{}, Instances: []InstanceStatus{}, Routers: []RouterStatus{}, Streams: []StreamStatus{}}

	models := map[string]*ModelStatus{}
	modelsOf := map[uint64][]string{}
	for _, card := range cards.GetCards() {
		m := models[card.ModelName]
		if m == nil {
			m = &ModelStatus{Name: card.ModelName, BlockSize: card.BlockSize, ContextLength: card.ContextLength}
			models[card.ModelName] = m
		}
		m.Instances++
		modelsOf[card.InstanceId] = append(modelsOf[card.InstanceId], card.ModelName)
	}
	pools := map[string]registryclient.Pool{}
	for _, p := range registryclient.Pools(cards.GetCards(), ins.GetInstances()) {
		pools[p.Model] = p
	}
	for _, m := range models {
		m.Pool = pools[m.Name]
		st.Models = append(st.Models, *m)
	}
	sort.Slice(st.Models, func(i, j int) bool { return st.Models[i].Name < st.Models[j].Name })

	if d, err := lastDecision(cctx, reg); err != nil {
		st.Problems = append(st.Problems, "planner decision in the registry: "+err.Error())
	} else {
		st.Planner = d
	}

	// Every router replica; the first that answers supplies the load.
	var stats *routerv1.GetStatsResponse
	for _, addr := range splitAddrs(c.RouterAddr) {
		rs, s := routerStatus(ctx, c, addr)
		st.Routers = append(st.Routers, rs)
		if rs.Error != "" {
			st.Problems = append(st.Problems, "router "+addr+": "+rs.Error)
		}
		if stats == nil && s != nil {
			stats = s
		}
	}
	byID := map[uint64]*routerv1.WorkerStats{}
	for _, w := range stats.GetWorkers() {
		if w.DpRank == 0 {
			byID[w.InstanceId] = w
		}
	}
	fencedBy := map[string][]string{}
	for _, addr := range splitAddrs(c.FrontendAddr) {
		fenced, queues, err := frontendFenced(ctx, c, addr)
		for _, q := range queues {
			q.Frontend = addr
			st.Queues = append(st.Queues, q)
		}
		if err != nil {
			st.Problems = append(st.Problems, "frontend "+addr+": "+err.Error())
			continue
		}
		for _, id := range fenced {
			fencedBy[id] = append(fencedBy[id], addr)
		}
	}
	namespaces := map[string]bool{}
	for _, in := range ins.GetInstances() {
		kind, addr := transportOf(in.Transport)
		is := InstanceStatus{ID: fmt.Sprintf("%x", in.InstanceId), Namespace: in.Namespace, Component: in.Component, Endpoint: in.Endpoint,
			Transport: kind, Address: addr, Role: wire.RoleName(in.Role), State: "registered", Models: strings.Join(modelsOf[in.InstanceId], ",")}
		if w, ok := byID[in.InstanceId]; ok {
			is.State = "live"
			is.Requests, is.PrefillBlocks, is.DecodeBlocks, is.IndexedBlocks = w.Requests, w.PrefillBlocks, w.DecodeBlocks, w.CachedBlocks
			if t := w.GetLastEventTime(); t != nil {
				is.LastEventAge = age(time.Since(t.AsTime()))
			}
		}
		if by := fencedBy[is.ID]; len(by) > 0 {
			is.State, is.FencedBy = "fenced", by
		}
		st.Instances = append(st.Instances, is)
		namespaces[in.Namespace] = true
	}

	bus, err := c.eventbus()
	if err != nil {
		return nil, err
	}
	defer bus.Close()
	names := make([]string, 0, len(namespaces))
	for ns := range namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		ss := StreamStatus{Namespace: ns}
		info, err := bus.Raw().GetStreamInfo(cctx, &eventbusv1.GetStreamInfoRequest{Namespace: ns})
		if err != nil {
			ss.Error = err.Error()
			st.Problems = append(st.Problems, "eventbus stream of "+ns+": "+err.Error())
		} else {
			ss.Stream, ss.Messages, ss.Bytes, ss.FirstSequence, ss.LastSequence, ss.Consumers =
				info.Stream, info.Messages, info.Bytes, info.FirstSequence, info.LastSequence, info.Consumers
			if info.LastTime != nil && info.Messages > 0 {
				ss.LastEventAge = age(time.Since(info.LastTime.AsTime()))
			}
		}
		st.Streams = append(st.Streams, ss)
	}
	return st, nil
}

// lastDecision reads the planner's last decision from the registry; nil
// when no planner has written one (no bucket or no key).
func lastDecision(ctx context.Context, reg *registryclient.Client) (*core.Decision, error) {
	r, err := reg.Raw().GetKey(ctx, &registryv1.GetKeyRequest{Bucket: core.RegistryBucket, Key: core.RegistryDecisionKey})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound, codes.InvalidArgument: // no such key, or no such bucket
		return nil, nil
	default:
		return nil, err
	}
	d, err := core.DecodeDecision(r.GetKv().GetValue())
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// frontendFenced asks a frontend's /status.json which instances it has
// fenced out of routing.
func frontendFenced(ctx context.Context, c Config, addr string) ([]string, []QueueStatus, error) {
	url := strings.TrimSuffix(addr, "/")
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url+"/status.json", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET /status.json: %s (a frontend with --no-status-page cannot say what it fenced)", resp.Status)
	}
	var rep struct {
		Workers []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"workers"`
		Admission []QueueStatus `json:"admission"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&rep); err != nil {
		return nil, nil, fmt.Errorf("GET /status.json: %w", err)
	}
	var out []string
	for _, w := range rep.Workers {
		if w.State == "fenced" {
			out = append(out, w.ID)
		}
	}
	return out, rep.Admission, nil
}

func routerStatus(ctx context.Context, c Config, addr string) (RouterStatus, *routerv1.GetStatsResponse) {
	rs := RouterStatus{Addr: addr, Health: "unknown"}
	cc, err := c.dial(addr)
	if err != nil {
		rs.Error = err.Error()
		return rs, nil
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	h, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		rs.Health, rs.Error = "down", err.Error()
		return rs, nil
	}
	rs.Health = strings.ToLower(h.Status.String())
	s, err := routerv1.NewRouterServiceClient(cc).GetStats(cctx, &routerv1.GetStatsRequest{})
	if err != nil {
		rs.Error = err.Error()
		return rs, nil
	}
	rs.Mode, rs.Workers, rs.IndexedBlocks = s.Mode, len(s.Workers), s.IndexedBlocks
	rs.EventsApplied, rs.EventsDuplicate, rs.EventsGap = s.EventsApplied, s.EventsDuplicate, s.EventsGap
	if s.RestoredSnapshotTime != nil {
		rs.RestoredFrom = s.RestoredSnapshotTime.AsTime().UTC().Format(time.RFC3339)
	}
	return rs, s
}

// transportOf names the planes of t and their addresses, comma-separated
// for an instance that serves several ("tcp,http", "host:port,http://...").
func transportOf(t *commonv1.Transport) (kind, addr string) {
	addrs := transport.AddressesOf(t)
	if len(addrs) == 0 {
		return "-", "-"
	}
	kinds, as := make([]string, len(addrs)), make([]string, len(addrs))
	for i, a := range addrs {
		kinds[i], as[i] = string(a.Kind), a.Addr
	}
	return strings.Join(kinds, ","), strings.Join(as, ",")
}

// age prints a duration for a person: 850ms, 12s, 3m4s, 2h5m.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// Print writes the status as tables, one screen.
func (st *Status) Print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "MODELS\n")
	fmt.Fprintf(tw, "  NAME\tINSTANCES\tPOOLS\tBLOCK SIZE\tCONTEXT\n")
	for _, m := range st.Models {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%d\n", m.Name, m.Instances, m.Pool, m.BlockSize, m.ContextLength)
	}
	if len(st.Models) == 0 {
		fmt.Fprintf(tw, "  (none registered)\n")
	}
	fmt.Fprintf(tw, "\nINSTANCES\n")
	printInstances(tw, st.Instances)
	fmt.Fprintf(tw, "\nROUTERS\n")
	fmt.Fprintf(tw, "  ADDR\tHEALTH\tMODE\tWORKERS\tINDEXED BLOCKS\tEVENTS APPLIED\tDUPLICATE\tGAPS\tRESTORED FROM\n")
	for _, r := range st.Routers {
		restored := r.RestoredFrom
		if restored == "" {
			restored = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Addr, r.Health, dash(r.Mode), r.Workers, r.IndexedBlocks,
			r.EventsApplied, r.EventsDuplicate, r.EventsGap, restored)
	}
	if d := st.Planner; d != nil {
		fmt.Fprintf(tw, "\nPLANNER (decision %d, %s)\n", d.ID, d.At.UTC().Format(time.RFC3339))
		fmt.Fprintf(tw, "  MODEL\tROLE\tWORKERS\tTARGET\tFORECAST REQ/S\tWORKER CAPACITY\tREASON\n")
		for _, p := range d.Pools {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%.2f\t%.2f\t%s\n", p.Model, p.Role, p.Current, p.Target, p.Inputs.Forecast.RequestsPerSec, p.Inputs.CapacityRPS, p.Reason)
		}
	}
	if len(st.Queues) > 0 {
		fmt.Fprintf(tw, "\nADMISSION QUEUES\n")
		fmt.Fprintf(tw, "  FRONTEND\tMODEL\tFLEET\tQUEUED\tBY PRIORITY\tTOP TENANTS (IN FLIGHT/QUEUED HERE, TOKENS IN FLIGHT EVERYWHERE)\n")
		for _, q := range st.Queues {
			fleet := "has room"
			if q.Saturated {
				fleet = "saturated"
			}
			var bands, tenants []string
			for _, b := range q.Bands {
				bands = append(bands, fmt.Sprintf("%d: %d", b.Priority, b.Queued))
			}
			for _, t := range q.TopTenants {
				tenants = append(tenants, fmt.Sprintf("%s %d/%d %d", dash(t.Tenant), t.InFlight, t.Queued, t.FleetInFlightTokens))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", q.Frontend, q.Model, fleet, q.Queued, dash(strings.Join(bands, ", ")), dash(strings.Join(tenants, "; ")))
		}
	}
	fmt.Fprintf(tw, "\nEVENT STREAMS\n")
	fmt.Fprintf(tw, "  NAMESPACE\tSTREAM\tEVENTS\tBYTES\tSEQUENCES\tLAST EVENT\tCONSUMERS\n")
	for _, s := range st.Streams {
		if s.Error != "" {
			fmt.Fprintf(tw, "  %s\t(error: %s)\n", s.Namespace, s.Error)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d..%d\t%s\t%d\n", s.Namespace, s.Stream, s.Messages, s.Bytes, s.FirstSequence, s.LastSequence,
			dash(agoOrEmpty(s.LastEventAge)), s.Consumers)
	}
	if len(st.Streams) == 0 {
		fmt.Fprintf(tw, "  (no namespace has instances)\n")
	}
	tw.Flush()
	for _, p := range st.Problems {
		fmt.Fprintf(out, "\nproblem: %s", p)
	}
	if len(st.Problems) > 0 {
		fmt.Fprintln(out)
	}
}

func printInstances(tw io.Writer, ins []InstanceStatus) {
	fmt.Fprintf(tw, "  ID\tENDPOINT\tTRANSPORT\tROLE\tSTATE\tMODELS\tREQUESTS\tPREFILL BLOCKS\tDECODE BLOCKS\tINDEXED BLOCKS\tLAST EVENT\n")
	for _, in := range ins {
		fmt.Fprintf(tw, "  %s\t%s/%s/%s\t%s %s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", in.ID, in.Namespace, in.Component, in.Endpoint, in.Transport, in.Address,
			dash(in.Role), in.State, dash(in.Models), in.Requests, in.PrefillBlocks, in.DecodeBlocks, in.IndexedBlocks, dash(agoOrEmpty(in.LastEventAge)))
	}
	if len(ins) == 0 {
		fmt.Fprintf(tw, "  (none registered)\n")
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func agoOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return s + " ago"
}
