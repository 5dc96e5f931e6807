#!/usr/bin/env bash
# Compare XLA's optimised programs of the bench-gpu stages at pairs of commits, on XLA
# CPU (the same compile path as the GPU's, another backend): issue 41's check that its
# refactors left every compiled program as it was (docs/development.md "Optimised
# programs before and after a refactor").
#
#   bench/gpubench/compare_programs.sh OUTDIR OLD..NEW [OLD..NEW …]
#   STAGES=peak,parity bench/gpubench/compare_programs.sh …   # fewer stages
#
# For each commit: a detached worktree under OUTDIR/src-<commit>, the bench program
# built from it (bench/gpu where it exists, else `hindsight bench-gpu`), then each
# stage (default: every stage but memory, which compiles nothing) run alone in its own
# process, as the CPU rehearsal without the PyTorch peer, with
# XLA_FLAGS=--xla_dump_to=… --xla_dump_hlo_as_text. The compile cache is off (no
# -compile-cache), so every program is compiled and dumped. A stage already run for a
# commit in OUTDIR (OUTDIR/<commit>/<stage>/ran) is not run again, only re-normalised
# when OUTDIR/norm/<commit>/<stage>.done is gone.
#
# Each *cpu_after_optimizations.txt is normalised — the module's name (the Go
# function that built it, which a refactor moves) and every metadata={…} (op names,
# source files and lines) removed — and hashed. A stage compares equal when both
# commits compiled the same multiset of normalised modules; OUTDIR/report.txt says so
# per pair and stage (and whether the dumps were identical before normalising), and
# for a stage that differs lists the modules found on one side only (their normalised
# text under OUTDIR/norm/<commit>/<stage>/, to diff).
set -uo pipefail
usage="usage: compare_programs.sh OUTDIR OLD..NEW [OLD..NEW …]"
out=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
stages=${STAGES:-peak,parity,profile,speed,generate,long,dataparallel}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 1
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GOMLX_NO_AUTO_INSTALL=1
plugin=${HINDSIGHT_XLA_CPU_PLUGIN:-$(cd "$repo" && go run ./cmd/hindsight fetch-xla-cpu)} || exit 1

# build REV: worktree and binary; prints the command that runs the bench program.
build() {
  local rev=$1 src="$out/src-$1"
  [ -d "$src" ] || git -C "$repo" worktree add --detach "$src" "$rev" >/dev/null 2>&1 || return 1
  if [ -f "$src/bench/gpu/main.go" ]; then
    (cd "$src" && nice -n 10 go build -o "$out/bin-$rev" ./bench/gpu) || return 1
    echo "$out/bin-$rev"
  else
    (cd "$src" && nice -n 10 go build -o "$out/bin-$rev" ./cmd/hindsight) || return 1
    echo "$out/bin-$rev bench-gpu"
  fi
}

# normalise FILE: the module's name, metadata and blank lines out.
normalise() {
  sed -E -e 's/^HloModule [^,]+,/HloModule m,/' -e 's/, metadata=\{[^}]*\}//g' -e '/^[[:space:]]*$/d' "$1"
}

# rawsums REV STAGE: the sorted hashes of the stage's dumps as XLA wrote them.
rawsums() { (cd "$out/$1/$2/dump" && for f in *cpu_after_optimizations.txt; do sha256sum <"$f"; done) | sort; }

# cap: the first 6 lines of its input, then how many more there were.
cap() { awk 'NR <= 6 { print } END { if (NR > 6) printf "    … %d more\n", NR - 6 }'; }

# run_rev REV: every stage not yet run for REV, dumped and normalised.
run_rev() {
  local rev=$1 cmd="" extra=() s
  for s in ${stages//,/ }; do
    local d="$out/$rev/$s" n="$out/norm/$rev/$s"
    [ -f "$n.done" ] && continue
    if [ ! -f "$d/ran" ]; then
      if [ -z "$cmd" ]; then
        cmd=$(build "$rev") || { echo "build $rev failed" >&2; return 1; }
        # The profile stage's training-step breakdown came later (issue 42); leave it
        # out where the program has it, so every commit's profile stage compiles the same.
        if $cmd -h 2>&1 | grep -q -- '-profile-train-t'; then extra=(-profile-train-t 0); fi
      fi
      rm -rf "$d" && mkdir -p "$d"
      (cd "$out/src-$rev" && XLA_FLAGS="--xla_dump_to=$d/dump --xla_dump_hlo_as_text" \
        nice -n 10 $cmd -cpu -out "$d/out" -backend "xla:$plugin" -python "" -budget-scale 20 \
        -stages "$s" "${extra[@]}" >"$d/stdout.txt" 2>"$d/stderr.txt")
      echo "$rev $s: rc $? $(head -1 "$d/stdout.txt")" >&2
      touch "$d/ran"
    fi
    rm -rf "$n" "$n.index" && mkdir -p "$n" && : >"$n.index"
    local f h
    for f in "$d"/dump/*cpu_after_optimizations.txt; do
      [ -e "$f" ] || continue
      h=$(normalise "$f" | sha256sum | cut -c1-16)
      normalise "$f" >"$n/$h.txt"
      echo "$h $(basename "$f")" >>"$n.index"
    done
    rm -f "$d"/dump/*.o
    touch "$n.done"
  done
  [ -z "$cmd" ] || git -C "$repo" worktree remove --force "$out/src-$rev"
}

for pair in "$@"; do
  old=${pair%%..*} new=${pair##*..}
  run_rev "$old" || exit 1
  run_rev "$new" || exit 1
  {
    echo "$old..$new"
    echo "  old $(git -C "$repo" log -1 --format='%h %ad %s' --date=format:'%F %H:%M' "$old" | cut -c1-110)"
    echo "  new $(git -C "$repo" log -1 --format='%h %ad %s' --date=format:'%F %H:%M' "$new" | cut -c1-110)"
    for s in ${stages//,/ }; do
      a=$(cut -d' ' -f1 "$out/norm/$old/$s.index" | sort) b=$(cut -d' ' -f1 "$out/norm/$new/$s.index" | sort)
      na=$(grep -c . "$out/norm/$old/$s.index") nb=$(grep -c . "$out/norm/$new/$s.index")
      if [ "$na" -gt 0 ] && [ "$a" = "$b" ]; then
        raw=identical
        [ "$(rawsums "$old" "$s")" = "$(rawsums "$new" "$s")" ] || raw="equal after normalising"
        echo "  $s: equal ($na modules, $(echo "$a" | sort -u | wc -l) distinct; text $raw)"
      else
        echo "  $s: DIFFER (old $na modules, new $nb)"
        comm -23 <(echo "$a" | sort -u) <(echo "$b" | sort -u) | sed "s|.*|    only old: norm/$old/$s/&.txt|" | cap
        comm -13 <(echo "$a" | sort -u) <(echo "$b" | sort -u) | sed "s|.*|    only new: norm/$new/$s/&.txt|" | cap
      fi
    done
  } | tee -a "$out/report.txt"
done
