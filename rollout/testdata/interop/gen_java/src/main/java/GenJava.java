// GenJava writes the interop fixtures of Arrow Java (java/) from cases.json. Run from
// this folder (pom.xml pins arrow-vector, arrow-memory-netty, arrow-compression):
//
//   mvn -q compile dependency:build-classpath -Dmdep.outputFile=cp.txt
//   java --add-opens=java.base/java.nio=ALL-UNNAMED -cp target/classes:$(cat cp.txt) GenJava
//
// Types are what a Java collector building vectors might pick: Utf8 strings, token
// ids as List<Int32>, log-probs and reward as Float64 (Java doubles), segment bounds
// Int32 and status Int8, policy_version Int64, feedback Int8.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.FileOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.ipc.ArrowFileWriter;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.ipc.ArrowWriter;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;

public final class GenJava {
  private static final ArrowType UTF8 = new ArrowType.Utf8();
  private static final ArrowType I8 = new ArrowType.Int(8, true);
  private static final ArrowType I32 = new ArrowType.Int(32, true);
  private static final ArrowType I64 = new ArrowType.Int(64, true);
  private static final ArrowType F64 = new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);

  private static Field list(String name, Field elem) {
    return new Field(name, FieldType.nullable(new ArrowType.List()), List.of(elem));
  }

  static Schema schema() {
    Field seg = new Field("item", FieldType.nullable(new ArrowType.Struct()), List.of(
        Field.nullable("start", I32), Field.nullable("end", I32), Field.nullable("kind", UTF8),
        Field.nullable("tool", UTF8), Field.nullable("status", I8), Field.nullable("feedback", UTF8)));
    return new Schema(List.of(
        new Field("rollout_id", FieldType.notNullable(UTF8), null),
        Field.nullable("task_id", UTF8),
        Field.nullable("policy_version", I64),
        Field.nullable("tokenizer", UTF8),
        list("tokens", Field.nullable("item", I32)),
        list("logprobs", Field.nullable("item", F64)),
        list("segments", seg),
        Field.nullable("reward", F64),
        Field.nullable("feedback", I8)));
  }

  private static void str(VarCharVector v, int i, JsonNode x) {
    if (x == null || x.isNull()) {
      v.setNull(i);
    } else {
      v.setSafe(i, x.asText().getBytes(StandardCharsets.UTF_8));
    }
  }

  private static void f64(Float8Vector v, int i, JsonNode x) {
    if (x == null || x.isNull()) {
      v.setNull(i);
    } else {
      v.setSafe(i, x.isTextual() && x.asText().equals("NaN") ? Double.NaN : x.asDouble());
    }
  }

  private static void i32(IntVector v, int i, JsonNode x) {
    if (x == null || x.isNull()) {
      v.setNull(i);
    } else {
      v.setSafe(i, x.asInt());
    }
  }

  private static void i8(TinyIntVector v, int i, JsonNode x) {
    if (x == null || x.isNull()) {
      v.setNull(i);
    } else {
      v.setSafe(i, (byte) x.asInt());
    }
  }

  // fill puts rows into root, one record batch.
  static void fill(VectorSchemaRoot root, List<JsonNode> rows) {
    root.allocateNew();
    ListVector tokens = (ListVector) root.getVector("tokens");
    ListVector logprobs = (ListVector) root.getVector("logprobs");
    ListVector segments = (ListVector) root.getVector("segments");
    IntVector tokVals = (IntVector) tokens.getDataVector();
    Float8Vector lpVals = (Float8Vector) logprobs.getDataVector();
    StructVector seg = (StructVector) segments.getDataVector();
    for (int i = 0; i < rows.size(); i++) {
      JsonNode r = rows.get(i);
      str((VarCharVector) root.getVector("rollout_id"), i, r.get("rollout_id"));
      str((VarCharVector) root.getVector("task_id"), i, r.get("task_id"));
      BigIntVector pv = (BigIntVector) root.getVector("policy_version");
      if (r.get("policy_version").isNull()) {
        pv.setNull(i);
      } else {
        pv.setSafe(i, r.get("policy_version").asLong());
      }
      str((VarCharVector) root.getVector("tokenizer"), i, r.get("tokenizer"));
      if (r.get("tokens").isNull()) {
        tokens.setNull(i);
      } else {
        int off = tokens.startNewValue(i);
        JsonNode t = r.get("tokens");
        for (int k = 0; k < t.size(); k++) {
          i32(tokVals, off + k, t.get(k));
        }
        tokens.endValue(i, t.size());
      }
      if (r.get("logprobs").isNull()) {
        logprobs.setNull(i);
      } else {
        int off = logprobs.startNewValue(i);
        JsonNode t = r.get("logprobs");
        for (int k = 0; k < t.size(); k++) {
          f64(lpVals, off + k, t.get(k));
        }
        logprobs.endValue(i, t.size());
      }
      if (r.get("segments").isNull()) {
        segments.setNull(i);
      } else {
        int off = segments.startNewValue(i);
        JsonNode t = r.get("segments");
        for (int k = 0; k < t.size(); k++) {
          JsonNode s = t.get(k);
          int j = off + k;
          seg.setIndexDefined(j);
          i32(seg.getChild("start", IntVector.class), j, s.get("start"));
          i32(seg.getChild("end", IntVector.class), j, s.get("end"));
          str(seg.getChild("kind", VarCharVector.class), j, s.get("kind"));
          str(seg.getChild("tool", VarCharVector.class), j, s.get("tool"));
          i8(seg.getChild("status", TinyIntVector.class), j, s.get("status"));
          str(seg.getChild("feedback", VarCharVector.class), j, s.get("feedback"));
        }
        segments.endValue(i, t.size());
      }
      f64((Float8Vector) root.getVector("reward"), i, r.get("reward"));
      i8((TinyIntVector) root.getVector("feedback"), i, r.get("feedback"));
    }
    int n = rows.size();
    for (FieldVector v : root.getFieldVectors()) {
      if (!(v instanceof ListVector)) {
        v.setValueCount(n);
      }
    }
    tokens.setValueCount(n);
    logprobs.setValueCount(n);
    segments.setValueCount(n);
    root.setRowCount(n);
  }

  static void write(BufferAllocator alloc, File file, List<JsonNode> rows, int batchRows, boolean stream,
      CompressionUtil.CodecType codec) throws Exception {
    try (VectorSchemaRoot root = VectorSchemaRoot.create(schema(), alloc);
        FileOutputStream out = new FileOutputStream(file)) {
      // CommonsCompressionFactory makes only the real codecs; NoCompressionCodec's
      // factory the "none" one.
      CompressionCodec.Factory factory = codec == CompressionUtil.CodecType.NO_COMPRESSION
          ? NoCompressionCodec.Factory.INSTANCE : CommonsCompressionFactory.INSTANCE;
      ArrowWriter w = stream
          ? new ArrowStreamWriter(root, null, out.getChannel(), IpcOption.DEFAULT, factory, codec)
          : new ArrowFileWriter(root, null, out.getChannel(), null, IpcOption.DEFAULT, factory, codec);
      w.start();
      for (int i = 0; i < rows.size(); i += batchRows) {
        fill(root, rows.subList(i, Math.min(i + batchRows, rows.size())));
        w.writeBatch();
      }
      w.end();
      w.close();
    }
  }

  public static void main(String[] args) throws Exception {
    Path here = Path.of("").toAbsolutePath().getParent();
    JsonNode spec = new ObjectMapper().readTree(here.resolve("cases.json").toFile());
    Path out = here.resolve("java");
    if (Files.exists(out)) {
      try (var files = Files.list(out)) {
        for (Path p : (Iterable<Path>) files::iterator) {
          Files.delete(p);
        }
      }
    }
    Files.createDirectories(out);
    int batchRows = spec.get("batch_rows").asInt();
    int row = spec.get("row").asInt();
    List<JsonNode> valid = new ArrayList<>();
    spec.get("rollouts").forEach(valid::add);
    List<Map.Entry<String, List<JsonNode>>> cases = new ArrayList<>();
    cases.add(Map.entry("valid", valid));
    for (JsonNode m : spec.get("malformed")) {
      List<JsonNode> rows = new ArrayList<>();
      for (JsonNode r : valid) {
        rows.add(r.deepCopy());
      }
      ObjectNode patched = (ObjectNode) rows.get(row);
      for (Iterator<Map.Entry<String, JsonNode>> it = m.get("set").fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        patched.set(e.getKey(), e.getValue());
      }
      cases.add(Map.entry(m.get("name").asText(), rows));
    }
    try (BufferAllocator alloc = new RootAllocator()) {
      for (Map.Entry<String, List<JsonNode>> c : cases) {
        for (boolean stream : new boolean[] {false, true}) {
          String format = stream ? "stream" : "file";
          write(alloc, out.resolve(c.getKey() + "." + format + ".arrow").toFile(), c.getValue(), batchRows, stream,
              CompressionUtil.CodecType.NO_COMPRESSION);
          if (c.getKey().equals("valid")) {
            write(alloc, out.resolve("valid." + format + ".lz4.arrow").toFile(), c.getValue(), batchRows, stream,
                CompressionUtil.CodecType.LZ4_FRAME);
            write(alloc, out.resolve("valid." + format + ".zstd.arrow").toFile(), c.getValue(), batchRows, stream,
                CompressionUtil.CodecType.ZSTD);
          }
        }
      }
    }
    System.out.println("{\"arrow-java\": \"" + ArrowFileWriter.class.getPackage().getImplementationVersion() + "\"}");
  }
}
