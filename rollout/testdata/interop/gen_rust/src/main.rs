//! gen_rust writes the interop fixtures of arrow-rs (arrow-rs/) from cases.json.
//! Run from this folder: `cargo run --release` (Cargo.toml pins arrow-rs, Cargo.lock
//! the rest).
//!
//! Types are what a Rust collector building with arrow-rs's builders might pick:
//! Utf8 strings, token ids as List<Int64>, log-probs as List<Float32>, segment bounds
//! Int32 and status Int8, policy_version Int64, reward Float32, feedback Int8.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, Float32Builder, Int32Builder, Int64Builder, Int8Builder, ListBuilder, StringBuilder,
    StructBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use arrow_ipc::CompressionType;
use arrow_schema::{DataType, Field, Fields, Schema};
use serde_json::Value;

fn seg_fields() -> Fields {
    Fields::from(vec![
        Field::new("start", DataType::Int32, true),
        Field::new("end", DataType::Int32, true),
        Field::new("kind", DataType::Utf8, true),
        Field::new("tool", DataType::Utf8, true),
        Field::new("status", DataType::Int8, true),
        Field::new("feedback", DataType::Utf8, true),
    ])
}

fn schema() -> Arc<Schema> {
    let list = |t: DataType| DataType::List(Arc::new(Field::new_list_field(t, true)));
    Arc::new(Schema::new(vec![
        Field::new("rollout_id", DataType::Utf8, false),
        Field::new("task_id", DataType::Utf8, true),
        Field::new("policy_version", DataType::Int64, true),
        Field::new("tokenizer", DataType::Utf8, true),
        Field::new("tokens", list(DataType::Int64), true),
        Field::new("logprobs", list(DataType::Float32), true),
        Field::new("segments", list(DataType::Struct(seg_fields())), true),
        Field::new("reward", DataType::Float32, true),
        Field::new("feedback", DataType::Int8, true),
    ]))
}

/// float reads a number of cases.json, where "NaN" stands for NaN.
fn float(v: &Value) -> Option<f32> {
    match v {
        Value::Null => None,
        Value::String(s) if s == "NaN" => Some(f32::NAN),
        v => Some(v.as_f64().expect("a number") as f32),
    }
}

fn strings(rows: &[Value], name: &str) -> ArrayRef {
    let mut b = StringBuilder::new();
    for r in rows {
        b.append_option(r[name].as_str());
    }
    Arc::new(b.finish())
}

fn batch(rows: &[Value]) -> RecordBatch {
    let mut policy = Int64Builder::new();
    let mut tokens = ListBuilder::new(Int64Builder::new());
    let mut logprobs = ListBuilder::new(Float32Builder::new());
    let children: Vec<Box<dyn ArrayBuilder>> = vec![
        Box::new(Int32Builder::new()),
        Box::new(Int32Builder::new()),
        Box::new(StringBuilder::new()),
        Box::new(StringBuilder::new()),
        Box::new(Int8Builder::new()),
        Box::new(StringBuilder::new()),
    ];
    let mut segments = ListBuilder::new(StructBuilder::new(seg_fields(), children));
    let mut reward = Float32Builder::new();
    let mut feedback = Int8Builder::new();
    for r in rows {
        policy.append_option(r["policy_version"].as_i64());
        match r["tokens"].as_array() {
            Some(v) => {
                for x in v {
                    tokens.values().append_value(x.as_i64().expect("a token id"));
                }
                tokens.append(true);
            }
            None => tokens.append(false),
        }
        match r["logprobs"].as_array() {
            Some(v) => {
                for x in v {
                    logprobs.values().append_option(float(x));
                }
                logprobs.append(true);
            }
            None => logprobs.append(false),
        }
        match r["segments"].as_array() {
            Some(v) => {
                for s in v {
                    let sb = segments.values();
                    sb.field_builder::<Int32Builder>(0).unwrap().append_option(s["start"].as_i64().map(|x| x as i32));
                    sb.field_builder::<Int32Builder>(1).unwrap().append_option(s["end"].as_i64().map(|x| x as i32));
                    sb.field_builder::<StringBuilder>(2).unwrap().append_option(s["kind"].as_str());
                    sb.field_builder::<StringBuilder>(3).unwrap().append_option(s["tool"].as_str());
                    sb.field_builder::<Int8Builder>(4).unwrap().append_option(s["status"].as_i64().map(|x| x as i8));
                    sb.field_builder::<StringBuilder>(5).unwrap().append_option(s["feedback"].as_str());
                    sb.append(true);
                }
                segments.append(true);
            }
            None => segments.append(false),
        }
        reward.append_option(float(&r["reward"]));
        feedback.append_option(r["feedback"].as_i64().map(|x| x as i8));
    }
    let columns: Vec<ArrayRef> = vec![
        strings(rows, "rollout_id"),
        strings(rows, "task_id"),
        Arc::new(policy.finish()),
        strings(rows, "tokenizer"),
        Arc::new(tokens.finish()),
        Arc::new(logprobs.finish()),
        Arc::new(segments.finish()),
        Arc::new(reward.finish()),
        Arc::new(feedback.finish()),
    ];
    RecordBatch::try_new(schema(), columns).expect("a record batch")
}

fn write(path: &Path, rows: &[Value], batch_rows: usize, stream: bool, codec: Option<CompressionType>) {
    let opts = IpcWriteOptions::default().try_with_compression(codec).expect("compression");
    let f = File::create(path).expect("create fixture");
    let batches: Vec<RecordBatch> = rows.chunks(batch_rows).map(batch).collect();
    if stream {
        let mut w = StreamWriter::try_new_with_options(f, &schema(), opts).expect("stream writer");
        for b in &batches {
            w.write(b).expect("write batch");
        }
        w.finish().expect("finish");
    } else {
        let mut w = FileWriter::try_new_with_options(f, &schema(), opts).expect("file writer");
        for b in &batches {
            w.write(b).expect("write batch");
        }
        w.finish().expect("finish");
    }
}

fn main() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("interop folder").to_path_buf();
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(here.join("cases.json")).expect("cases.json"))
        .expect("cases.json is JSON");
    let out = here.join("arrow-rs");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("mkdir arrow-rs");
    let batch_rows = spec["batch_rows"].as_u64().unwrap() as usize;
    let row = spec["row"].as_u64().unwrap() as usize;
    let rollouts = spec["rollouts"].as_array().unwrap().clone();
    let mut cases = vec![("valid".to_string(), rollouts.clone())];
    for m in spec["malformed"].as_array().unwrap() {
        let mut rows = rollouts.clone();
        for (k, v) in m["set"].as_object().unwrap() {
            rows[row][k] = v.clone();
        }
        cases.push((m["name"].as_str().unwrap().to_string(), rows));
    }
    for (name, rows) in &cases {
        for (format, stream) in [("file", false), ("stream", true)] {
            let codecs: Vec<(&str, Option<CompressionType>)> = if name == "valid" {
                vec![("", None), (".lz4", Some(CompressionType::LZ4_FRAME)), (".zstd", Some(CompressionType::ZSTD))]
            } else {
                vec![("", None)]
            };
            for (suffix, codec) in codecs {
                write(&out.join(format!("{name}.{format}{suffix}.arrow")), rows, batch_rows, stream, codec);
            }
        }
    }
    println!("{{\"arrow-rs\": \"60.1.0\"}}");
}
