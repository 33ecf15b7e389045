#!/usr/bin/env bash
# One verdict per fleet, and pinned runs (issue 68), on one GPU:
#
# 1. RANKS processes (default 8) start at once against one local redis-server,
#    each a writer training GPT-2 in the adaptive build with fresh caches;
#    each writes the choices it made (--choices). `ptxspec verify-choices`
#    compares every rank's table with rank 1's.
# 2. The same RANKS processes without a store (each times for itself): the
#    same comparison, what the fleet's lease is measured against.
# 3. Rank 1's table of step 1, signed, pins two processes (--pin): their
#    tables and their losses are compared, bit for bit.
#
# On the GPU machine, from a folder BIN (default .gpu) holding the release
# `gpt2` example, the release `ptxspec` CLI and redis/{bin/redis-server,lib/*}
# (see fleet_first_step.sh). Writes each process's --json, choices and stderr
# to OUT, and a summary (summary.txt) there; exits non-zero where step 1's or
# step 3's comparisons find a difference.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-$(mktemp -d)}
RANKS=${RANKS:-8}
# Which steps run (fleet, alone, pinned; pinned needs fleet's tables), and
# with TRACE=1 each process's trace (NAME-N.trace.json, PTXSPEC_TRACE).
PHASES=${PHASES:-fleet alone pinned}
# A short run: the tiny configuration's check, then GPT-2 small at one row of
# 256 tokens until its variants are decided.
ARGS=${ARGS:---steps 4 --small-batch 1 --small-seq 256 --small-steps 10 --warmup-limit 3000}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$BIN/redis/lib:${LD_LIBRARY_PATH:-}
W=$(mktemp -d)
"$BIN/redis/bin/redis-server" --port 6398 --bind 127.0.0.1 --save "" --appendonly no --dir "$W" \
  --daemonize yes --logfile "$W/redis.log" --pidfile "$W/redis.pid"
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6398) 2>/dev/null && break; sleep 0.1; done
"$BIN/ptxspec" cache keygen --secret "$W/secret.key" --public "$W/public.keys" > /dev/null
export PTXSPEC_CACHE_TRUSTED_KEYS=$W/public.keys
# A trial on a GPU that eight processes share takes longer than on one alone;
# the store shares the machine's cores with eight processes compiling and
# linking, and answers slower than the 20 ms a call is given by default.
export PTXSPEC_REMOTE_LEASE_MS=${PTXSPEC_REMOTE_LEASE_MS:-60000}
export PTXSPEC_REMOTE_TIMEOUT_MS=${PTXSPEC_REMOTE_TIMEOUT_MS:-200}
FLEET=redis://127.0.0.1:6398/
failed=0

# ranks NAME [gpt2 arguments...]: RANKS processes at once, then their tables
# compared with the first's; the number that differ.
ranks() {
  local name=$1
  shift
  local pids=()
  for i in $(seq "$RANKS"); do
    local trace=""
    [ "${TRACE:-0}" = 1 ] && trace=$OUT/$name-$i.trace.json
    env ${trace:+PTXSPEC_TRACE=$trace} PTXSPEC_CACHE_DIR="$(mktemp -d)" "$BIN/gpt2" --json --mode adaptive $ARGS "$@" \
      --choices "$OUT/$name-$i.choices" > "$OUT/$name-$i.json" 2> "$OUT/$name-$i.err" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || echo "$name rank $((i + 1)): exit $?" | tee -a "$OUT/summary.txt"
  done
  local differ=0
  for i in $(seq 2 "$RANKS"); do
    if ! "$BIN/ptxspec" verify-choices "$OUT/$name-1.choices" "$OUT/$name-$i.choices" \
      > "$OUT/$name-$i.diff" 2>&1; then
      differ=$((differ + 1))
    fi
  done
  {
    echo "$name: $RANKS ranks, $differ of $((RANKS - 1)) differ from rank 1's choices"
    for i in $(seq "$RANKS"); do
      printf '  rank %s: %s choice(s), digest %s\n' "$i" \
        "$(grep -vc '^#' "$OUT/$name-$i.choices" 2>/dev/null)" \
        "$(sha256sum < "$OUT/$name-$i.choices" 2>/dev/null | cut -c1-16)"
    done
  } | tee -a "$OUT/summary.txt"
  return "$differ"
}

case " $PHASES " in *" fleet "*)
  echo "== 1. $RANKS ranks, one store (every rank a writer)"
  PTXSPEC_CACHE_SIGNING_KEY=$W/secret.key ranks fleet --fleet "$FLEET" || failed=1
esac
case " $PHASES " in *" alone "*)
  echo "== 2. $RANKS ranks, no store (each times for itself)"
  ranks alone || true
esac
case " $PHASES " in *" pinned "*) ;; *)
  kill "$(cat "$W/redis.pid")" 2> /dev/null
  exit "$failed"
esac
echo "== 3. two processes pinned to rank 1's table"
"$BIN/ptxspec" sign-choices "$OUT/fleet-1.choices" --secret "$W/secret.key" -o "$W/pinned.choices"
for i in 1 2; do
  PTXSPEC_CACHE_DIR=$(mktemp -d) "$BIN/gpt2" --json --mode adaptive $ARGS --pin "$W/pinned.choices" \
    --choices "$OUT/pinned-$i.choices" > "$OUT/pinned-$i.json" 2> "$OUT/pinned-$i.err" \
    || echo "pinned $i: exit $?" | tee -a "$OUT/summary.txt"
done
if "$BIN/ptxspec" verify-choices "$OUT/pinned-1.choices" "$OUT/pinned-2.choices" > "$OUT/pinned.diff" 2>&1 \
  && python3 - "$OUT/pinned-1.json" "$OUT/pinned-2.json" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
def losses(run):
    tiny = [(b["build"], b["losses"]) for b in run["gpu"]["tiny"]]
    small = [(b["build"], b["losses"]) for b in run["gpu"]["gpt2_small"]["builds"]]
    return tiny, small
(ta, sa), (tb, sb) = losses(a), losses(b)
# Bit for bit: the JSON numbers are Rust's shortest round-trip text of each
# f64. GPT-2 small's runs may settle after different step counts: every step
# from the first is listed, and the steps both ran are compared.
n = min(len(sa[0][1]), len(sb[0][1])) if sa and sb else 0
small_same = [x for x, _ in sa] == [x for x, _ in sb] and all(
    la[:n] == lb[:n] for (_, la), (_, lb) in zip(sa, sb))
same = ta == tb and small_same and n > 0
print(f"pinned runs: tiny losses {'the same' if ta == tb else 'DIFFER'}, "
      f"GPT-2 small's first {n} steps' losses {'the same' if small_same else 'DIFFER'}")
sys.exit(0 if same else 1)
EOF
then
  echo "pinned: the same choices and losses" | tee -a "$OUT/summary.txt"
else
  echo "pinned: DIFFER (pinned.diff)" | tee -a "$OUT/summary.txt"
  failed=1
fi
kill "$(cat "$W/redis.pid")" 2> /dev/null
exit "$failed"
