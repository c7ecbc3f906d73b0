// A small fake OpenAI-compatible server for spark-router's tests (loopback only).
// node fake_upstream.js NAME  -> listens on 127.0.0.1, prints "PORT <n>" on stdout.
// The request's "model" picks the behaviour:
//   fail (500), busy (429), ctxlen (400 context length), html (200 with an HTML page),
//   slow (answers after 1.5 s),
//   stall (streams 2 chunks then hangs), anything else answers at once.
// Classifier behaviours (the answer's message content):
//   judge: {"target":"big"} when the prompt holds HARD, else a fenced {"target": "small"};
//   judge-p: {"p_solve":0.9} when the prompt holds easy, else {"p_solve":0.2};
//   judge-garbage: words, no JSON; judge-slow: like judge after 1.5 s.
// Streams (stream:true) send 5 chunks 100 ms apart, then [DONE].
// FAKE_KEEPALIVE_MS: how long an idle keep-alive connection stays open (5000).
// GET /stats -> {"requests":N,"closed_early":N,"last_auth":"...","last_model":"..."}
'use strict';
const http = require('http');
const name = process.argv[2] || 'up';
const stats = { requests: 0, closed_early: 0, last_auth: null, last_model: null, last_request_id: null };

function lastUser(body) {
  if (Array.isArray(body.messages)) {
    for (let i = body.messages.length - 1; i >= 0; i--)
      if (body.messages[i].role === 'user') return String(body.messages[i].content);
    return '';
  }
  return String(body.prompt || '');
}

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(stats));
    return;
  }
  let chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    stats.requests++;
    stats.last_auth = req.headers['authorization'] || null;
    stats.last_request_id = req.headers['x-request-id'] || null;
    let body;
    try { body = JSON.parse(Buffer.concat(chunks).toString()); } catch (e) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'bad json', type: 'invalid_request_error' } }));
      return;
    }
    stats.last_model = body.model;
    const chat = req.url.endsWith('/chat/completions');
    const text = `from ${name}: ${lastUser(body)}`;
    let done = false;
    res.on('close', () => { if (!done) stats.closed_early++; });
    const err = (code, msg, type) => {
      done = true;
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: msg, type: type, code: null } }));
    };
    if (body.model === 'fail') return err(500, `${name} failed`, 'server_error');
    if (body.model === 'busy') return err(429, `${name} busy`, 'rate_limit_error');
    if (body.model === 'ctxlen') return err(400, "This model's maximum context length is 8 tokens", 'invalid_request_error');
    if (body.model === 'html') { // a 200 that is no answer (a captive portal, a proxy's page)
      done = true;
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html><body>Service Unavailable</body></html>');
      return;
    }
    const judge = (content) => {
      done = true;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'j', object: 'chat.completion', created: 0, model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] }));
    };
    const prompt = lastUser(body);
    const judgeTarget = () => judge(prompt.includes('HARD') ? '{"target":"big"}' : '```json\n{"target": "small"}\n```');
    if (body.model === 'judge') return judgeTarget();
    if (body.model === 'judge-slow') return setTimeout(judgeTarget, 1500);
    if (body.model === 'judge-p') return judge(prompt.includes('easy') ? '{"p_solve":0.9}' : '{"p_solve":0.2}');
    if (body.model === 'judge-garbage') return judge('I would pick the big one');
    const answer = () => {
      if (!body.stream) {
        done = true;
        const o = chat
          ? { id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: body.model,
              choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
              usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }
          : { id: 'cmpl-1', object: 'text_completion', created: 0, model: body.model,
              choices: [{ index: 0, text: text, finish_reason: 'stop' }],
              usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } };
        res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': name });
        res.end(JSON.stringify(o));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-upstream': name });
      const words = [`from ${name}:`, ' one', ' two', ' three', ' four'];
      let i = 0;
      const tick = () => {
        if (res.destroyed) return;
        if (body.model === 'stall' && i === 2) return; // hang forever
        if (i < words.length) {
          const c = chat
            ? { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 0, model: body.model,
                choices: [{ index: 0, delta: i ? { content: words[i] } : { role: 'assistant', content: words[i] }, finish_reason: null }] }
            : { id: 'cmpl-1', object: 'text_completion', created: 0, model: body.model,
                choices: [{ index: 0, text: words[i], finish_reason: null }] };
          res.write(`data: ${JSON.stringify(c)}\n\n`);
          i++;
          setTimeout(tick, 100);
        } else {
          done = true;
          if (body.stream_options && body.stream_options.include_usage)
            res.write(`data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 0,
              model: body.model, choices: [], usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 } })}\n\n`);
          res.end('data: [DONE]\n\n');
        }
      };
      tick();
    };
    if (body.model === 'slow') setTimeout(answer, 1500); else answer();
  });
});
server.keepAliveTimeout = Number(process.env.FAKE_KEEPALIVE_MS || 5000);
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});
