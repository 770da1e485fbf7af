// Package planner is Switchyard's planner: it reads what the fleet
// publishes (the workers' load reports, with their timing models and
// request counts, from the eventbus; instances, roles and model cards from
// the registry), decides every --adjustment-interval how many workers each
// pool (a model's agg, prefill or decode workers) needs to hold the TTFT
// and ITL objectives (package core), writes every decision to the
// registry's planner bucket, and carries it out through a connector:
// local processes, a Kubernetes Deployment's scale subresource, or an
// external runner that acknowledges the decision's id.
package planner

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// EnvPrefix is the prefix of the planner's generic environment variables
// (--ttft-slo: SWITCHYARD_PLANNER_TTFT_SLO).
const EnvPrefix = "SWITCHYARD_PLANNER_"

// EnvVars maps flags to their documented environment variables.
var EnvVars = map[string]string{
	"registry-addr":          "SWITCHYARD_REGISTRY_ADDR",
	"eventbus-addr":          "SWITCHYARD_EVENTBUS_ADDR",
	"auth-token":             authtoken.EnvToken,
	"client-auth-token-file": authtoken.EnvTokenFile,
}

// Bucket is the registry bucket the planner writes its decisions to.
// Its keys: DecisionKey, the last decision (core.Decision as JSON);
// HistoryPrefix plus the id in 20 decimal digits, the last HistoryLen
// decisions; AckKey, the id an external runner has carried out (virtual
// connector), in decimal.
const (
	Bucket        = core.RegistryBucket
	DecisionKey   = core.RegistryDecisionKey
	HistoryPrefix = "decisions/"
	AckKey        = core.RegistryAckKey
	HistoryLen    = 20
)

// Config is the planner's configuration.
type Config struct {
	Server grpcserver.Config
	// StatusAddr serves /status.json (the last decisions) and /health.
	StatusAddr string
	// RegistryAddr and EventbusAddr are comma lists of replicas.
	RegistryAddr, EventbusAddr string
	// Namespace is the workers' namespace; their load reports are read
	// from {namespace}.*.load_metrics.
	Namespace string
	// TTFTSLO and ITLSLO are the objectives, in ms.
	TTFTSLO, ITLSLO float64
	// MinReplicas and MaxReplicas bound every pool; GPUBudget all pools
	// together (0: none), GPUsPerWorker what one worker takes.
	MinReplicas, MaxReplicas, GPUBudget, GPUsPerWorker int
	// AdjustmentInterval is the time between decisions.
	AdjustmentInterval time.Duration
	// Predictor is the demand predictor (core.PredictorNames).
	Predictor string
	// WorkerStartup is how long a started worker takes to serve: the
	// forecast looks that far ahead.
	WorkerStartup time.Duration
	// DemandQuantile is how sure a pool's size is to hold the forecast
	// level of the rate (core.Config.Quantile), and the share of
	// ObjectiveWindow windows it sizes to hold the objectives in.
	DemandQuantile float64
	// ObjectiveWindow is the span over which the objectives are judged
	// (core.Config.JudgedWindow); 0 judges them over all requests.
	ObjectiveWindow time.Duration
	// Connector carries decisions out: local, kubernetes or virtual.
	Connector string
	// AckTimeout is how long the virtual connector waits for a decision's
	// acknowledgement before the planner decides again without it.
	AckTimeout time.Duration
	// Local is the local connector's settings.
	Local LocalConfig
	// Kube is the kubernetes connector's settings.
	Kube KubeConfig
	grpcclient.Security
}

// Connectors lists the valid --connector values.
var Connectors = []string{"local", "kubernetes", "virtual"}

