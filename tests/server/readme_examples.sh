#!/usr/bin/env bash
# Runs the README's example commands (between the readme-examples markers) against a real
# server on the ports the README names; every command must succeed and print something.
set -euo pipefail
root=$1
bin=$2
cd "$root"
"$bin" serve --model models/default --grpc-port 50051 --http-port 8000 > /tmp/mixserve-readme-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf localhost:8000/ready > /dev/null 2>&1 && break; sleep 0.1; done
block=$(awk '/<!-- readme-examples/{f=1;next} /<!-- end readme-examples/{f=0} f' README.md | sed '/^```/d')
# join backslash continuations, then run each command
commands=$(printf '%s\n' "$block" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
n=0
while IFS= read -r cmd; do
  [ -z "$cmd" ] && continue
  n=$((n + 1))
  echo "== $cmd"
  out=$(bash -o pipefail -c "$cmd")
  echo "$out" | head -c 400; echo
  [ -n "$out" ] || { echo "no output from: $cmd"; exit 1; }
done <<< "$commands"
[ "$n" -ge 5 ] || { echo "found only $n example commands"; exit 1; }
echo "all $n README examples ran"
