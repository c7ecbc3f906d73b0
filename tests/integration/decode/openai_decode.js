// The official openai npm client against spark-decode --serve (run by
// test_decode_serve.sh, and ../serve/test_serve_decode.sh against a served
// spark-decode): node openai_decode.js PORT MODULE_DIR EXPECT_JSON [BASE_URL MODEL]
// EXPECT_JSON holds the text curl got for the same seeded requests; BASE_URL
// (default http://127.0.0.1:PORT/v1) and MODEL (default synthetic:tiny) the
// server's address and the one model id it serves.
'use strict';
const assert = require('assert');
const fs = require('fs');
const [port, moddir, expectFile, baseArg, modelArg] = process.argv.slice(2);
const model = modelArg || 'synthetic:tiny';
const OpenAI = require(moddir + '/node_modules/openai').default || require(moddir + '/node_modules/openai');
const want = JSON.parse(fs.readFileSync(expectFile, 'utf8'));
const client = new OpenAI({ baseURL: baseArg || `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
let n = 0;
const ok = (what) => console.log(`ok ${++n} - ${what}`);

(async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepStrictEqual(models, [model]);
  ok('models.list: the served model id');

  const c = await client.completions.create({
    model, prompt: 'Hello', max_tokens: 24, temperature: 0.9, seed: 7 });
  assert.strictEqual(c.choices[0].text, want.completion);
  assert.strictEqual(c.choices[0].finish_reason, 'length');
  assert.deepStrictEqual(c.usage, { prompt_tokens: 5, completion_tokens: 24, total_tokens: 29 });
  ok('completions.create: the same text as curl for the same seed, usage');

  const cs = await client.completions.create({
    model, prompt: 'Hello', max_tokens: 24, temperature: 0.9, seed: 7, stream: true });
  let text = '', last = null, chunks = 0;
  for await (const ch of cs) { chunks++; text += ch.choices[0].text; last = ch.choices[0].finish_reason || last; }
  assert.strictEqual(text, want.completion);
  assert.strictEqual(last, 'length');
  assert.ok(chunks >= 2, `${chunks} chunks`);
  ok(`completions streaming: ${chunks} chunks, the same text`);

  const msgs = [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }];
  const chat = await client.chat.completions.create({
    model, messages: msgs, max_tokens: 16, seed: 3, temperature: 0.5 });
  assert.strictEqual(chat.choices[0].message.role, 'assistant');
  assert.strictEqual(chat.choices[0].message.content, want.chat);
  assert.strictEqual(chat.usage.prompt_tokens, want.chat_prompt_tokens);
  ok('chat.completions.create: the chat template, the same text as curl');

  const st = await client.chat.completions.create({
    model, messages: msgs, max_tokens: 16, seed: 3, temperature: 0.5,
    stream: true, stream_options: { include_usage: true } });
  let ct = '', usage = null, role = null;
  for await (const ch of st) {
    if (ch.usage) usage = ch.usage;
    if (ch.choices.length) { ct += ch.choices[0].delta.content || ''; role = role || ch.choices[0].delta.role; }
  }
  assert.strictEqual(ct, want.chat);
  assert.strictEqual(role, 'assistant');
  assert.strictEqual(usage.completion_tokens, 16);
  ok('chat streaming with include_usage: text, role, usage chunk');

  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens');
  await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages: msgs }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  ok('errors: BadRequestError (param max_tokens), NotFoundError (model_not_found)');
})().catch((e) => { console.error(e); process.exit(1); });
