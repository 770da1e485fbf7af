// One streaming chat completion through the npm openai package, against the
// frontend at process.env.OPENAI_BASE_URL. Prints the streamed text, then a
// line "finish_reason=<reason>"; exits non-zero on any failure.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "unused", maxRetries: 0 });
const stream = await client.chat.completions.create({
  model: process.env.MODEL,
  messages: [{ role: "user", content: "Hello from Node!" }],
  max_tokens: 24,
  stream: true,
});
let text = "";
let finish = null;
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (!choice) continue;
  text += choice.delta?.content ?? "";
  finish = choice.finish_reason ?? finish;
}
console.log(text);
console.log(`finish_reason=${finish}`);
