// Structured outputs against the frontend at process.env.OPENAI_BASE_URL (a
// mocker behind it, which answers the simplest value of the schema): the
// Vercel AI SDK's generateObject (json_schema, and json_object with the
// schema in the prompt), LangChain's withStructuredOutput with its default
// method, and the npm openai client's response_format json_schema. Each
// object is checked against its zod schema. Prints one "ok <check>" line
// per check; exits non-zero on the first failure.
import assert from "node:assert/strict";
import { generateObject } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import OpenAI from "openai";
import { z } from "zod";

const baseURL = process.env.OPENAI_BASE_URL;
const model = process.env.MODEL;

const person = z.object({
  name: z.string().min(1),
  age: z.number().int().min(0),
  hobbies: z.array(z.string()),
  role: z.enum(["admin", "user"]),
});

// With structured outputs the schema travels as response_format json_schema
// and the answer must match it. Without, the SDK asks for json_object and
// puts the schema in the prompt, which only a real model reads: json_object
// promises an object, so that is what is checked.
for (const structured of [true, false]) {
  const provider = createOpenAICompatible({ name: "switchyard", baseURL, apiKey: "unused", supportsStructuredOutputs: structured });
  const schema = structured ? person : z.object({}).passthrough();
  const { object, finishReason } = await generateObject({
    model: provider(model),
    schema,
    prompt: "Describe a person.",
    maxOutputTokens: 200,
    maxRetries: 0,
  });
  assert.equal(finishReason, "stop");
  schema.parse(object);
  console.log(`ok ai-sdk generateObject ${structured ? "json_schema" : "json_object"}`);
}

const llm = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL }, maxRetries: 0, maxTokens: 200 });
const out = await llm.withStructuredOutput(person, { name: "person" }).invoke("Describe a person.");
person.parse(out);
console.log("ok langchain withStructuredOutput");

const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const resp = await client.chat.completions.create({
  model,
  max_tokens: 200,
  messages: [{ role: "user", content: "Describe a person." }],
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "person",
      strict: true,
      schema: {
        type: "object",
        properties: { name: { type: "string" }, age: { type: "integer" }, hobbies: { type: "array", items: { type: "string" } }, role: { type: "string", enum: ["admin", "user"] } },
        required: ["name", "age", "hobbies", "role"],
        additionalProperties: false,
      },
    },
  },
});
person.parse(JSON.parse(resp.choices[0].message.content));
console.log("ok openai response_format json_schema");
