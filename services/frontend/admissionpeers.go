package frontend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	frontendv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/frontend/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Frontend replicas share their tenants' load over the eventbus, on NATS
// Core (nothing persisted: the state is current or worthless), rather than
// through the router: any number of router replicas may serve them, and a
// frontend may fall back to routing in process, while every frontend of a
// namespace shares one eventbusclient. Each replica publishes its whole state
// (AdmissionState) at most every peerMinInterval after a change and at
// least every peerHeartbeat; the others replace what they had of it, and
// forget a replica not heard from for peerExpiry (it died, or the bus is
// away: each replica then orders its queue by its own load alone).
const (
	peerMinInterval = 100 * time.Millisecond
	peerHeartbeat   = 2 * time.Second
	peerExpiry      = 3 * peerHeartbeat
)

// maxPeerTenants bounds the tenants a replica publishes and keeps of each
// peer: past it, the ones with the least load are left out.
const maxPeerTenants = 4096

// peerTable is what the other replicas last said, by replica; self is
// this replica's id.
type peerTable struct {
	replicas map[string]*peerState
	self     string
}

// peerState is one replica's last AdmissionState.
type peerState struct {
	id string
	at time.Time
	// inflight is each (model, tenant)'s tokens in flight; queued its
	// queued requests by band.
	inflight map[peerKey]uint64
	queued   map[peerKey]map[int32]uint32
	// served is each (model, tenant)'s service there as of at (see
	// TenantLoad.served_tokens); rate its request rate there
	// (TenantLoad.request_rate).
	served map[peerKey]float64
	rate   map[peerKey]float64
	// pending is each model's requests it let go whose route decision
	// had not come back.
	pending map[string]uint32
	// prefilling is each (model, tenant)'s requests in flight without a
	// first token (TenantLoad.prefilling_requests).
	prefilling map[peerKey]uint32
}

type peerKey struct{ model, tenant string }

func newPeerTable() *peerTable { return &peerTable{replicas: map[string]*peerState{}} }

// applyLocked replaces a replica's state.
func (p *peerTable) applyLocked(st *frontendv1.AdmissionState, at time.Time) {
	ps := &peerState{id: st.GetReplicaId(), at: at, inflight: map[peerKey]uint64{}, served: map[peerKey]float64{}, rate: map[peerKey]float64{},
		queued: map[peerKey]map[int32]uint32{}, pending: map[string]uint32{}, prefilling: map[peerKey]uint32{}}
	for i, t := range st.GetTenants() {
		if i >= maxPeerTenants {
			break
		}
		k := peerKey{t.GetModel(), t.GetTenant()}
		ps.inflight[k] += t.GetInflightTokens()
		if v := t.GetServedTokens(); v > 0 && !math.IsInf(v, 1) {
			ps.served[k] += v
		}
		if v := t.GetRequestRate(); v > 0 && !math.IsInf(v, 1) {
			ps.rate[k] = max(ps.rate[k], v)
		}
		ps.pending[k.model] += t.GetPendingRequests()
		ps.prefilling[k] += t.GetPrefillingRequests()
		if q := t.GetQueuedRequests(); q > 0 {
			if ps.queued[k] == nil {
				ps.queued[k] = map[int32]uint32{}
			}
			ps.queued[k][t.GetPriority()] += q
		}
	}
	p.replicas[st.GetReplicaId()] = ps
}

// liveLocked calls f with every replica heard from within peerExpiry,
// forgetting the others.
func (p *peerTable) liveLocked(now time.Time, f func(*peerState)) {
	for id, ps := range p.replicas {
		if now.Sub(ps.at) > peerExpiry {
			delete(p.replicas, id)
			continue
		}
		f(ps)
	}
}

// inflightLocked is a tenant's tokens in flight for model at the other
// replicas.
func (p *peerTable) inflightLocked(model, tenant string, now time.Time) uint64 {
	var n uint64
	p.liveLocked(now, func(ps *peerState) { n += ps.inflight[peerKey{model, tenant}] })
	return n
}

// prefillingLocked is a tenant's requests of model without a first token
// at the other replicas.
func (p *peerTable) prefillingLocked(model, tenant string, now time.Time) uint32 {
	var n uint32
	p.liveLocked(now, func(ps *peerState) { n += ps.prefilling[peerKey{model, tenant}] })
	return n
}

// servedLocked is a tenant's service for model at the other replicas,
// each replica's as it last said, aged by the time since.
func (p *peerTable) servedLocked(model, tenant string, now time.Time) float64 {
	var n float64
	p.liveLocked(now, func(ps *peerState) { n += aged(ps.served[peerKey{model, tenant}], ps.at, now) })
	return n
}

