package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

func routeFlags(fs *flag.FlagSet) func(context.Context, Config, io.Writer) error {
	model := fs.String("model", "", "model name, as in /v1/models")
	prompt := fs.String("prompt", "", "prompt text, tokenized as /v1/completions would")
	messages := fs.String("messages", "", "JSON file of chat messages ([{\"role\":..,\"content\":..}] or a whole chat request), rendered as /v1/chat/completions would")
	session := fs.String("session-id", "", "the conversation's session id (x-session-id): shows its binding to a worker and what the router would do with it")
	salt := fs.String("cache-salt", "", "the tenant's cache_salt, hashed into the prompt's first block")
	return func(ctx context.Context, c Config, out io.Writer) error {
		if *model == "" || (*prompt == "") == (*messages == "") {
			return errors.New("give --model and one of --prompt or --messages")
		}
		body, chat, err := requestBody(*model, *prompt, *messages)
		if err != nil {
			return err
		}
		ex, n, err := explain(ctx, c, *model, body, chat, routeKeys{session: *session, salt: *salt})
		if err != nil {
			return err
		}
		if c.Output == "json" {
			b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(ex)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "%s\n", b)
			return err
		}
		printExplanation(out, *model, n, ex)
		return nil
	}
}

// requestBody builds the OpenAI request body the frontend would get.
func requestBody(model, prompt, messagesFile string) ([]byte, bool, error) {
	if prompt != "" {
		b, err := json.Marshal(map[string]any{"model": model, "prompt": prompt})
		return b, false, err
	}
	raw, err := os.ReadFile(messagesFile)
	if err != nil {
		return nil, false, err
	}
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		// A whole chat request: keep its other fields (tools, template kwargs).
		var req map[string]json.RawMessage
		if err := json.Unmarshal(raw, &req); err != nil || req["messages"] == nil {
			return nil, false, fmt.Errorf("%s: want a JSON array of messages or an object with \"messages\"", messagesFile)
		}
		req["model"], _ = json.Marshal(model)
		b, err := json.Marshal(req)
		return b, true, err
	}
	b, err := json.Marshal(map[string]any{"model": model, "messages": msgs})
	return b, true, err
}

// routeKeys are the session id and cache salt a request carries beside its
// prompt.
type routeKeys struct{ session, salt string }

// explain tokenizes body with the model's own tokenizer and template and
// asks the router why it would pick a worker. It returns the explanation and
// the prompt's token count.
func explain(ctx context.Context, c Config, model string, body []byte, chat bool, keys routeKeys) (*routerv1.ExplainRouteResponse, int, error) {
	reg, err := c.registry()
	if err != nil {
		return nil, 0, err
	}
	defer reg.Close()
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cards, err := reg.Raw().ListModels(cctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{}})
	if err != nil {
		return nil, 0, fmt.Errorf("registry %s: %w", c.RegistryAddr, err)
	}
	var card *registryv1.ModelCard
	for _, cd := range cards.GetCards() {
		if cd.ModelName == model {
			card = cd
			break
		}
	}
	if card == nil {
		return nil, 0, fmt.Errorf("no worker registered model %q", model)
	}
	bus, err := c.eventbus()
	if err != nil {
		return nil, 0, err
	}
	defer bus.Close()
	// Fetching and parsing a tokenizer takes longer than a call; the
	// frontend allows it a minute too.
	tctx, tcancel := context.WithTimeout(ctx, max(c.Timeout, time.Minute))
	defer tcancel()
	ids, err := preprocess.PromptTokens(tctx, bus, card, body, chat)
	if err != nil {
		return nil, 0, fmt.Errorf("tokenize: %w", err)
	}
	var lastErr error
	for _, addr := range splitAddrs(c.RouterAddr) {
		cc, err := c.dial(addr)
		if err != nil {
			return nil, 0, err
		}
		rctx, rcancel := context.WithTimeout(ctx, c.Timeout)
		ex, err := routerv1.NewRouterServiceClient(cc).ExplainRoute(rctx, &routerv1.ExplainRouteRequest{
			Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}}, TokenIds: ids, SessionId: keys.session, CacheSalt: keys.salt})
		rcancel()
		cc.Close()
		if err == nil {
			return ex, len(ids), nil
		}
		lastErr = fmt.Errorf("router %s: %w", addr, err)
	}
	if lastErr == nil {
		lastErr = errors.New("no --router-addr")
	}
	return nil, 0, lastErr
}

