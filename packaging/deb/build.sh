#!/usr/bin/env bash
# Usage: packaging/deb/build.sh
#
# Builds the Debian package kubelet-rs_<version>_<arch>.deb with dpkg-deb and prints its path.
# It holds /usr/bin/kubelet (stripped), kubelet.service with the settings of upstream's unit
# (/lib/systemd/system, where bookworm's packages put units), /etc/default/kubelet
# (KUBELET_EXTRA_ARGS=, a conffile), the empty /var/lib/kubelet and /etc/kubernetes/manifests,
# the copyright, changelog and third-party licenses (the crates linked in), a manual page
# (kubelet(8)), and the maintainer scripts of packaging/deb/maint.
#
# The version is the one the binary reports (`kubelet --version`: "Kubernetes vK+kubelet-rs.V"):
# the package is kubelet-rs V and provides kubelet (= K). The top entry of packaging/deb/changelog
# must be for V.
#
# Environment:
#   KRS_DEB_KUBELET   use this kubelet binary instead of `cargo build --release --bin kubelet`
#   CARGO_TARGET_DIR  where cargo builds (default: <repo>/target)
#   KRS_DEB_DIST      where the .deb is written (default: <repo>/target/deb, ignored by git)
# Needs dpkg-dev (dpkg-shlibdeps), binutils (strip) and cargo (also for the crates' licenses).
set -euo pipefail

DEB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$DEB_DIR/../.." && pwd)"
PACKAGE=kubelet-rs
DIST="${KRS_DEB_DIST:-$REPO_ROOT/target/deb}"

deb_log() { printf '[deb] %s\n' "$*" >&2; }
deb_die() {
	printf '[deb] error: %s\n' "$*" >&2
	exit 1
}

# third_party_notices: the crates linked into the kubelet (normal dependencies for this host, no
# proc-macros), each with its declared license and the license and notice files it ships, as the
# MIT, BSD and Apache licenses ask of a binary distribution. From Cargo.lock and cargo's copy of
# the crates' sources (there after a build).
third_party_notices() {
	local host registry pv name ver license dir file found
	host="$(rustc -vV | sed -n 's/^host: //p')"
	registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
	printf 'Rust crates linked into /usr/bin/kubelet (from crates.io), each with its declared\n'
	printf 'license and the license and notice files it ships.\n'
	(cd "$REPO_ROOT" && cargo tree --locked --offline -e normal,no-proc-macro --prefix none \
		--format '{p}|{l}' -p kubelet-rs --target "$host") | sed 's/ (\*)$//' | LC_ALL=C sort -u |
		while IFS='|' read -r pv license; do
			name="${pv%% *}"
			ver="${pv#* v}"
			[[ "$name" == kubelet-rs ]] && continue
			[[ "$ver" =~ ^[0-9][0-9A-Za-z.+-]*$ ]] || deb_die "unexpected crate '$pv' (not from crates.io?)"
			dir="$(compgen -G "$registry/*/$name-$ver" | head -n1)" ||
				deb_die "no source of crate $name $ver under $registry (build first)"
			printf '\n==== %s %s (%s)\n' "$name" "$ver" "${license:-no license declared}"
			found=0
			while IFS= read -r file; do
				found=1
				printf '\n---- %s\n' "${file##*/}"
				cat "$file"
			done < <(find "$dir" -maxdepth 1 -type f \( -iname 'LICEN[CS]E*' -o -iname 'COPYING*' \
				-o -iname 'NOTICE*' -o -iname 'UNLICENSE*' -o -iname 'COPYRIGHT*' \) | LC_ALL=C sort)
			((found)) || printf '\n(the crate ships no license file)\n'
		done
}

for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
	command -v "$tool" >/dev/null || deb_die "$tool is missing (apt-get install dpkg-dev binutils)"
done

# The binary: given, or built by cargo.
if [[ -n "${KRS_DEB_KUBELET:-}" ]]; then
	KUBELET="$KRS_DEB_KUBELET"
else
	command -v cargo >/dev/null || deb_die "cargo is missing (or set KRS_DEB_KUBELET)"
	deb_log "cargo build --release --bin kubelet"
	(cd "$REPO_ROOT" && cargo build --release --locked --bin kubelet)
	KUBELET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/kubelet"
fi
[[ -x "$KUBELET" ]] || deb_die "no executable kubelet at $KUBELET"

# Versions, from the binary itself.
version_line="$("$KUBELET" --version)" || deb_die "$KUBELET --version failed"
if ! [[ "$version_line" =~ ^Kubernetes\ v([0-9]+\.[0-9]+\.[0-9]+)\+kubelet-rs\.([0-9][0-9A-Za-z.+~-]*)$ ]]; then
	deb_die "unexpected version line from $KUBELET: '$version_line'"
fi
K8S_VERSION="${BASH_REMATCH[1]}"
VERSION="${BASH_REMATCH[2]}"
changelog_head="$(head -n1 "$DEB_DIR/changelog")"
[[ "$changelog_head" == "$PACKAGE ($VERSION) "* ]] ||
	deb_die "packaging/deb/changelog starts with '$changelog_head', not an entry for $PACKAGE $VERSION: add one"