// rateLocked is a tenant's request rate for model at the other replicas
// together.
func (p *peerTable) rateLocked(model, tenant string, now time.Time) float64 {
	var n float64
	p.liveLocked(now, func(ps *peerState) { n += ps.rate[peerKey{model, tenant}] })
	return n
}

// queuedLocked is how many requests of model tenant queues at the other
// replicas, in every band.
func (p *peerTable) queuedLocked(model, tenant string, now time.Time) uint32 {
	var n uint32
	p.liveLocked(now, func(ps *peerState) {
		for _, c := range ps.queued[peerKey{model, tenant}] {
			n += c
		}
	})
	return n
}

// pendingLocked is how many requests of model the other replicas let go
// without their route decision back, as they last said.
func (p *peerTable) pendingLocked(model string, now time.Time) uint32 {
	var n uint32
	p.liveLocked(now, func(ps *peerState) { n += ps.pending[model] })
	return n
}

// queuedBelowLocked says whether another replica has a tenant queued for
// model in band prio or above whose service over every replica (local
// gives this replica's share; see admission.attainedLocked) is below
// load: that tenant is owed the capacity before the one of load. Every
// replica hears the same word of room, so on a tie (as much service: the
// same tenant queued at both, say; sums of the replicas' shares in another
// order than load's count as the same) one of them goes: the one queueing
// more of it in band prio or above, then the one of the lower id. Were
// both to go, one request would go past the threshold at every room; the
// longer queue going first keeps both queues moving. The counts compared
// are the ones each replica last published (queued is this replica's,
// admission.publishedFromLocked), which both replicas hold alike: a
// replica's count now against the other's as last heard would let both
// go whenever each queued more since it last said, as a flood's arrivals
// at both do between two messages.
func (p *peerTable) queuedBelowLocked(model string, prio int32, load float64, queued uint32, local func(string) float64, now time.Time) bool {
	found := false
	p.liveLocked(now, func(ps *peerState) {
		if found {
			return
		}
		for k, bands := range ps.queued {
			if k.model != model {
				continue
			}
			var n uint32
			for b, c := range bands {
				if b >= prio {
					n += c
				}
			}
			if n == 0 {
				continue
			}
			total := local(k.tenant) + p.servedLocked(model, k.tenant, now)
			same := math.Abs(total-load) <= 1e-9*max(total, load)
			if !same && total < load || same && (n > queued || n == queued && ps.id < p.self) {
				found = true
				return
			}
		}
	})
	return found
}

// applyPeerLocked takes in another replica's state: its tenants' load,
// and its tenants' last requests (seen that long ago) for the models
// queued here, so that the last rooms are kept for a tenant that sends
// through another replica too (keptLocked).
func (a *admission) applyPeerLocked(st *frontendv1.AdmissionState) {
	now := a.now()
	a.peers.applyLocked(st, now)
	for i, t := range st.GetTenants() {
		if i >= maxPeerTenants {
			break
		}
		idle := t.GetIdleSeconds()
		if !(idle >= 0) || idle > activeWindow.Seconds() {
			continue
		}
		if mq := a.models[t.GetModel()]; mq != nil {
			a.seeLocked(mq, t.GetTenant(), t.GetPriority(), now.Add(-time.Duration(idle*float64(time.Second))))
		}
	}
}

// stateLocked is this replica's AdmissionState: every tenant with
// requests here in flight or queued, and every tenant whose last request
// here came within activeWindow.
func (a *admission) stateLocked(replica string) *frontendv1.AdmissionState {
	st := &frontendv1.AdmissionState{ReplicaId: replica}
	now := a.now()
	for _, mq := range a.models {
		for tenant, tl := range mq.load {
			if len(st.Tenants) >= maxPeerTenants {
				return st
			}
			rate, idle := a.sentLocked(mq, tenant, now)
			st.Tenants = append(st.Tenants, &frontendv1.TenantLoad{Model: mq.name, Tenant: tenant, Priority: tl.prio,
				InflightTokens: tl.inflightTokens, InflightRequests: tl.inflight, PendingRequests: tl.pending, PrefillingRequests: tl.prefilling, ServedTokens: a.servedLocked(mq, tenant, now),
				RequestRate: rate, IdleSeconds: idle})
			for b, n := range tl.queuedBy {
				st.Tenants = append(st.Tenants, &frontendv1.TenantLoad{Model: mq.name, Tenant: tenant, Priority: b, QueuedRequests: n, IdleSeconds: idle})
			}
		}
		for tenant, s := range mq.seen {
			if len(st.Tenants) >= maxPeerTenants {
				return st
			}
			if mq.load[tenant] != nil || s.localAt.IsZero() || now.Sub(s.localAt) > activeWindow {
				continue
			}
			rate, idle := a.sentLocked(mq, tenant, now)
			st.Tenants = append(st.Tenants, &frontendv1.TenantLoad{Model: mq.name, Tenant: tenant, Priority: s.prio,
				ServedTokens: a.servedLocked(mq, tenant, now), RequestRate: rate, IdleSeconds: idle})
		}
	}
	return st
}

