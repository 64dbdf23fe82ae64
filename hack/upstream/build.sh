#!/usr/bin/env bash
# Builds upstream Kubernetes binaries (v1.20.2, the newest complete tree any
# registry reachable here serves) from Debian bookworm's source package
# `kubernetes`. They are the reference we compare our kubelet against.
#
# Usage: hack/upstream/build.sh [--force] [TARGET...]      (default: cmd/kubelet)
#   e.g. hack/upstream/build.sh cmd/kubectl
#   everything the project runs: hack/upstream/build.sh $(awk '!/^ *(#|$)/ {print $1}' hack/upstream/targets)
#
# A TARGET is a package path in the tree; its binary is named after its last element. As in
# upstream's hack/lib/golang.sh, a target ending in ".test" (test/e2e/e2e.test,
# test/e2e_node/e2e_node.test) is a test binary, compiled with `go test -c` from its folder.
# Binaries built without cgo (static): upstream's static list (kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubeadm, kubectl) and those that go into
# test images, which have no dynamic loader: everything under test/images/ and
# vendor/k8s.io/sample-apiserver (e2e/images.sh).
#
# hack/upstream/targets lists every target the project runs and who runs it; scripts build
# through krs_upstream_ensure (hack/upstream/lib.sh) rather than call this with targets of
# their own. Under hack/test.sh (KRS_UPSTREAM_PREBUILT set, see lib.sh) a target it did not
# build up front is refused.
#
# Everything lives outside the checkout, under KRS_UPSTREAM_CACHE
# (default $KRS_CACHE_DIR/upstream, that is /var/cache/kubelet-rs/upstream):
#   src/     the unpacked source package (fetched once)
#   gopath/  GOPATH with src/k8s.io/kubernetes -> the tree
#   gocache/ GOCACHE, so rebuilds of other targets reuse compiled packages
#   bin/     the binaries; a target whose binary is already here is skipped
# --force rebuilds targets whose binary exists (the new one replaces it only once built).
#
# The tree vendors github.com/modern-go/reflect2 v1.0.1, which breaks with Go >= 1.18 (the
# runtime's map iterator changed): json-iterator's sorted map encoder then faults in
# runtime.mapiterinit, and kube-apiserver dies ("fatal error: fault") at the first patch of a
# mutating admission webhook. Builds use reflect2 v1.0.2 instead (Debian's
# golang-github-modern-go-reflect2-dev), through a `go build -overlay`: the tree is not changed.
# Binaries built before that fix are rebuilt with --force.
# Needs root (apt). Runs the compiler at nice 19: the machine is shared.
set -euo pipefail

# shellcheck source=hack/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CACHE=$KRS_UPSTREAM_CACHE
SRC_DIR=$CACHE/src
GOPATH_DIR=$CACHE/gopath
BIN_DIR=$CACHE/bin
LINK=$GOPATH_DIR/src/k8s.io/kubernetes
GEN_MARK=$CACHE/.generated_files.done
APT_SRC_FILE=/etc/apt/sources.list.d/kubelet-rs-deb-src.sources

