#!/bin/sh
# Runs a libFuzzer target for a bounded time, seeded with the corrupted-file corpus of
# tests/cli/safetensors_corpus.py (when python3 is available).
# usage: fuzz/run_fuzz.sh FUZZER_BINARY [SECONDS=60]
# Crash reproducers are written to $FP4MOE_FUZZ_ARTIFACTS (default: the current directory);
# replay one with: FUZZER_BINARY crash-<hash>
set -eu
fuzzer=$1
seconds=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
artifacts=${FP4MOE_FUZZ_ARTIFACTS:-$PWD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds" "$artifacts"
if command -v python3 >/dev/null 2>&1; then
  python3 "$here/../tests/cli/safetensors_corpus.py" --write "$work/seeds"
fi
# -max_len 4096: headers larger than that exercise nothing new; -timeout: a hang is a bug too.
exec "$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work/corpus" "$work/seeds"