// queuedOf is what st says each (model, tenant) queues, by band.
func queuedOf(st *frontendv1.AdmissionState) map[peerKey]map[int32]uint32 {
	q := map[peerKey]map[int32]uint32{}
	for _, t := range st.GetTenants() {
		if n := t.GetQueuedRequests(); n > 0 {
			k := peerKey{t.GetModel(), t.GetTenant()}
			if q[k] == nil {
				q[k] = map[int32]uint32{}
			}
			q[k][t.GetPriority()] += n
		}
	}
	return q
}

// publishedFromLocked is how many requests of model tenant queues here in
// band prio and above, as this replica last published.
func (a *admission) publishedFromLocked(model, tenant string, prio int32) uint32 {
	var n uint32
	for b, c := range a.published[peerKey{model, tenant}] {
		if b >= prio {
			n += c
		}
	}
	return n
}

// sentLocked is tenant's request rate here and the seconds since its last
// request here (TenantLoad.request_rate, .idle_seconds): the latter past
// activeWindow when it sent none here lately.
func (a *admission) sentLocked(mq *modelQueue, tenant string, now time.Time) (rate, idle float64) {
	s, ok := mq.seen[tenant]
	if !ok || s.localAt.IsZero() {
		return 0, math.Inf(1)
	}
	return requestRate(s.gaps, s.gapTime), max(now.Sub(s.localAt).Seconds(), 0)
}

// admissionPeers publishes this replica's state and applies the others'.
type admissionPeers struct {
	a       *admission
	bus     *eventbusclient.Client
	subject string
	replica string
	log     *slog.Logger
}

// newReplicaID is a random replica id.
func newReplicaID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startPeers shares a's state with the other replicas of namespace until
// ctx ends; the returned function waits for its goroutines.
func startPeers(ctx context.Context, a *admission, bus *eventbusclient.Client, namespace string, log *slog.Logger) (wait func()) {
	p := &admissionPeers{a: a, bus: bus, subject: wire.AdmissionSubject(namespace), replica: newReplicaID(), log: log}
	a.mu.Lock()
	a.peers = newPeerTable()
	a.peers.self = p.replica
	a.changed = make(chan struct{}, 1)
	a.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); p.publish(ctx) }()
	go func() { defer func() { done <- struct{}{} }(); p.subscribe(ctx, namespace) }()
	return func() { <-done; <-done }
}

// publish sends the state after each change, at most every
// peerMinInterval, and every peerHeartbeat while this replica has any.
func (p *admissionPeers) publish(ctx context.Context) {
	heartbeat := time.NewTicker(peerHeartbeat)
	defer heartbeat.Stop()
	empty := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.a.changed:
		case <-heartbeat.C:
			if empty {
				continue
			}
		}
		p.a.mu.Lock()
		st := p.a.stateLocked(p.replica)
		p.a.published = queuedOf(st)
		p.a.mu.Unlock()
		empty = len(st.Tenants) == 0
		ev, err := eventbusclient.NewEvent(p.subject, st)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = p.bus.Raw().Publish(pctx, &eventbusv1.PublishRequest{Event: ev, Core: true})
			cancel()
		}
		if err != nil && ctx.Err() == nil {
			p.log.Debug("admission state not published", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(peerMinInterval):
		}
	}
}

// subscribe applies the other replicas' states, resubscribing after
// failures.
func (p *admissionPeers) subscribe(ctx context.Context, namespace string) {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	for ctx.Err() == nil {
		sub, err := p.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: wire.Namespace(p.subject), FilterSubject: p.subject, Core: true})
		if err == nil {
			for {
				var ev *eventbusv1.DeliveredEvent
				if ev, err = sub.Next(ctx); err != nil {
					break
				}
				bo.Reset()
				st, derr := eventbusclient.Decode[frontendv1.AdmissionState](ev)
				if derr != nil || st.GetReplicaId() == p.replica || st.GetReplicaId() == "" {
					continue
				}
				p.a.mu.Lock()
				p.a.applyPeerLocked(st)
				p.a.mu.Unlock()
				p.a.repump()
			}
			_ = sub.Close()
		}
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return
		}
		p.log.Debug("admission peers subscription failed", "err", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(bo.Next()):
		}
	}
}
