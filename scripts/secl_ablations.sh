#!/usr/bin/env bash
# SECL ablations (METHOD §6) on one stream, each a `tracecal secl` run reusing one frozen pass:
#   gate always / never (vs the detector), reset (vs accumulate), MSE loss (vs directional),
#   LoRA on q,k,v,o (vs q,v) and on all 30 layers (vs the top 4).
# Writes OUT/<name>.json; `python scripts/secl_ablation_table.py OUT/*.json` prints the markdown table.
#   bash scripts/secl_ablations.sh [OUT] [PER_DOMAIN] [names...]     (defaults: runs/secl_ablations 150 all)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/secl_ablations}; N=${2:-150}; shift $(( $# > 2 ? 2 : $# )) || true
STREAM=${STREAM:-triviaqa,svamp,arc_easy,truthfulqa}
CACHE=${CACHE:-runs/frozen${N}.json}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
declare -A FLAGS=(
  [detector]=""
  [gate-always]="--gate always"
  [gate-never]="--gate never"
  [reset]="--reset"
  [loss-mse]="--loss mse"
  [lora-qkvo]="--lora-targets q_proj,k_proj,v_proj,o_proj"
  [lora-all-layers]="--lora-layers 0"
)
NAMES=("$@"); [ ${#NAMES[@]} -gt 0 ] || NAMES=(detector gate-never reset loss-mse lora-qkvo lora-all-layers gate-always)
for name in "${NAMES[@]}"; do
  [ -f "$OUT/$name.json" ] && { echo "$name: done"; continue; }
  echo "== $name (${FLAGS[$name]:-}) $(date +%T)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  .venv/bin/tracecal secl --stream "$STREAM" --per-domain "$N" --cache "$CACHE" --threads "${THREADS:-1}" \
    ${FLAGS[$name]} --out "$OUT/$name.json"
  echo "$name: $(( $(date +%s) - start )) s"
done
