package frontend_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestNodeOpenAIClient proves a second real client: the npm openai package
// (installed by .ci/run with `npm ci` in testdata/node) streams one chat,
// and runs tool calls (streamed and not) and reasoning (tools.mjs); the
// Vercel AI SDK and LangChain run their tool loops (agents.mjs); and each
// asks for structured outputs (structured.mjs: generateObject,
// withStructuredOutput, response_format json_schema); and each runs
// function tools on the Responses API (responses.mjs) and embeds texts
// (embed.mjs); the npm openai package also sends completions with echo and
// logprobs (echo.mjs).
func TestNodeOpenAIClient(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "node")
	node, err := exec.LookPath("node")
	missing := err != nil
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		missing = true
	}
	if missing {
		msg := "needs node and the npm openai package: run `npm ci` in services/frontend/testdata/node"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := startStack(t, stackOpts{plane: transport.PlaneTCP})
	s.addMocker(0)
	s.waitInstances(1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "chat.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.url+"/v1", "MODEL="+testModel)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 || lines[len(lines)-1] != "finish_reason=length" || strings.TrimSpace(lines[0]) == "" {
		t.Fatalf("node client output:\n%s", out)
	}
	for script, last := range map[string]string{"tools.mjs": "ok reasoning", "agents.mjs": "ok langchain bindTools stream",
		"structured.mjs": "ok openai response_format json_schema", "responses.mjs": "ok langchain responses bindTools",
		"echo.mjs": "ok echo stream", "embed.mjs": "ok langchain embedQuery"} {
		cmd = exec.CommandContext(ctx, node, script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.url+"/v1", "MODEL="+testModel)
		out, err = cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), last) {
			t.Fatalf("node %s: %v\n%s", script, err, out)
		}
	}
}
