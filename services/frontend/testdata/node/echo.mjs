// A completion with echo and logprobs through the npm openai package, the
// request an evaluation harness sends to score a continuation, streamed
// and not, against the frontend at process.env.OPENAI_BASE_URL. Prints
// "ok echo" and "ok echo stream"; exits non-zero on any failure.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "unused", maxRetries: 0 });
const prompt = "Once upon a time";
const check = (what, text, lp, usage) => {
  const n = usage.prompt_tokens + usage.completion_tokens;
  if (!text.startsWith(prompt)) throw new Error(`${what}: text ${JSON.stringify(text)} does not start with the prompt`);
  if (lp.tokens.length !== n || lp.token_logprobs.length !== n || lp.top_logprobs.length !== n) {
    throw new Error(`${what}: ${lp.tokens.length} entries for ${n} tokens`);
  }
  if (lp.token_logprobs[0] !== null || lp.top_logprobs[0] !== null) throw new Error(`${what}: the first token has a probability`);
  if (lp.token_logprobs.slice(1).some((v) => typeof v !== "number" || v > 0)) throw new Error(`${what}: ${lp.token_logprobs}`);
  if (lp.tokens.join("") !== text) throw new Error(`${what}: tokens join to ${JSON.stringify(lp.tokens.join(""))}`);
  console.log(`ok ${what}`);
};

const whole = await client.completions.create({ model: process.env.MODEL, prompt, max_tokens: 1, echo: true, logprobs: 1, temperature: 0 });
check("echo", whole.choices[0].text, whole.choices[0].logprobs, whole.usage);

const stream = await client.completions.create({
  model: process.env.MODEL, prompt, max_tokens: 3, echo: true, logprobs: 1, stream: true, stream_options: { include_usage: true },
});
let text = "";
const lp = { tokens: [], token_logprobs: [], top_logprobs: [] };
let usage = null;
for await (const chunk of stream) {
  usage = chunk.usage ?? usage;
  const c = chunk.choices[0];
  if (!c) continue;
  text += c.text;
  for (const k of Object.keys(lp)) lp[k].push(...(c.logprobs?.[k] ?? []));
}
check("echo stream", text, lp, usage);
