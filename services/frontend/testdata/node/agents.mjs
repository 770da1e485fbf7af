// Agent frameworks against the frontend at process.env.OPENAI_BASE_URL (a
// mocker that answers like Qwen3 behind it): the Vercel AI SDK's
// generateText with a tool it executes (two steps: the call, then the answer
// to its result), and LangChain's bindTools, invoked and streamed. Prints
// one "ok <check>" line per check; exits non-zero on the first failure.
import assert from "node:assert/strict";
import { generateText, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";

const baseURL = process.env.OPENAI_BASE_URL;
const model = process.env.MODEL;

const provider = createOpenAICompatible({ name: "switchyard", baseURL, apiKey: "unused" });
let executed = null;
const result = await generateText({
  model: provider(model),
  prompt: "What is the weather in Paris?",
  maxOutputTokens: 100,
  maxRetries: 0,
  stopWhen: stepCountIs(2),
  tools: {
    get_weather: tool({
      description: "The current weather of a city.",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        executed = city;
        return { city, temperature: 21 };
      },
    }),
  },
});
assert.equal(result.steps.length, 2);
assert.equal(result.steps[0].finishReason, "tool-calls");
assert.equal(result.steps[0].toolCalls[0].toolName, "get_weather");
assert.equal(typeof executed, "string");
assert.ok(result.text.length > 0 && !result.text.includes("<tool_call>"));
console.log("ok ai-sdk generateText with a tool");

const llm = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL }, maxRetries: 0, maxTokens: 200 });
const withTools = llm.bindTools([{
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather of a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}]);
const msg = await withTools.invoke("What is the weather in Paris?");
assert.equal(msg.tool_calls.length, 1);
assert.equal(msg.tool_calls[0].name, "get_weather");
assert.equal(typeof msg.tool_calls[0].args.city, "string");
console.log("ok langchain bindTools invoke");
let agg;
for await (const chunk of await withTools.stream("What is the weather in Paris?")) {
  agg = agg === undefined ? chunk : agg.concat(chunk);
}
assert.equal(agg.tool_calls.length, 1);
assert.equal(agg.tool_calls[0].name, "get_weather");
assert.equal(typeof agg.tool_calls[0].args.city, "string");
console.log("ok langchain bindTools stream");
