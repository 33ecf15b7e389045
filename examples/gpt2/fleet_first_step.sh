#!/usr/bin/env bash
# A fresh process's first GPT-2 training step from a warm fleet (issue 63): a
# local redis-server; a writer process that trains the generic and adaptive
# builds until they settle (its links stored in the fleet, signed; its
# adaptive verdicts shared); then readers — fresh processes with fresh disk
# caches and no tier profile of their own — whose every step is timed.
#
# On the GPU machine, from a folder BIN (default .gpu) holding the release
# `gpt2` example, the release `ptxspec` CLI and redis/{bin/redis-server,lib/*}
# unpacked from Debian's redis-server, redis-tools, libjemalloc2 and liblzf1
# packages. Writes writer.json and reader-N.json (the example's --json) to OUT;
# with TRACE=1, each reader's trace too (reader-N.trace.json, PTXSPEC_TRACE).
# With PROFILE=writer, each reader starts from a copy of the writer's tier
# profile (as a deployment ships one), its verdicts and argument sets known
# before the first launch. With GRAPHS=1, every process runs its steps as
# CUDA graphs (--graphs): the writer's graph trials are shared too, and a
# reader's graphs keep their verdicts untimed.
set -u
BIN=${BIN:-.gpu}
GRAPHS_FLAG=""
[ "${GRAPHS:-0}" = 1 ] && GRAPHS_FLAG=--graphs
OUT=${OUT:-$(mktemp -d)}
READERS=${READERS:-2}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$BIN/redis/lib:${LD_LIBRARY_PATH:-}
W=$(mktemp -d)
"$BIN/redis/bin/redis-server" --port 6399 --bind 127.0.0.1 --save "" --appendonly no --dir "$W" \
  --daemonize yes --logfile "$W/redis.log"
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6399) 2>/dev/null && break; sleep 0.1; done
"$BIN/ptxspec" cache keygen --secret "$W/secret.key" --public "$W/public.keys" > /dev/null
export PTXSPEC_CACHE_TRUSTED_KEYS=$W/public.keys
FLEET=redis://127.0.0.1:6399/
echo "== writer"
PTXSPEC_CACHE_DIR=$(mktemp -d) PTXSPEC_TIER_PROFILE=$W/writer.profile PTXSPEC_CACHE_SIGNING_KEY=$W/secret.key \
  "$BIN/gpt2" --json --steps 2 --mode generic,adaptive $GRAPHS_FLAG --fleet "$FLEET" > "$OUT/writer.json"
echo "writer rc=$?"
for i in $(seq "$READERS"); do
  echo "== reader $i (a fresh process, a fresh disk cache, profile: ${PROFILE:-none of its own})"
  trace=""
  [ "${TRACE:-0}" = 1 ] && trace=$OUT/reader-$i.trace.json
  profile="$(mktemp -d)/profile"
  if [ "${PROFILE:-}" = writer ]; then
    cp "$W/writer.profile" "$profile" && chmod 600 "$profile"
  fi
  env ${trace:+PTXSPEC_TRACE=$trace} PTXSPEC_CACHE_DIR="$(mktemp -d)" PTXSPEC_TIER_PROFILE="$profile" \
    "$BIN/gpt2" --json --steps 2 --mode generic,adaptive $GRAPHS_FLAG --fleet "$FLEET" > "$OUT/reader-$i.json"
  echo "reader $i rc=$?"
done
