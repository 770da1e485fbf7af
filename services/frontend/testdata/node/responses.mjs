// The Responses API (/v1/responses) through the clients that speak it,
// against the frontend at process.env.OPENAI_BASE_URL (a mocker that
// answers like Qwen3 behind it): the npm openai package's function tool
// round trip, whole and streamed; the Vercel AI SDK's OpenAI provider in
// Responses mode running a tool loop (with store false: the frontend keeps
// no responses, so the SDK must send the items rather than references to
// them); LangChain's ChatOpenAI with useResponsesApi binding a tool. Prints
// one "ok <check>" line per check and exits non-zero on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { generateText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";

const baseURL = process.env.OPENAI_BASE_URL;
const model = process.env.MODEL;
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const tools = [{
  type: "function",
  name: "get_weather",
  description: "The current weather of a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
}];
const question = "What is the weather in Paris?";

// Round trip: the call, then its output sent back, answered in words.
const first = await client.responses.create({ model, input: question, tools, max_output_tokens: 200 });
const calls = first.output.filter((it) => it.type === "function_call");
assert.equal(calls.length, 1);
assert.equal(calls[0].name, "get_weather");
assert.equal(typeof JSON.parse(calls[0].arguments).city, "string");
console.log("ok openai responses function_call");
const second = await client.responses.create({
  model, tools, max_output_tokens: 30,
  input: [{ role: "user", content: question }, calls[0], { type: "function_call_output", call_id: calls[0].call_id, output: '{"temperature": 21}' }],
});
assert.equal(second.output.filter((it) => it.type === "function_call").length, 0);
assert.ok(second.output_text.length > 0);
console.log("ok openai responses function_call_output answered");

// Streamed: the arguments arrive as deltas that add up to the call's.
const stream = await client.responses.create({ model, input: question, tools, max_output_tokens: 200, stream: true });
let args = "";
let done;
for await (const ev of stream) {
  if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
  if (ev.type === "response.output_item.done" && ev.item.type === "function_call") done = ev.item;
}
assert.ok(done !== undefined);
assert.equal(done.arguments, args);
console.log("ok openai responses function_call streamed");

const openai = createOpenAI({ baseURL, apiKey: "unused" });
let executed = null;
const result = await generateText({
  model: openai.responses(model),
  prompt: question,
  maxOutputTokens: 100,
  maxRetries: 0,
  stopWhen: stepCountIs(2),
  providerOptions: { openai: { store: false } },
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
console.log("ok ai-sdk responses generateText with a tool");

const llm = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL }, maxRetries: 0, maxTokens: 200, useResponsesApi: true });
const msg = await llm.bindTools([{
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather of a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}]).invoke(question);
assert.equal(msg.tool_calls.length, 1);
assert.equal(msg.tool_calls[0].name, "get_weather");
assert.equal(typeof msg.tool_calls[0].args.city, "string");
console.log("ok langchain responses bindTools");
