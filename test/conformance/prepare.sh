#!/usr/bin/env bash
# Prints two lines for the Connect conformance suite: the path of the
# connectconformance runner, built once from a pinned release (go-install.sh),
# and the path of a descriptor set of the same release's protos
# (connectrpc/conformance/v1/*.proto, from the module go just fetched),
# built once by buf into .tmp/conformance. The server under test builds
# ConformanceService from those descriptors at run time: no generated code of
# another project is committed, and the protos always match the runner.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=v1.0.7
runner=$(test/support/go-install.sh connectconformance connectrpc.com/conformance/cmd/connectconformance "$version")
descriptors=".tmp/conformance/conformance-$version.binpb"
mkdir -p .tmp/conformance
exec 9>.tmp/conformance.lock
flock 9
if [ ! -s "$descriptors" ]; then
  module=$(go mod download -json "connectrpc.com/conformance@$version" | node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>console.log(JSON.parse(s).Dir))')
  npx buf build "$module" -o "$descriptors.partial" >&2
  mv "$descriptors.partial" "$descriptors"
fi
echo "$runner"
echo "$PWD/$descriptors"
