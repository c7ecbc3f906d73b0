// A fake sparkd control socket for spark-router's service-target tests: it
// speaks the framing (4-byte big-endian length + one JSON object) and answers
// svc_watch with "stream" frames carrying {"services": [...]}, as the
// contract says (docs/router.md "Cluster services").
//   node fake_sparkd.js SOCKET STATE_FILE
// It polls STATE_FILE (JSON) every 50 ms; when its text changes:
//   {"services": [...]}      a new snapshot to every watcher
//   {"close": true}          hang up on every watcher and refuse new ones (closed at once)
//   {"garbage": true}        send a frame of bad JSON to every watcher
//   {"huge": true}           announce a 2 MiB frame to every watcher
//   {"error": true}          an error frame (the head is unreachable) to every watcher and svc_watch
// Prints "READY" once listening and "CONN n" for every connection.
'use strict';
const net = require('net');
const fs = require('fs');
const [sock, stateFile] = process.argv.slice(2);
let text = '', state = { services: [] }, conns = 0;
const watchers = new Set();

function frame(o) {
  const b = Buffer.from(JSON.stringify(o));
  const h = Buffer.alloc(4);
  h.writeUInt32BE(b.length);
  return Buffer.concat([h, b]);
}
const snapshot = () => frame({ v: 1, type: 'stream', id: 1, data: { services: state.services || [] } });

function apply() {
  for (const w of watchers) {
    if (state.close) { w.destroy(); continue; }
    if (state.garbage) { const b = Buffer.from('{nope'); const h = Buffer.alloc(4); h.writeUInt32BE(b.length); w.write(Buffer.concat([h, b])); continue; }
    if (state.error) { w.write(frame({ v: 1, type: 'error', id: 1, code: 'unavailable', message: 'the head is unreachable' })); continue; }
    if (state.huge) { const h = Buffer.alloc(4); h.writeUInt32BE(2 << 20); w.write(h); continue; }
    w.write(snapshot());
  }
}

setInterval(() => {
  let t;
  try { t = fs.readFileSync(stateFile, 'utf8'); } catch (e) { return; }
  if (t === text) return;
  try { state = JSON.parse(t); } catch (e) { return; }
  text = t;
  apply();
}, 50);

try { fs.unlinkSync(sock); } catch (e) {}
net.createServer((c) => {
  console.log(`CONN ${++conns}`);
  if (state.close) { c.destroy(); return; }
  let buf = Buffer.alloc(0);
  c.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
      const n = buf.readUInt32BE(0);
      const m = JSON.parse(buf.subarray(4, 4 + n).toString());
      buf = buf.subarray(4 + n);
      if (m.type !== 'svc_watch') { c.write(frame({ v: 1, type: 'error', id: m.id, code: 'bad_request', message: 'unknown' })); continue; }
      if (state.error) { c.write(frame({ v: 1, type: 'error', id: m.id, code: 'unavailable', message: 'the head is unreachable' })); continue; }
      watchers.add(c);
      c.write(snapshot());
    }
  });
  c.on('close', () => watchers.delete(c));
  c.on('error', () => watchers.delete(c));
}).listen(sock, () => console.log('READY'));