func printExplanation(out io.Writer, model string, tokens int, ex *routerv1.ExplainRouteResponse) {
	fmt.Fprintf(out, "model %s: %d prompt tokens, %d full blocks of %d tokens\n", model, tokens, ex.RequestBlocks, ex.BlockSize)
	fmt.Fprintf(out, "router mode %s, overlap weight %g, temperature %g\n", ex.Mode, ex.OverlapWeight, ex.Temperature)
	printSession(out, ex.GetSession())
	fmt.Fprintln(out)
	if ex.Disaggregation == "" {
		printCandidates(out, ex.Candidates, ex.RequestBlocks, ex.InstanceId, ex.DpRank)
		fmt.Fprintf(out, "\npick %s: %s\n", core.WorkerName(ex.InstanceId, ex.DpRank), ex.Reason)
		return
	}
	// A model with prefill and decode pools: each leg's candidates, with
	// the cost of the leg they would serve.
	fmt.Fprintf(out, "disaggregation: %s\n\ndecode and aggregated workers:\n", ex.Disaggregation)
	printCandidates(out, ex.Candidates, ex.RequestBlocks, ex.InstanceId, ex.DpRank)
	fmt.Fprintf(out, "\nprefill workers:\n")
	printCandidates(out, ex.PrefillCandidates, ex.RequestBlocks, ex.PrefillInstanceId, ex.PrefillDpRank)
	if ex.PrefillInstanceId != 0 {
		fmt.Fprintf(out, "\npick prefill %s, decode %s: %s\n", core.WorkerName(ex.PrefillInstanceId, ex.PrefillDpRank),
			core.WorkerName(ex.InstanceId, ex.DpRank), ex.Reason)
		return
	}
	fmt.Fprintf(out, "\npick %s: %s\n", core.WorkerName(ex.InstanceId, ex.DpRank), ex.Reason)
}

// printSession prints a session's binding as the decision would leave it.
func printSession(out io.Writer, b *routerv1.SessionBinding) {
	if b == nil {
		return
	}
	last := "never used"
	if t := b.GetLastUsed(); t != nil {
		last = "last used " + t.AsTime().UTC().Format(time.RFC3339)
	}
	switch b.Outcome {
	case core.SessionNew:
		fmt.Fprintf(out, "session %s: no live binding; this request would bind it to %x (%s affinity)\n", b.SessionId, b.InstanceId, b.Affinity)
	case core.SessionHit:
		fmt.Fprintf(out, "session %s: bound to %x (%s affinity, %s); this request stays there\n", b.SessionId, b.InstanceId, b.Affinity, last)
	default:
		fmt.Fprintf(out, "session %s: bound to %x (%s affinity, %s); this request would move it to %x (%s)\n",
			b.SessionId, b.PreviousInstanceId, b.Affinity, last, b.InstanceId, b.Outcome)
	}
}

// printCandidates prints a table of candidates (a worker's data-parallel
// ranks each a line, instance/rank), marking the one picked.
func printCandidates(out io.Writer, cands []*routerv1.ExplainedCandidate, blocks uint32, picked uint64, pickedRank uint32) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  INSTANCE\tADDRESS\tCACHED BLOCKS\tPREFILL BLOCKS\tDECODE BLOCKS\tCOST\tPICK\n")
	for _, cd := range cands {
		k := cd.Candidate
		pick := ""
		if k.InstanceId == picked && k.DpRank == pickedRank {
			pick = "<-"
		}
		_, addr := transportOf(cd.Transport)
		fmt.Fprintf(tw, "  %s\t%s\t%d/%d\t%d\t%d\t%.4g\t%s\n", core.WorkerName(k.InstanceId, k.DpRank), addr, k.OverlapBlocks, blocks, k.PrefillBlocks, k.DecodeBlocks, k.Cost, pick)
	}
	tw.Flush()
}