# The maintainer and the date of the top changelog entry (its trailer line).
trailer="$(grep -m1 '^ -- ' "$DEB_DIR/changelog")"
[[ "$trailer" =~ ^\ --\ (.+\ \<[^\>]+\>)\ \ (.+)$ ]] || deb_die "bad changelog trailer: '$trailer'"
MAINTAINER="${BASH_REMATCH[1]}"
# Timestamps inside the package: the changelog's date, so that a rebuild gives the same bytes.
SOURCE_DATE_EPOCH="$(date -d "${BASH_REMATCH[2]}" +%s)" || deb_die "bad changelog date"
export SOURCE_DATE_EPOCH
ARCH="$(dpkg --print-architecture)"

mkdir -p "$DIST"
STAGE="$(mktemp -d "$DIST/stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
ROOT="$STAGE/root"
DOC="$ROOT/usr/share/doc/$PACKAGE"

install -d -m 755 "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$ROOT/etc/default" \
	"$ROOT/etc/kubernetes/manifests" "$ROOT/var/lib/kubelet" "$DOC" "$ROOT/usr/share/man/man8"
# As dh_strip does: no debug info, no .comment/.note sections.
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
	-o "$ROOT/usr/bin/kubelet" "$KUBELET"
chmod 755 "$ROOT/usr/bin/kubelet"
install -m 644 "$DEB_DIR/kubelet.service" "$ROOT/lib/systemd/system/kubelet.service"
install -m 644 "$DEB_DIR/kubelet.default" "$ROOT/etc/default/kubelet"
install -m 644 "$DEB_DIR/copyright" "$DOC/copyright"
gzip -9n <"$DEB_DIR/changelog" >"$DOC/changelog.gz"
gzip -9n <"$DEB_DIR/kubelet.8" >"$ROOT/usr/share/man/man8/kubelet.8.gz"
command -v cargo >/dev/null || deb_die "cargo is missing (needed to list the crates' licenses)"
third_party_notices >"$STAGE/notices"
gzip -9n <"$STAGE/notices" >"$DOC/third-party-licenses.gz"
deb_log "third-party-licenses: $(grep -c '^==== ' "$STAGE/notices") crates, $(grep -c '^(the crate ships no license file)' "$STAGE/notices" || true) without a license file"
chmod 644 "$DOC/changelog.gz" "$ROOT/usr/share/man/man8/kubelet.8.gz" "$DOC/third-party-licenses.gz"
for script in postinst prerm postrm; do
	install -m 755 "$DEB_DIR/maint/$script" "$ROOT/DEBIAN/$script"
done
printf '/etc/default/kubelet\n' >"$ROOT/DEBIAN/conffiles"
chmod 644 "$ROOT/DEBIAN/conffiles"

# Shared libraries the binary links (libc6, libgcc-s1), as dpkg-shlibdeps works them out; it
# wants to run at the top of a source tree.
mkdir -p "$STAGE/src/debian"
: >"$STAGE/src/debian/control"
shlibs="$(cd "$STAGE/src" && dpkg-shlibdeps -O -e"$ROOT/usr/bin/kubelet" 2>/dev/null)" ||
	deb_die "dpkg-shlibdeps failed on the kubelet"
shlibs="${shlibs#shlibs:Depends=}"
[[ "$shlibs" == *libc6* ]] || deb_die "dpkg-shlibdeps found no libc6 dependency: '$shlibs'"

# Installed-Size as dpkg-gencontrol counts it: KiB per file rounded up, 1 per other entry.
installed_size="$(cd "$ROOT" && find . -path ./DEBIAN -prune -o ! -path . -printf '%y %s\n' |
	awk '$1 == "f" { total += int(($2 + 1023) / 1024); next } { total += 1 } END { print total }')"

# Depends: upstream's kubelet package requires iptables (>= 1.4.21), mount, util-linux and
# kubernetes-cni. util-linux is Essential in Debian (always there; policy forbids an unversioned
# dependency on it, lintian errs). kubernetes-cni is not in Debian and the kubelet runs no CNI
# plugin itself (the container runtime does): recommended, Debian's plugins the alternative.
# init-system-helpers: deb-systemd-helper in the maintainer scripts.
cat >"$ROOT/DEBIAN/control" <<EOF
Package: $PACKAGE
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $installed_size
Depends: $shlibs, init-system-helpers (>= 1.54~), iptables (>= 1.4.21), mount
Recommends: kubernetes-cni (>= 1.2.0) | containernetworking-plugins
Conflicts: kubelet
Replaces: kubelet
Provides: kubelet (= $K8S_VERSION)
Section: net
Priority: optional
Description: Kubernetes node agent (kubelet) written in Rust
 kubelet-rs is a Kubernetes kubelet written in Rust that replaces the
 upstream kubelet on a node: same flags, same KubeletConfiguration file,
 same CRI socket and the same files on disk.
 .
 This package installs it as /usr/bin/kubelet with the kubelet.service unit
 of upstream's kubelet package, so that kubeadm's drop-in configures it
 unchanged. It reports Kubernetes version $K8S_VERSION.
EOF

(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
	xargs -0 md5sum) >"$ROOT/DEBIAN/md5sums"
chmod 644 "$ROOT/DEBIAN/md5sums"
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

OUT="$DIST/${PACKAGE}_${VERSION}_${ARCH}.deb"
deb_log "dpkg-deb --build (xz) -> $OUT"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$OUT" >/dev/null
deb_log "$PACKAGE $VERSION ($ARCH), provides kubelet (= $K8S_VERSION): $(du -h "$OUT" | cut -f1)"
printf '%s\n' "$OUT"
