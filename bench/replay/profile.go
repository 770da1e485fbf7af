package replay

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// RateProfile shapes a trace's arrival rate over time. Its factor at time
// t multiplies the trace's mean rate: 1 everywhere for flat; for diurnal
// 1 - Amplitude*cos(2*pi*t/Period) (the trough at the start, the peak half
// a period later); for bursts, BurstFactor during bursts of BurstLength
// that start at Poisson times BurstEvery apart on average, else 1;
// diurnal+bursts multiplies the two.
type RateProfile struct {
	Kind        string
	Period      time.Duration
	Amplitude   float64
	BurstEvery  time.Duration
	BurstLength time.Duration
	BurstFactor float64
}

// RateProfiles lists the valid RateProfile kinds.
var RateProfiles = []string{"flat", "diurnal", "bursts", "diurnal+bursts"}

// Validate checks the profile's knobs.
func (p RateProfile) Validate() error {
	if p.Kind == "" || p.Kind == "flat" {
		return nil
	}
	if !slices.Contains(RateProfiles, p.Kind) {
		return fmt.Errorf("replay: generator: --rate-profile %q: valid profiles are %s", p.Kind, strings.Join(RateProfiles, ", "))
	}
	if strings.Contains(p.Kind, "diurnal") && (p.Period <= 0 || !(p.Amplitude >= 0 && p.Amplitude < 1)) {
		return errors.New("replay: generator: a diurnal profile needs a positive --profile-period and --profile-amplitude in [0, 1)")
	}
	if strings.Contains(p.Kind, "bursts") && (p.BurstEvery <= 0 || p.BurstLength <= 0 || !(p.BurstFactor >= 1) || math.IsInf(p.BurstFactor, 0)) {
		return errors.New("replay: generator: a bursts profile needs positive --burst-every and --burst-length and a finite --burst-factor >= 1")
	}
	return nil
}

// Warp moves each request's arrival from constant-rate time to the
// profile's, so that arrivals come Factor(t) times as often at t and the
// trace's order is kept: the request at u seconds moves to the t where the
// integral of the factor from 0 to t reaches u. Bursts are placed by seed.
// Requests must be in arrival order.
func (p RateProfile) Warp(reqs []Request, seed uint64) {
	if p.Kind == "" || p.Kind == "flat" || len(reqs) == 0 {
		return
	}
	r := rand.New(rand.NewPCG(seed, 0xb0057))
	var bursts [][2]float64 // [start, end) in seconds
	nextBurst := 0.0
	burstsUntil := func(t float64) {
		for nextBurst <= t {
			nextBurst += r.ExpFloat64() * p.BurstEvery.Seconds()
			bursts = append(bursts, [2]float64{nextBurst, nextBurst + p.BurstLength.Seconds()})
		}
	}
	factor := func(t float64) float64 {
		f := 1.0
		if strings.Contains(p.Kind, "diurnal") {
			f *= 1 - p.Amplitude*math.Cos(2*math.Pi*t/p.Period.Seconds())
		}
		if strings.Contains(p.Kind, "bursts") {
			burstsUntil(t)
			for i := len(bursts) - 1; i >= 0 && bursts[i][1] > t-p.BurstLength.Seconds(); i-- {
				if t >= bursts[i][0] && t < bursts[i][1] {
					f *= p.BurstFactor
					break
				}
			}
		}
		return f
	}
	// Integrate in steps of 10 ms of profile time.
	const dt = 0.01
	t, area := 0.0, 0.0
	for i := range reqs {
		u := reqs[i].Arrival.Seconds()
		for {
			a := factor(t) * dt
			if area+a >= u {
				// Within this step the factor is constant: interpolate.
				reqs[i].Arrival = time.Duration((t + (u-area)/factor(t)) * float64(time.Second))
				break
			}
			area += a
			t += dt
		}
	}
}
