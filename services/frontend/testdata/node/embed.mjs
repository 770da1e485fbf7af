// Embeddings against the frontend at process.env.OPENAI_BASE_URL: the npm
// openai client (which asks for base64 by default and decodes it, and for
// floats when told), the Vercel AI SDK's embed and embedMany, and
// LangChain's OpenAIEmbeddings. Equal texts must get equal vectors and
// different texts different ones, every vector of unit length. Prints one
// "ok <check>" line per check; exits non-zero on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { embed, embedMany } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { OpenAIEmbeddings } from "@langchain/openai";

const baseURL = process.env.OPENAI_BASE_URL;
const model = process.env.MODEL;
const texts = ["The quick brown fox", "jumps over the lazy dog", "The quick brown fox"];

const check = (what, vectors, dims) => {
  assert.equal(vectors.length, texts.length, `${what}: ${vectors.length} vectors`);
  for (const v of vectors) {
    assert.equal(v.length, dims, `${what}: ${v.length} dimensions`);
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `${what}: norm ${norm}`);
  }
  assert.deepEqual(vectors[0], vectors[2], `${what}: equal texts, different vectors`);
  assert.notDeepEqual(vectors[0], vectors[1], `${what}: different texts, equal vectors`);
  console.log(`ok ${what}`);
};

const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const b64 = await client.embeddings.create({ model, input: texts });
check("openai embeddings", b64.data.map((d) => d.embedding), 1024);
assert.ok(b64.usage.prompt_tokens > 0);
const floats = await client.embeddings.create({ model, input: texts, encoding_format: "float", dimensions: 64 });
check("openai embeddings float dimensions", floats.data.map((d) => d.embedding), 64);

const provider = createOpenAI({ baseURL, apiKey: "unused" });
const one = await embed({ model: provider.embedding(model), value: texts[0] });
assert.equal(one.embedding.length, 1024);
const many = await embedMany({ model: provider.embedding(model), values: texts });
check("ai-sdk embedMany", many.embeddings, 1024);
assert.deepEqual(many.embeddings[0], one.embedding, "ai-sdk: embed and embedMany disagree");

const lc = new OpenAIEmbeddings({ model, apiKey: "unused", configuration: { baseURL } });
check("langchain embedDocuments", await lc.embedDocuments(texts), 1024);
const q = await lc.embedQuery(texts[0]);
assert.equal(q.length, 1024);
console.log("ok langchain embedQuery");
