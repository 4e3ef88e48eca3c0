#!/usr/bin/env bash
# Prebuilt binaries for a GPU machine without a Rust toolchain: the release `ragtime` (CUDA loads at run time),
# the label-store writer of scripts/bench-detector-memory.sh, the reductions benchmark (bench_staged_reductions),
# and the test binaries whose tests need a GPU, all stripped, in one xz'd tar (tests under tests/NAME).
#
#   scripts/pack-prebuilt.sh [OUT]        # default target/prebuilt.tar.xz
#   VARIANTS="cuda-fusion" scripts/pack-prebuilt.sh   # also ragtime-cuda-fusion, built with that Cargo feature
#
# VARIANTS: Cargo features (cuda-fusion, cuda-autotune, or both as "cuda-fusion,cuda-autotune") each built into a
# ragtime of its own, ragtime-FEATURES in the tar, so that one GPU run can time them beside the default build
# (docs/gpu.md). Each variant recompiles burn's CUDA crates and ragtime once (cargo keeps the artifacts of each
# feature set, so the default build afterwards is not rebuilt).
#
# On the GPU machine, from a checkout of the same commit (the scripts read their files relative to it):
#   mkdir -p /tmp/b && xz -dc prebuilt.tar.xz | tar x -C /tmp/b
#   BIN=/tmp/b/ragtime scripts/bench-generate.sh ...            (likewise bench-train-autorag-gpu.sh)
#   BIN=/tmp/b/ragtime FAKE=/tmp/b/fake_label_store scripts/bench-detector-memory.sh ...
#   /tmp/b/bench_staged_reductions cuda                         (one pass against in stages, docs/burn.md item 6)
#   for t in /tmp/b/tests/*; do $t --ignored cuda; done         (the CUDA tests)
# A test binary finds `checkpoints/` under the folder it was built in (its CARGO_MANIFEST_DIR, printed below and
# written to `built-in` in the tar, where scripts/gpu-suite.sh reads it) and the shared data through RAGTIME_DATA
# or ../shared/data beside that folder: link the checkout there if it lies elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/prebuilt.tar.xz}"
# the default lies in cargo's own folder and is rewritten; any other existing file is left alone
[[ $OUT == target/prebuilt.tar.xz || ! -e $OUT ]] || { echo "pack-prebuilt: $OUT exists; remove it or name another" >&2; exit 1; }
TESTS=(tiny_model batch synth_tiny reference_models) # the test binaries holding `#[ignore = "needs a CUDA GPU"]` tests
for t in "${TESTS[@]}"; do
  grep -q 'needs a CUDA GPU' "tests/$t.rs" || { echo "pack-prebuilt: tests/$t.rs has no CUDA test" >&2; exit 1; }
done
read -ra variants <<<"${VARIANTS:-}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests"
for v in "${variants[@]}"; do
  [[ $v =~ ^(cuda-fusion|cuda-autotune)(,(cuda-fusion|cuda-autotune))?$ ]] ||
    { echo "pack-prebuilt: VARIANTS: '$v' is not cuda-fusion, cuda-autotune or both joined by a comma" >&2; exit 1; }
  cargo build --release --bin ragtime --features "$v"
  cp target/release/ragtime "$stage/ragtime-${v//,/-}"
done
cargo build --release --bin ragtime --example fake_label_store --example bench_staged_reductions
test_args=()
for t in "${TESTS[@]}"; do test_args+=(--test "$t"); done
# the test executables, from cargo's own report of what it built
mapfile -t exes < <(cargo test --release --no-run "${test_args[@]}" --message-format=json |
  python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')
cp target/release/ragtime target/release/examples/{fake_label_store,bench_staged_reductions} "$stage/"
echo "$PWD" >"$stage/built-in"
for e in "${exes[@]}"; do
  read -r name path <<<"$e"
  cp "$path" "$stage/tests/$name"
done
[[ $(ls "$stage/tests" | wc -l) -eq ${#TESTS[@]} ]] || { echo "pack-prebuilt: expected ${#TESTS[@]} test binaries, got: $(ls "$stage/tests")" >&2; exit 1; }
strip "$stage"/ragtime* "$stage"/{fake_label_store,bench_staged_reductions} "$stage"/tests/*
mkdir -p "$(dirname "$OUT")"
tar c -C "$stage" . | xz -T0 -6 >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT ($(du -h "$OUT" | cut -f1)): $(cd "$stage" && ls -d ragtime* | paste -sd' ' -), fake_label_store, bench_staged_reductions, tests/{${TESTS[*]}}; built in $PWD (git $(git rev-parse --short HEAD))"
