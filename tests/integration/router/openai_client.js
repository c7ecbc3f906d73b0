// The official openai npm client against spark-router (run by test_router_openai.sh).
// node openai_client.js ROUTER_PORT KEY MODULE_DIR
'use strict';
const assert = require('assert');
const [port, key, moddir] = process.argv.slice(2);
const OpenAI = require(moddir + '/node_modules/openai').default || require(moddir + '/node_modules/openai');
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0 });
let n = 0;
const ok = (what) => console.log(`ok ${++n} - ${what}`);

(async () => {
  // chat, non-streaming, with the raw response for the router's headers
  const { data, response } = await client.chat.completions
    .create({ model: 'auto', messages: [{ role: 'user', content: 'hello' }] })
    .withResponse();
  assert.strictEqual(data.choices[0].message.content, 'from b: hello');
  assert.strictEqual(response.headers.get('x-spark-target'), 'small');
  assert.strictEqual(response.headers.get('x-spark-rule'), 'default');
  assert.ok(response.headers.get('x-request-id'));
  assert.strictEqual(data.usage.total_tokens, 10);
  ok('chat.completions.create: answer, usage, X-Spark-Target/Rule and X-Request-Id headers');

  // a long prompt goes to the big target by rule
  const long = 'y'.repeat(400);
  const big = await client.chat.completions.create({ model: 'auto', messages: [{ role: 'user', content: long }] });
  assert.ok(big.choices[0].message.content.startsWith('from a: '));
  ok('a 100-token prompt is routed to big by the length rule');

  // streaming: the SDK reads SSE chunks as they come
  const stream = await client.chat.completions.create({
    model: 'auto', stream: true, messages: [{ role: 'user', content: 's' }] });
  let text = '', chunks = 0;
  const t0 = Date.now(), times = [];
  for await (const c of stream) {
    chunks++;
    times.push(Date.now() - t0);
    text += c.choices[0].delta.content || '';
  }
  assert.strictEqual(text, 'from b: one two three four');
  assert.strictEqual(chunks, 5);
  assert.ok(times[4] - times[0] >= 300, `chunks arrived together: ${times}`);
  ok(`chat streaming: 5 chunks over ${times[4] - times[0]} ms, text intact`);

  // completions, non-streaming and streaming
  const cmpl = await client.completions.create({ model: 'auto', prompt: 'say' });
  assert.strictEqual(cmpl.choices[0].text, 'from b: say');
  const cs = await client.completions.create({ model: 'auto', prompt: 'say', stream: true });
  let ct = '';
  for await (const c of cs) ct += c.choices[0].text;
  assert.strictEqual(ct, 'from b: one two three four');
  ok('completions.create, plain and streaming');

  // models
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.ok(models.includes('auto') && models.includes('gpt-4o'), models.join(','));
  ok('models.list lists the routes and their aliases');

  // errors come back as the SDK's typed errors
  try {
    await client.chat.completions.create({ model: 'nosuch', messages: [{ role: 'user', content: 'x' }] });
    assert.fail('no error');
  } catch (e) {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.strictEqual(e.status, 404);
    assert.strictEqual(e.code, 'model_not_found');
  }
  try {
    await client.chat.completions.create({ model: 'auto', messages: 'nope' });
    assert.fail('no error');
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
  }
  try {
    await client.chat.completions.create({ model: 'down', messages: [{ role: 'user', content: 'x' }] });
    assert.fail('no error');
  } catch (e) {
    assert.ok(e instanceof OpenAI.InternalServerError, String(e));
    assert.strictEqual(e.status, 502);
  }
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key-0123456789', maxRetries: 0 });
  try {
    await bad.models.list();
    assert.fail('no error');
  } catch (e) {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
  }
  ok('errors: NotFoundError (unknown model), BadRequestError, InternalServerError (502), AuthenticationError');

  // an upstream stalled mid-stream: the stream's error event reaches the
  // caller as an APIError (issue 28), after the chunks that came
  let got = '';
  try {
    const st = await client.chat.completions.create({ model: 'stalled', stream: true,
      messages: [{ role: 'user', content: 'a b c d e' }] });
    for await (const c of st) got += c.choices[0].delta.content || '';
    assert.fail('no error');
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.ok(/stalled/.test(e.message), e.message);
  }
  assert.ok(got.length > 0, 'the chunks before the stall');
  ok('a stream whose upstream stalls ends in an APIError naming the stall');
  console.log(`openai client: ${n} checks passed`);
})().catch((e) => { console.error('FAIL:', e); process.exit(1); });
