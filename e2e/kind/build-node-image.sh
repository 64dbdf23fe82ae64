#!/usr/bin/env bash
# Usage: e2e/kind/build-node-image.sh [IMAGE_TAG]     (default kubelet-rs/node:dev)
#
# Builds kubelet-rs (release) and a kind node image that carries it as /usr/bin/kubelet, for
# e2e/sonobuoy.md. Needs a Docker engine and access to Docker Hub (kindest/node), so it is NOT
# RUN on the project's test bed; it is written for a user's workstation.
# Env: KIND_NODE_IMAGE (default kindest/node:v1.34.0), CARGO_TARGET_DIR.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TAG="${1:-kubelet-rs/node:dev}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.34.0}"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"

log() { printf '[kind-image] %s\n' "$*" >&2; }

command -v docker >/dev/null || { log "error: docker is required"; exit 1; }
log "cargo build --release"
(cd "$REPO" && CARGO_TARGET_DIR="$TARGET" cargo build --release --bin kubelet)
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$TARGET/release/kubelet" "$ctx/kubelet"
cp "$REPO/e2e/kind/Dockerfile" "$ctx/Dockerfile"
log "docker build -t $TAG (FROM $KIND_NODE_IMAGE)"
docker build --build-arg "KIND_NODE_IMAGE=$KIND_NODE_IMAGE" -t "$TAG" "$ctx"
log "done: kind create cluster --image $TAG --config $REPO/e2e/kind/cluster.yaml"