log() { printf '[upstream-build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (apt-get, /var/cache)"

force=0
if [[ ${1:-} == --force ]]; then
  force=1
  shift
fi
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(cmd/kubelet)
for t in "${targets[@]}"; do
  krs_upstream_check_prebuilt "$(basename "${t%/}")"
done

mkdir -p "$CACHE" "$BIN_DIR"
# Two runs at once would fight over the tree and the caches.
exec 9>"$CACHE/.lock"
flock -w 3600 9 || die "another build holds $CACHE/.lock"

todo=()
for t in "${targets[@]}"; do
  t=${t%/}
  if [[ $force -eq 0 && -x $BIN_DIR/$(basename "$t") ]]; then
    log "skip $t: $BIN_DIR/$(basename "$t") exists"
  else
    todo+=("$t")
  fi
done
if [[ ${#todo[@]} -eq 0 ]]; then
  log "nothing to build"
  exit 0
fi

# --- apt: deb-src entry, tools, source -------------------------------------

have_deb_src() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    grep -Eq '^[[:space:]]*deb-src[[:space:]].*[[:space:]]bookworm[[:space:]].*\bmain\b' "$f" && return 0
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    # deb822: one stanza per paragraph; need deb-src + bookworm + main together.
    awk 'BEGIN{RS=""; found=0}
         /(^|\n)Types:[^\n]*deb-src/ && /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ &&
         /(^|\n)Components:[^\n]*[ \t]main([ \t]|\n|$)/ {found=1}
         END{exit !found}' "$f" && return 0
  done
  return 1
}

# The mirror of the existing bookworm "deb" stanza, so we use the host already configured.
configured_mirror() {
  local f=/etc/apt/sources.list.d/debian.sources
  if [[ -f $f ]]; then
    awk 'BEGIN{RS=""}
         /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ {
           n=split($0, lines, "\n")
           for (i=1;i<=n;i++) if (lines[i] ~ /^URIs:/) {sub(/^URIs:[ \t]*/, "", lines[i]); split(lines[i], u, /[ \t]+/); print u[1]; exit}
         }' "$f"
    return
  fi
  grep -Ehs '^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+[[:space:]]+bookworm[[:space:]]' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
    head -n1 | sed -E 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/'
}

need_update=0
if ! have_deb_src; then
  mirror=$(configured_mirror)
  [[ -n $mirror ]] || die "no bookworm mirror configured to derive a deb-src entry from"
  log "adding deb-src for bookworm main ($mirror) in $APT_SRC_FILE"
  cat >"$APT_SRC_FILE" <<EOF
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  need_update=1
fi

pkgs=(dpkg-dev golang-go rsync make gcc libc6-dev git golang-github-modern-go-reflect2-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
find_tree() {
  [[ -d $SRC_DIR ]] || return 0
  find "$SRC_DIR" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1
}
tree=$(find_tree)
if [[ $need_update -eq 1 || ${#missing[@]} -gt 0 || -z $tree ]]; then
  log "apt-get update"
  apt-get update -qq
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ -z $tree ]]; then
  log "apt-get source kubernetes into $SRC_DIR"
  mkdir -p "$SRC_DIR"
  (cd "$SRC_DIR" && apt-get source -qq kubernetes)
  tree=$(find_tree)
  [[ -n $tree ]] || die "apt-get source produced no kubernetes-* folder"
fi
log "tree: $tree"

# --- version stamped into the binaries ---------------------------------------
# Debian's version is "1.20.5+really1.20.2-...": the tree is 1.20.2.
deb_version=$(dpkg-parsechangelog -l "$tree/debian/changelog" -S Version)
kube_version=${deb_version%-*}
kube_version=${kube_version##*really}
kube_version=${kube_version%%+*}
[[ $kube_version =~ ^([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || die "cannot parse version from '$deb_version'"
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}
# git archive substituted the commit into base.go; reuse it rather than guess.
commit=$(sed -nE 's/^[[:space:]]*gitCommit[[:space:]]*=[[:space:]]*"([0-9a-f]{40})".*/\1/p' \
  "$tree/staging/src/k8s.io/component-base/version/base.go" | head -n1)
log "version v$kube_version (commit ${commit:-unknown})"

ldflags="-s -w -buildid="
for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags+=" -X '$pkg.gitVersion=v$kube_version' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minor'"
  ldflags+=" -X '$pkg.gitTreeState=archive' -X '$pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)'"
  [[ -z $commit ]] || ldflags+=" -X '$pkg.gitCommit=$commit'"
done

# --- GOPATH mode ------------------------------------------------------------
mkdir -p "$(dirname "$LINK")" "$CACHE/gocache"
if [[ ! -L $LINK || $(readlink "$LINK") != "$tree" ]]; then
  rm -f "$LINK"
  ln -s "$tree" "$LINK"
fi
export GO111MODULE=off
export GOPATH=$GOPATH_DIR
export GOCACHE=$CACHE/gocache
export GOFLAGS=
export GOTOOLCHAIN=local
export HOME=${HOME:-/root}
unset GOBIN
go version >&2

if [[ ! -f $GEN_MARK ]]; then
  log "make generated_files (takes a few minutes)"
  start=$SECONDS
  (cd "$LINK" && nice -n 19 make generated_files)
  touch "$GEN_MARK"
  log "generated_files done in $((SECONDS - start)) s"
fi

# --- reflect2 v1.0.2 in place of the vendored v1.0.1 (see the header) ---------
overlay_args=()
reflect2_vendor=$tree/vendor/github.com/modern-go/reflect2
reflect2_fixed=/usr/share/gocode/src/github.com/modern-go/reflect2
if grep -q '^# github.com/modern-go/reflect2 v1\.0\.1' "$tree/vendor/modules.txt" 2>/dev/null; then
  [[ -f $reflect2_fixed/go_above_118.go ]] ||
    die "$reflect2_fixed has no go_above_118.go: golang-github-modern-go-reflect2-dev >= 1.0.2 needed"
  overlay=$CACHE/reflect2-overlay.json
  python3 - "$LINK/vendor/github.com/modern-go/reflect2" "$reflect2_vendor" "$reflect2_fixed" >"$overlay.tmp" <<'PY'
import json, os, sys
link, vendored, fixed = sys.argv[1:]
src = lambda d: {f for f in os.listdir(d) if f.endswith((".go", ".s"))}
replace = {}
for f in src(vendored) | src(fixed):
    # The package is compiled from the GOPATH path (through the tree's symlink).
    replace[os.path.join(link, f)] = os.path.join(fixed, f) if f in src(fixed) else ""
json.dump({"Replace": replace}, sys.stdout, indent=1, sort_keys=True)
PY
  mv -f "$overlay.tmp" "$overlay"
  overlay_args=(-overlay "$overlay")
  log "reflect2: building with v1.0.2 from $reflect2_fixed (overlay $overlay)"
fi

# Succeeds when TARGET must be linked without cgo.
is_static() {
  case $1 in
    # They go into test images (e2e/images.sh) that have no dynamic loader.
    test/images/* | vendor/k8s.io/sample-apiserver) return 0 ;;
    cmd/kube-apiserver | cmd/kube-controller-manager | cmd/kube-scheduler) return 0 ;;
    cmd/kube-proxy | cmd/kubeadm | cmd/kubectl) return 0 ;;
  esac
  return 1
}

# go build -o of a package that is not a command writes an archive, silently: refuse it first.
for t in "${todo[@]}"; do
  [[ $(basename "$t") == *.test ]] && continue
  pkg_name=$(cd "$LINK" && go list -tags selinux,notest -f '{{.Name}}' "k8s.io/kubernetes/$t") ||
    die "$t: no such package in the tree"
  [[ $pkg_name == main ]] || die "$t is package $pkg_name, not a command"
done

for t in "${todo[@]}"; do
  name=$(basename "$t")
  cgo=1
  is_static "$t" && cgo=0
  start=$SECONDS
  # Same tags as upstream's hack/lib/golang.sh; plain go build keeps our GOPATH/GOCACHE.
  if [[ $name == *.test ]]; then
    log "go test -c $(dirname "$t") (CGO_ENABLED=$cgo)"
    # -vet=off: go vet does not read build overlays (it fails on the reflect2 one), and
    # vetting is no part of building the binary.
    (cd "$LINK" && CGO_ENABLED=$cgo nice -n 19 go test -c -vet=off -tags selinux,notest -trimpath "${overlay_args[@]}" \
      -ldflags "$ldflags" -o "$BIN_DIR/.$name.tmp" "k8s.io/kubernetes/$(dirname "$t")")
  else
    log "go build $t (CGO_ENABLED=$cgo)"
    (cd "$LINK" && CGO_ENABLED=$cgo nice -n 19 go build -tags selinux,notest -trimpath "${overlay_args[@]}" \
      -ldflags "$ldflags" -o "$BIN_DIR/.$name.tmp" "k8s.io/kubernetes/$t")
  fi
  [[ -s $BIN_DIR/.$name.tmp ]] || die "$t produced no binary"
  mv -f "$BIN_DIR/.$name.tmp" "$BIN_DIR/$name"
  log "built $BIN_DIR/$name in $((SECONDS - start)) s"
done
log "done"