// RegisterFlags adds the planner's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Server.RegisterFlags(fs, ":7004", ":9104")
	d := core.DefaultConfig()
	fs.StringVar(&c.StatusAddr, "status-addr", ":9105", "HTTP listen address for /status.json (the last decisions and why) and /health (empty: off)")
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated")
	fs.StringVar(&c.Namespace, "namespace", "dynamo", "the workers' namespace (their load reports are read from {namespace}.*.load_metrics)")
	fs.Float64Var(&c.TTFTSLO, "ttft-slo", d.TTFTMs, "time to first token objective, ms")
	fs.Float64Var(&c.ITLSLO, "itl-slo", d.ITLMs, "inter-token latency objective, ms")
	fs.IntVar(&c.MinReplicas, "min-replicas", d.MinReplicas, "fewest workers of every pool")
	fs.IntVar(&c.MaxReplicas, "max-replicas", d.MaxReplicas, "most workers of every pool")
	fs.IntVar(&c.GPUBudget, "gpu-budget", 0, "most GPUs of all pools together (0: no bound)")
	fs.IntVar(&c.GPUsPerWorker, "gpus-per-worker", 1, "GPUs one worker takes, for --gpu-budget")
	fs.DurationVar(&c.AdjustmentInterval, "adjustment-interval", d.Interval, "time between decisions")
	fs.StringVar(&c.Predictor, "predictor", d.Predictor, "demand predictor: "+strings.Join(core.PredictorNames(), ", ")+
		" (window: the mean of the last intervals; trend: their least-squares line, read one interval ahead)")
	fs.DurationVar(&c.WorkerStartup, "worker-startup", 0, "how long a started worker takes to serve (start, load the model, register): the demand is forecast that far ahead")
	fs.Float64Var(&c.DemandQuantile, "demand-quantile", d.Quantile, "how sure a pool's size is to hold the forecast rate, in [0.5, 1): the forecast plus this normal quantile of its error (0.5: the forecast alone)")
	fs.DurationVar(&c.ObjectiveWindow, "objective-window", d.JudgedWindow, "span over which the objectives are judged: pools are sized so that in --demand-quantile of such windows the 90th percentiles of the window's own requests hold them (0: over all requests)")
	fs.StringVar(&c.Connector, "connector", "virtual", "how decisions are carried out: "+strings.Join(Connectors, ", ")+
		" (virtual: only written to the registry, for an external runner that acknowledges them)")
	fs.DurationVar(&c.AckTimeout, "ack-timeout", 5*time.Minute, "virtual connector: how long a decision waits for its acknowledgement before the planner decides again")
	c.Local.RegisterFlags(fs)
	c.Kube.RegisterFlags(fs)
	c.Security.RegisterFlags(fs, "the registry and eventbus")
}

// Complete reads the files the settings name.
func (c *Config) Complete() error {
	if err := c.Server.Complete(); err != nil {
		return err
	}
	return c.Security.Complete()
}

// Validate checks the configuration; it reads nothing and changes nothing.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if err := c.core().Validate(); err != nil {
		return fmt.Errorf("%w (--ttft-slo, --itl-slo, --min-replicas, --max-replicas, --gpu-budget, --adjustment-interval, --predictor, --worker-startup, --demand-quantile, --objective-window)", err)
	}
	switch {
	case strings.TrimSpace(c.RegistryAddr) == "":
		return errors.New("--registry-addr (SWITCHYARD_REGISTRY_ADDR) is required")
	case strings.TrimSpace(c.EventbusAddr) == "":
		return errors.New("--eventbus-addr (SWITCHYARD_EVENTBUS_ADDR) is required: the planner reads the workers' load from it")
	case c.Namespace == "":
		return errors.New("--namespace must not be empty")
	case c.GPUsPerWorker < 1:
		return errors.New("--gpus-per-worker must be at least 1")
	case c.AckTimeout <= 0:
		return errors.New("--ack-timeout must be positive")
	}
	switch c.Connector {
	case "local":
		if err := c.Local.Validate(); err != nil {
			return err
		}
	case "kubernetes":
		if err := c.Kube.Validate(); err != nil {
			return err
		}
	case "virtual":
	default:
		return fmt.Errorf("invalid --connector %q (SWITCHYARD_PLANNER_CONNECTOR): valid values are %s", c.Connector, strings.Join(Connectors, ", "))
	}
	return c.Security.Validate()
}

// core is the decision's policy from the flags.
func (c Config) core() core.Config {
	cc := core.DefaultConfig()
	cc.TTFTMs, cc.ITLMs = c.TTFTSLO, c.ITLSLO
	cc.Interval = c.AdjustmentInterval
	cc.MinReplicas, cc.MaxReplicas = c.MinReplicas, c.MaxReplicas
	cc.GPUBudget, cc.GPUsPerWorker = c.GPUBudget, c.GPUsPerWorker
	cc.Predictor = c.Predictor
	cc.Lead = c.WorkerStartup
	cc.Quantile = c.DemandQuantile
	cc.JudgedWindow = c.ObjectiveWindow
	// Data older than three intervals is stale (a worker reports every
	// second).
	cc.MaxAge = 3 * c.AdjustmentInterval
	return cc
}
