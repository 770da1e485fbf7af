// Tool calls and reasoning through the npm openai package, against the
// frontend at process.env.OPENAI_BASE_URL (a mocker that answers like Qwen3
// behind it): a tool call round trip, the streamed tool call deltas, and
// reasoning_content kept out of content. Prints one "ok <check>" line per
// check and exits non-zero on the first failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "unused", maxRetries: 0 });
const model = process.env.MODEL;
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather of a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

// Round trip: the call, the tool's result, the answer in words.
const first = await client.chat.completions.create({ model, messages, tools, max_tokens: 200 });
const choice = first.choices[0];
assert.equal(choice.finish_reason, "tool_calls");
assert.equal(choice.message.tool_calls.length, 1);
const call = choice.message.tool_calls[0];
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
assert.equal(typeof JSON.parse(call.function.arguments).city, "string");
assert.equal(choice.message.content, null);
assert.ok(choice.message.reasoning_content.length > 0);
console.log("ok tool call");
const second = await client.chat.completions.create({
  model, tools, max_tokens: 20,
  messages: [...messages, choice.message, { role: "tool", tool_call_id: call.id, content: '{"temperature": 21}' }],
});
assert.equal(second.choices[0].message.tool_calls, undefined);
assert.ok(second.choices[0].message.content.length > 0);
console.log("ok tool result answered");

// Streamed: index, id and name first, then the arguments.
const stream = await client.chat.completions.create({ model, messages, tools, max_tokens: 200, stream: true });
const calls = [];
let reasoning = "";
let finish = null;
for await (const chunk of stream) {
  const c = chunk.choices[0];
  if (!c) continue;
  reasoning += c.delta?.reasoning_content ?? "";
  for (const d of c.delta?.tool_calls ?? []) {
    if (d.id) {
      assert.equal(d.function.name, "get_weather");
      calls[d.index] = { id: d.id, name: d.function.name, arguments: d.function.arguments ?? "" };
    } else {
      calls[d.index].arguments += d.function?.arguments ?? "";
    }
  }
  finish = c.finish_reason ?? finish;
}
assert.equal(finish, "tool_calls");
assert.equal(calls.length, 1);
assert.equal(typeof JSON.parse(calls[0].arguments).city, "string");
assert.ok(reasoning.length > 0 && !reasoning.includes("<think>"));
console.log("ok streamed tool call");

// Reasoning without tools: thinking in reasoning_content, the answer in content.
const r = await client.chat.completions.create({ model, messages, max_tokens: 40 });
assert.equal(r.choices[0].message.reasoning_content, "A short answer will do.");
assert.ok(r.choices[0].message.content.length > 0 && !r.choices[0].message.content.includes("think>"));
console.log("ok reasoning");
