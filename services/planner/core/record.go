package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
)

// Where decisions are kept in the registry: the bucket RegistryBucket,
// the last decision under RegistryDecisionKey (a record as Encode writes
// it), and an external runner's acknowledgement under RegistryAckKey (the
// decimal id of the last decision it carried out).
const (
	RegistryBucket      = "planner"
	RegistryDecisionKey = "decision"
	RegistryAckKey      = "ack"
)

// MaxRecordBytes bounds an encoded decision, as stored in the registry's
// planner bucket: the registry's limit on a value (1 MiB).
const MaxRecordBytes = 1 << 20

// MaxPools bounds the pools of one decision record.
const MaxPools = 1024

var modelName = regexp.MustCompile(`^[^\x00-\x1f]{1,256}$`)

// Encode is the decision as the planner stores it: JSON, with the fields
// named by their json tags.
func (d Decision) Encode() ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("decision record of %d bytes: over the limit of %d", len(b), MaxRecordBytes)
	}
	return b, nil
}

// DecodeDecision reads a stored decision and checks it: an id, known
// roles, model names of 1-256 printable bytes, counts that are not
// negative and at most MaxPools pools, finite inputs. Fields it does not
// know are skipped: a newer planner's record adds inputs that an older
// reader (switchyard status, a virtual connector's runner) need not
// understand to show the decision.
func DecodeDecision(b []byte) (Decision, error) {
	var d Decision
	if len(b) > MaxRecordBytes {
		return d, fmt.Errorf("decision record of %d bytes: over the limit of %d", len(b), MaxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return Decision{}, fmt.Errorf("decision record: %w", err)
	}
	if dec.More() {
		return Decision{}, errors.New("decision record: data after the object")
	}
	if d.ID == 0 {
		return Decision{}, errors.New("decision record: no id")
	}
	if len(d.Pools) > MaxPools {
		return Decision{}, fmt.Errorf("decision record: %d pools, over the limit of %d", len(d.Pools), MaxPools)
	}
	for i, p := range d.Pools {
		switch {
		case !modelName.MatchString(p.Model):
			return Decision{}, fmt.Errorf("decision record: pool %d: model name must be 1-256 printable bytes", i)
		case p.Role != Agg && p.Role != Prefill && p.Role != Decode:
			return Decision{}, fmt.Errorf("decision record: pool %d: role %q: valid roles are agg, prefill, decode", i, p.Role)
		case p.Current < 0 || p.Target < 0:
			return Decision{}, fmt.Errorf("decision record: pool %d: negative count", i)
		case len(p.Drain) > p.Current:
			return Decision{}, fmt.Errorf("decision record: pool %d: %d workers to drain of %d", i, len(p.Drain), p.Current)
		}
		in := p.Inputs
		for _, v := range []float64{in.CapacityRPS, in.TTFTMs, in.ITLMs} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return Decision{}, fmt.Errorf("decision record: pool %d: inputs must be finite and not negative", i)
			}
		}
		if !in.Observed.valid() || !in.Forecast.valid() || in.Workers < 0 || in.Starting < 0 || in.Fresh < 0 {
			return Decision{}, fmt.Errorf("decision record: pool %d: inputs must be finite and not negative", i)
		}
	}
	return d, nil
}

// ParseAck reads an acknowledgement: the decimal id of the decision an
// external runner has carried out, nothing else (surrounding white space
// allowed), at most 20 digits and not 0.
func ParseAck(b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	if s == "" || len(s) > 20 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("acknowledgement %q: want the decimal id of a decision", truncate(s))
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("acknowledgement %q: want the decimal id of a decision", truncate(s))
	}
	return id, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
