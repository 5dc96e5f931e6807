// gen_js writes the interop fixtures of apache-arrow for JavaScript (js/) from
// cases.json. Run from this folder:
//
//   npm ci && node gen_js.mjs
//
// package.json pins apache-arrow. There are no compressed files: apache-arrow JS
// 21.2.0 compresses through codecs the caller registers, but its writer puts the
// compressed length where the IPC format wants the uncompressed one (ipc/writer.js,
// _compressBodyBuffers), so pyarrow 26 fails on them too ("Lz4 decompression buffer
// too small", "ZSTD decompression failed: Destination buffer is too small"); the Go
// reader reports E_TRUNCATED. Tried with lz4js 0.2.0 and @bokuweb/zstd-wasm 0.0.27.
//
// Types are what a JS collector naturally writes: strings of rollout_id as
// apache-arrow's default Dictionary<Utf8, Int32>, numbers as Float64 for log-probs and
// reward, token ids and segment bounds as Int32 (Float64 token ids cannot carry the
// meaning), policy_version Int32, feedback and status Int8. The file format puts the
// schema only in the footer: its first message after the magic is a dictionary batch.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  Dictionary, Field, Float64, Int8, Int32, List, RecordBatchFileWriter, RecordBatchStreamWriter, Struct,
  Table, Utf8, vectorFromArray,
} from 'apache-arrow';

const here = path.dirname(fileURLToPath(import.meta.url));
const spec = JSON.parse(fs.readFileSync(path.join(here, 'cases.json'), 'utf8'));

const nan = (v) => (v === 'NaN' ? NaN : Array.isArray(v) ? v.map(nan) : v);

const segType = new Struct([
  new Field('start', new Int32(), true), new Field('end', new Int32(), true),
  new Field('kind', new Utf8(), true), new Field('tool', new Utf8(), true),
  new Field('status', new Int8(), true), new Field('feedback', new Utf8(), true),
]);
const types = {
  rollout_id: new Dictionary(new Utf8(), new Int32()),
  task_id: new Utf8(),
  policy_version: new Int32(),
  tokenizer: new Utf8(),
  tokens: new List(new Field('item', new Int32(), true)),
  logprobs: new List(new Field('item', new Float64(), true)),
  segments: new List(new Field('item', segType, true)),
  reward: new Float64(),
  feedback: new Int8(),
};

// table returns rows as a Table of record batches of batch_rows rows each, sharing
// one dictionary (the file format allows no dictionary replacement).
function table(rows) {
  const cols = {};
  for (const [name, type] of Object.entries(types)) {
    cols[name] = vectorFromArray(rows.map((r) => nan(r[name])), type);
  }
  const whole = new Table(cols);
  let out = null;
  for (let i = 0; i < rows.length; i += spec.batch_rows) {
    const part = whole.slice(i, i + spec.batch_rows);
    out = out === null ? part : out.concat(part);
  }
  return out;
}

function write(file, rows, format) {
  const Writer = format === 'file' ? RecordBatchFileWriter : RecordBatchStreamWriter;
  fs.writeFileSync(file, Writer.writeAll(table(rows)).toUint8Array(true));
}

const out = path.join(here, 'js');
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out);
const cases = [['valid', spec.rollouts]];
for (const m of spec.malformed) {
  const rows = structuredClone(spec.rollouts);
  Object.assign(rows[spec.row], m.set);
  cases.push([m.name, rows]);
}
for (const [name, rows] of cases) {
  for (const format of ['file', 'stream']) {
    write(path.join(out, `${name}.${format}.arrow`), rows, format);
  }
}
const pkg = JSON.parse(fs.readFileSync(path.join(here, 'node_modules/apache-arrow/package.json'), 'utf8'));
console.log(JSON.stringify({ 'apache-arrow': pkg.version }));
