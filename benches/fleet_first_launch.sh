#!/usr/bin/env bash
# Values set -> first specialized launch from a fleet store (issue 54): a
# local redis-server, a writer process that links and uploads the value
# sets, then fresh reader processes with fresh disk caches.
#
# On the GPU machine, from a folder BIN (default .gpu) holding the release
# `ptxspec`, the `first_launch` bench binary (cargo bench --no-run --bench
# first_launch) and redis/{bin/redis-server,lib/*} unpacked from Debian's
# redis-server, redis-tools, libjemalloc2 and liblzf1 packages.
set -u
BIN=${BIN:-.gpu}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$BIN/redis/lib:${LD_LIBRARY_PATH:-}
export PATH=$PWD/$BIN/redis/bin:$PATH
W=$(mktemp -d)
redis-server --port 6399 --bind 127.0.0.1 --save "" --appendonly no --dir "$W" --daemonize yes --logfile "$W/redis.log"
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/6399) 2>/dev/null && break; sleep 0.1; done
$BIN/ptxspec cache keygen --secret "$W/secret.key" --public "$W/public.keys" > /dev/null
export PTXSPEC_REMOTE_CACHE=redis://127.0.0.1:6399/ PTXSPEC_CACHE_TRUSTED_KEYS=$W/public.keys
echo "== writer"
PTXSPEC_CACHE_DIR=$(mktemp -d) PTXSPEC_CACHE_SIGNING_KEY=$W/secret.key $BIN/first_launch 16 8 4 32
for i in $(seq 10); do
  echo "== reader $i (a fresh process, a fresh disk cache)"
  PTXSPEC_CACHE_DIR=$(mktemp -d) $BIN/first_launch 16 8 4 32
done
