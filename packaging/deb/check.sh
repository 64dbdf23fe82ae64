#!/usr/bin/env bash
# Usage: packaging/deb/check.sh [PACKAGE.deb]   (as root)
#
# Checks the kubelet-rs Debian package (built by packaging/deb/build.sh when no path is given):
#   1. its fields and files: Provides/Conflicts/Replaces kubelet, Provides' version = the one the
#      packaged binary reports, Depends, the exact file list, the conffile, the unit's settings,
#      a stripped binary;
#   2. lintian (run as nobody): no errors (warnings and infos are printed);
#   3. in a fresh Debian bookworm root made by mmdebstrap (minbase + systemd, cached as a tarball
#      under $KRS_DEB_CACHE), chrooted in a mount namespace of its own:
#      - apt resolves the package's Depends from the Debian registry, then `apt-get install` of
#        the .deb installs it and nothing else; the postinst enables kubelet.service but does not
#        start it although /run/systemd/system exists (the chroot case);
#      - `kubelet --version` runs (no network), a package depending on kubelet (>= 1.19.0), as
#        kubeadm's did, installs against the versioned Provides;
#      - `systemd-analyze verify` (the root's own systemd) parses the unit alone and with kubeadm's
#        10-kubeadm.conf drop-in in /etc/systemd/system/kubelet.service.d and in
#        /lib/systemd/system/kubelet.service.d, silently; a drop-in whose ExecStart names a missing
#        binary must fail (so drop-ins are really read);
#      - `dpkg -r` leaves nothing but /etc/default/kubelet and `dpkg -P` nothing at all: listings
#        of the root (path, type, mode, owner, link target, sha256) before install, after remove and
#        after purge are compared, dpkg's and apt's own state and logs left out;
#      - two upgrades keep an edited /etc/default/kubelet and the admin's enable/disable choice;
#      - apt replaces a stand-in package named kubelet (upstream's layout, debhelper-style
#        scripts) with this one: unit enabled and unmasked, the conffile this package's;
#   4. the same root booted with systemd-nspawn (systemd as init, a network namespace with only
#      loopback): dpkg -i starts kubelet.service; with kubeadm's drop-in and
#      KUBELET_EXTRA_ARGS=--version in /etc/default/kubelet the kubelet prints its version and is
#      restarted after RestartSec (Restart=always); dpkg -r stops it and systemd forgets the unit.
# Prints what it verified with timings and exits non-zero at the first failure.
#
# Environment:
#   KRS_DEB_CACHE   cache folder (default $KRS_CACHE_DIR/deb, /var/cache/kubelet-rs/deb): base root tarball, scratch
#   KRS_DEB_MIRROR  Debian mirror (default http://deb.debian.org/debian; security updates from
#                   http://deb.debian.org/debian-security)
# Installs lintian, mmdebstrap and systemd-container (systemd-nspawn) from Debian when missing.
# shellcheck disable=SC2016 # ${Status} (dpkg-query) and the in_root script are meant literally
set -euo pipefail

DEB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${KRS_DEB_CACHE:-${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/deb}"
MIRROR="${KRS_DEB_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${KRS_DEB_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
SUITE=bookworm
PACKAGE=kubelet-rs
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf '[deb-check] %s\n' "$*" >&2; }
die() {
	printf '[deb-check] FAIL: %s\n' "$*" >&2
	exit 1
}
ok() { printf '[deb-check] ok: %s\n' "$*" >&2; }

T0=$SECONDS
STEP_T=$SECONDS
step() {
	STEP_T=$SECONDS
	log "== $*"
}
took() { printf '%ss' "$((SECONDS - STEP_T))"; }

[[ "$(id -u)" -eq 0 ]] || die "must run as root (chroot, mmdebstrap)"

step "tools"
missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing"
if ((${#missing[@]})); then
	log "installing ${missing[*]} from Debian"
	apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
ok "$(lintian --version), mmdebstrap $(mmdebstrap --version | awk '{print $2}'), dpkg $(dpkg-query -W -f='${Version}' dpkg), systemd-nspawn $(dpkg-query -W -f='${Version}' systemd-container)"

if (($# > 0)); then
	DEB="$(realpath "$1")"
else
	step "build (packaging/deb/build.sh)"
	DEB="$("$DEB_DIR/build.sh" | tail -n1)"
	ok "built $DEB ($(took))"
fi
[[ -f "$DEB" ]] || die "no package at $DEB"

mkdir -p "$CACHE"
SCRATCH="$(mktemp -d "$CACHE/check.XXXXXX")"
# Every mount below lives in a mount namespace that ends with its command: nothing is mounted
# under SCRATCH once a step is over, so it can simply be deleted.
lint_dir=""
cleanup() {
	[[ -z "$lint_dir" ]] || rm -rf "$lint_dir"
	if findmnt -rno TARGET | grep -F "$SCRATCH" >/dev/null; then
		log "mounts left under $SCRATCH: not deleting it"
		return
	fi
	rm -rf "$SCRATCH"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------
step "package fields and files"
field() { dpkg-deb -f "$DEB" "$1"; }
[[ "$(field Package)" == "$PACKAGE" ]] || die "Package is '$(field Package)'"
VERSION="$(field Version)"
ARCH="$(field Architecture)"
[[ "$ARCH" == "$(dpkg --print-architecture)" ]] || die "Architecture $ARCH is not this machine's"
dpkg-deb -x "$DEB" "$SCRATCH/x"
version_line="$("$SCRATCH/x/usr/bin/kubelet" --version)"
[[ "$version_line" =~ ^Kubernetes\ v([0-9.]+)\+kubelet-rs\.(.+)$ ]] ||
	die "packaged kubelet --version: '$version_line'"
K8S_VERSION="${BASH_REMATCH[1]}"
[[ "${BASH_REMATCH[2]}" == "$VERSION" ]] || die "binary's version ${BASH_REMATCH[2]} != package's $VERSION"
[[ "$(field Provides)" == "kubelet (= $K8S_VERSION)" ]] || die "Provides: '$(field Provides)'"
[[ "$(field Conflicts)" == kubelet ]] || die "Conflicts: '$(field Conflicts)'"
[[ "$(field Replaces)" == kubelet ]] || die "Replaces: '$(field Replaces)'"
depends="$(field Depends)"
for dep in 'libc6 (>= ' 'iptables (>= 1.4.21)' 'mount' 'init-system-helpers (>= '; do
	[[ ", $depends," == *", $dep"* ]] || die "Depends lacks '$dep': $depends"
done
expected_files="$(
	cat <<'EOF'
./
./etc/
./etc/default/
./etc/default/kubelet
./etc/kubernetes/
./etc/kubernetes/manifests/
./lib/
./lib/systemd/
./lib/systemd/system/
./lib/systemd/system/kubelet.service
./usr/
./usr/bin/
./usr/bin/kubelet
./usr/share/
./usr/share/doc/
./usr/share/doc/kubelet-rs/
./usr/share/doc/kubelet-rs/changelog.gz
./usr/share/doc/kubelet-rs/copyright
./usr/share/doc/kubelet-rs/third-party-licenses.gz
./usr/share/man/
./usr/share/man/man8/
./usr/share/man/man8/kubelet.8.gz
./var/
./var/lib/
./var/lib/kubelet/
EOF
)"
actual_files="$(dpkg-deb -c "$DEB" | awk '{print $6}' | LC_ALL=C sort)"
[[ "$actual_files" == "$(LC_ALL=C sort <<<"$expected_files")" ]] ||
	die "file list differs: $(diff <(LC_ALL=C sort <<<"$expected_files") <(printf '%s\n' "$actual_files") || true)"
dpkg-deb -e "$DEB" "$SCRATCH/control"
[[ "$(cat "$SCRATCH/control/conffiles")" == /etc/default/kubelet ]] || die "conffiles: $(cat "$SCRATCH/control/conffiles")"
[[ "$(cat "$SCRATCH/x/etc/default/kubelet")" == "KUBELET_EXTRA_ARGS=" ]] || die "/etc/default/kubelet: $(cat "$SCRATCH/x/etc/default/kubelet")"
unit="$SCRATCH/x/lib/systemd/system/kubelet.service"
for setting in Wants=network-online.target After=network-online.target ExecStart=/usr/bin/kubelet \
	Restart=always StartLimitInterval=0 RestartSec=10 WantedBy=multi-user.target; do
	grep -qxF "$setting" "$unit" || die "kubelet.service lacks $setting"
done
sections="$(readelf -SW "$SCRATCH/x/usr/bin/kubelet")"
if grep -E ' \.(debug_info|debug_line|symtab) ' <<<"$sections"; then
	die "/usr/bin/kubelet is not stripped"
fi
deb_size="$(stat -c %s "$DEB")"
ok "$PACKAGE $VERSION $ARCH: .deb $((deb_size / 1024)) KiB, Installed-Size $(field Installed-Size) KiB; binary reports $version_line"
ok "Provides: $(field Provides); Conflicts/Replaces: kubelet; Depends: $depends; Recommends: $(field Recommends)"
ok "$(wc -l <<<"$actual_files") entries as expected, conffile /etc/default/kubelet (KUBELET_EXTRA_ARGS=), unit settings, stripped binary ($(took))"

# ---------------------------------------------------------------------------------------------
step "lintian"
# nobody must reach the file: a folder of its own under /tmp, whatever the cache folder's
# parents allow (a mktemp -d parent is 0700).
lint_dir="$(mktemp -d /tmp/krs-deb-lint.XXXXXX)"
chmod 755 "$lint_dir"
cp "$DEB" "$lint_dir/lint.deb"
chmod 644 "$lint_dir/lint.deb"
lint_rc=0
runuser -u nobody -- env HOME=/tmp lintian --display-info --tag-display-limit 0 "$lint_dir/lint.deb" \
	>"$SCRATCH/lintian.out" 2>&1 || lint_rc=$?
rm -rf "$lint_dir"
lint_dir=""
sed 's/^/    /' "$SCRATCH/lintian.out" >&2
errors="$(grep -c '^E: ' "$SCRATCH/lintian.out" || true)"
warnings="$(grep -c '^W: ' "$SCRATCH/lintian.out" || true)"
infos="$(grep -c '^I: ' "$SCRATCH/lintian.out" || true)"
((errors == 0)) || die "lintian: $errors error(s)"
((lint_rc == 0)) || die "lintian exited $lint_rc"
ok "lintian: $errors errors, $warnings warnings, $infos infos ($(took))"

# ---------------------------------------------------------------------------------------------
step "base root ($SUITE, mmdebstrap)"
MMDEBSTRAP_ARGS=(--variant=minbase --include=systemd --mode=root "$SUITE")
SOURCES=("deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main")
key="$(printf '%s\n' "${MMDEBSTRAP_ARGS[@]}" "${SOURCES[@]}" | sha256sum | cut -c1-12)"
BASE_TAR="$CACHE/base-$SUITE-$key.tar"
if [[ -f "$BASE_TAR" ]]; then
	ok "cached: $BASE_TAR ($((($(stat -c %s "$BASE_TAR") + 1048575) / 1048576)) MiB; delete it to refresh)"
else
	mmdebstrap --quiet "${MMDEBSTRAP_ARGS[@]}" "$SCRATCH/base.tar" "${SOURCES[@]}" ||
		die "mmdebstrap failed"
	mv "$SCRATCH/base.tar" "$BASE_TAR"
	ok "made $BASE_TAR ($((($(stat -c %s "$BASE_TAR") + 1048575) / 1048576)) MiB, $(took))"
fi
ROOT="$SCRATCH/root"
mkdir "$ROOT"
tar -C "$ROOT" -xpf "$BASE_TAR"
cp "$DEB" "$ROOT/tmp/$PACKAGE.deb"
# apt in the root reaches the registry with this machine's resolver, not the one cached in the tar.
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"

# in_root [--offline] CMD...: runs CMD chrooted in ROOT, in a mount namespace of its own with /proc
# and a private /dev/pts; --offline adds a network namespace of its own (no network at all).
in_root() {
	local unshare=(unshare --mount --fork)
	if [[ "$1" == --offline ]]; then
		unshare+=(--net)
		shift
	fi
	"${unshare[@]}" -- /bin/bash -c '
		set -e
		root="$1"; shift
		mount --make-rprivate /
		mount -t proc proc "$root/proc"
		mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
		exec chroot "$root" "$@"
	' in_root "$ROOT" env -i PATH="$CHROOT_PATH" HOME=/root LC_ALL=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive "$@"
}

# listing FILE: one line per entry of ROOT (path, type, mode, owner, link target; sha256 for
# files), dpkg's and apt's own state, logs and caches and the virtual or scratch folders excluded.
listing() {
	local prune=(\( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp
		-o -path ./var/lib/dpkg -o -path ./var/lib/apt -o -path ./var/cache/apt
		-o -path ./var/cache/debconf -o -path ./var/cache/ldconfig -o -path ./var/log \) -prune)
	(
		cd "$ROOT"
		find . -xdev "${prune[@]}" -o -type f -print0 | xargs -0 -r sha256sum |
			awk '{ sum = $1; sub(/^[0-9a-f]+  /, ""); print $0 "\t" sum }' >"$SCRATCH/sums"
		find . -xdev "${prune[@]}" -o -printf '%p\t%y\t%m\t%U:%G\t%l\n' |
			awk -F'\t' -v OFS='\t' 'NR == FNR { sum[$1] = $2; next } { print $0, ($2 == "f" ? sum[$1] : "") }' \
				"$SCRATCH/sums" - | LC_ALL=C sort
	) >"$1"
}

# ---------------------------------------------------------------------------------------------
step "dependencies from the Debian registry"
in_root apt-get -q update >"$SCRATCH/apt-update.log" 2>&1 || {
	cat "$SCRATCH/apt-update.log" >&2
	die "apt-get update in the root failed"
}
in_root apt-get -q satisfy -y --no-install-recommends "$depends" >"$SCRATCH/apt-deps.log" 2>&1 || {
	cat "$SCRATCH/apt-deps.log" >&2
	die "apt could not satisfy Depends: $depends"
}
ok "apt satisfied '$depends': $(grep -E '^[0-9]+ upgraded' "$SCRATCH/apt-deps.log") ($(took))"

# The chroot case: systemd's marker exists (as when a chroot shares its host's /run) but the
# postinst must see the chroot and leave the unit stopped.
mkdir -p "$ROOT/run/systemd/system"
listing "$SCRATCH/before"
ok "root listed before install: $(wc -l <"$SCRATCH/before") entries"

step "apt-get install ./$PACKAGE.deb"
in_root apt-get -q install -y --no-install-recommends "/tmp/$PACKAGE.deb" >"$SCRATCH/apt-install.log" 2>&1 || {
	cat "$SCRATCH/apt-install.log" >&2
	die "apt-get install of the package failed"
}
grep -qE '^0 upgraded, 1 newly installed, 0 to remove' "$SCRATCH/apt-install.log" || {
	cat "$SCRATCH/apt-install.log" >&2
	die "apt installed more or less than the package"
}
status="$(in_root dpkg-query -W -f='${Status} ${Version}' "$PACKAGE")"
[[ "$status" == "install ok installed $VERSION" ]] || die "dpkg status: $status"
grep -qF "kubelet-rs: in a chroot: kubelet.service is enabled but not started" "$SCRATCH/apt-install.log" ||
	die "the postinst did not report skipping the start in a chroot"
kubelet_id="$(stat -c %d:%i "$ROOT/usr/bin/kubelet")"
for exe in /proc/[0-9]*/exe; do
	if [[ "$(stat -L -c %d:%i "$exe" 2>/dev/null)" == "$kubelet_id" ]]; then
		die "a kubelet from the root runs: ${exe%/exe}"
	fi
done
enabled="$(in_root systemctl --root=/ is-enabled kubelet.service 2>&1 || true)"
[[ "$enabled" == enabled ]] || die "systemctl is-enabled kubelet.service: $enabled"
[[ -L "$ROOT/etc/systemd/system/multi-user.target.wants/kubelet.service" ]] || die "no multi-user.target.wants link"
ok "dpkg: $status (apt: 1 newly installed); kubelet.service enabled, not started in the chroot ($(took))"

step "kubelet --version in the root (no network)"
root_version="$(in_root --offline /usr/bin/kubelet --version)"
[[ "$root_version" == "$version_line" ]] || die "kubelet --version in the root: '$root_version'"
ok "$root_version ($(took))"

step "versioned Provides satisfies kubelet (>= 1.19.0), as kubeadm's package depends"
mkdir -p "$SCRATCH/needs/DEBIAN"
cat >"$SCRATCH/needs/DEBIAN/control" <<EOF
Package: krs-needs-kubelet
Version: 1.0
Architecture: all
Maintainer: kubelet-rs check <check@invalid>
Depends: kubelet (>= 1.19.0)
Description: test package that depends on kubelet as kubeadm's package did
EOF
dpkg-deb --root-owner-group --build "$SCRATCH/needs" "$ROOT/tmp/needs.deb" >/dev/null
in_root dpkg -i /tmp/needs.deb >"$SCRATCH/needs.log" 2>&1 || {
	cat "$SCRATCH/needs.log" >&2
	die "a package depending on kubelet (>= 1.19.0) does not install"
}
in_root dpkg -P krs-needs-kubelet >/dev/null 2>&1 || die "purging the test package failed"
ok "krs-needs-kubelet (Depends: kubelet (>= 1.19.0)) installed and purged ($(took))"

step "systemd-analyze verify (the root's systemd $(in_root --offline dpkg-query -W -f='${Version}' systemd))"
# verify_unit LABEL: the root's systemd-analyze must accept kubelet.service without a word.
verify_unit() {
	local out rc=0
	out="$(in_root --offline systemd-analyze verify kubelet.service 2>&1)" || rc=$?
	if ((rc != 0)) || [[ -n "$out" ]]; then
		die "systemd-analyze verify ($1): rc $rc: $out"
	fi
	ok "systemd-analyze verify kubelet.service: $1: clean"
}
verify_unit "the unit alone"
# kubeadm's drop-in as its Debian package installs it (e2e/kubeadm/kubelet-service.sh).
kubeadm_dropin() {
	cat <<'EOF'
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
EOF
}
for dir in /etc/systemd/system/kubelet.service.d /lib/systemd/system/kubelet.service.d; do
	mkdir "$ROOT$dir"
	kubeadm_dropin >"$ROOT$dir/10-kubeadm.conf"
	verify_unit "with kubeadm's $dir/10-kubeadm.conf"
	# The control: the same drop-in naming a binary that does not exist must be refused.
	sed -i 's|^ExecStart=/usr/bin/kubelet |ExecStart=/usr/bin/kubelet-missing |' "$ROOT$dir/10-kubeadm.conf"
	if out="$(in_root --offline systemd-analyze verify kubelet.service 2>&1)"; then
		die "systemd-analyze verify accepted a drop-in in $dir with a missing ExecStart binary: drop-ins not read?"
	fi
	[[ "$out" == *kubelet-missing* ]] || die "verify failed, but not on the broken drop-in: $out"
	ok "control: a broken drop-in in $dir is refused (\"${out%%$'\n'*}\")"
	rm -r "${ROOT:?}$dir"
done
log "($(took))"

step "dpkg -r leaves only the conffile"
in_root dpkg -r "$PACKAGE" >"$SCRATCH/remove.log" 2>&1 || {
	cat "$SCRATCH/remove.log" >&2
	die "dpkg -r failed"
}
status="$(in_root dpkg-query -W -f='${Status}' "$PACKAGE")"
[[ "$status" == "deinstall ok config-files" ]] || die "status after dpkg -r: $status"
listing "$SCRATCH/removed"
diff_removed="$(diff "$SCRATCH/before" "$SCRATCH/removed" || true)"
expected_diff="$(printf '> ./etc/default/kubelet\tf\t644\t0:0\t\t%s' "$(sha256sum <"$SCRATCH/x/etc/default/kubelet" | cut -c1-64)")"
if [[ "$(grep '^[<>]' <<<"$diff_removed")" != "$expected_diff" ]]; then
	printf '%s\n' "$diff_removed" >&2
	die "after dpkg -r the root differs from before install by more (or less) than /etc/default/kubelet"
fi
ok "after dpkg -r: status '$status'; the only difference from before install: + /etc/default/kubelet (unchanged) ($(took))"

step "dpkg -P leaves nothing"
in_root dpkg -P "$PACKAGE" >"$SCRATCH/purge.log" 2>&1 || {
	cat "$SCRATCH/purge.log" >&2
	die "dpkg -P failed"
}
status="$(in_root dpkg-query -W -f='${Status}' "$PACKAGE" 2>&1 || true)"
[[ "$status" == *"no packages found matching $PACKAGE"* ]] || die "dpkg still knows the package after purge: $status"
leftover="$(find "$ROOT/var/lib/dpkg/info" -name "$PACKAGE.*")"
[[ -z "$leftover" ]] || die "dpkg info files left: $leftover"
listing "$SCRATCH/purged"
if ! diff "$SCRATCH/before" "$SCRATCH/purged" >&2; then
	die "after dpkg -P the root differs from before install"
fi
ok "after dpkg -P: $(wc -l <"$SCRATCH/purged") entries, identical to before install ($(took))"

# ---------------------------------------------------------------------------------------------
step "upgrades keep an edited conffile and the admin's enable/disable choice"
# rebuild_as VERSION OUT: the package under another version (an upgrade of itself).
rebuild_as() {
	rm -rf "$SCRATCH/re"
	dpkg-deb -R "$DEB" "$SCRATCH/re"
	sed -i "s/^Version: .*/Version: $1/" "$SCRATCH/re/DEBIAN/control"
	dpkg-deb --root-owner-group -Zgzip --build "$SCRATCH/re" "$2" >/dev/null
}
rebuild_as "$VERSION+check1" "$ROOT/tmp/up1.deb"
rebuild_as "$VERSION+check2" "$ROOT/tmp/up2.deb"
in_root dpkg -i "/tmp/$PACKAGE.deb" >"$SCRATCH/up.log" 2>&1 || die "dpkg -i failed: $(cat "$SCRATCH/up.log")"
printf 'KUBELET_EXTRA_ARGS=--v=4\n' >"$ROOT/etc/default/kubelet"
in_root dpkg -i /tmp/up1.deb >>"$SCRATCH/up.log" 2>&1 || die "upgrade to $VERSION+check1 failed: $(cat "$SCRATCH/up.log")"
[[ "$(cat "$ROOT/etc/default/kubelet")" == "KUBELET_EXTRA_ARGS=--v=4" ]] || die "the upgrade replaced the edited /etc/default/kubelet"
enabled="$(in_root systemctl --root=/ is-enabled kubelet.service 2>&1 || true)"
[[ "$enabled" == enabled ]] || die "after an upgrade kubelet.service is '$enabled', not enabled"
in_root systemctl --root=/ disable kubelet.service >/dev/null 2>&1 || die "systemctl disable failed"
in_root dpkg -i /tmp/up2.deb >>"$SCRATCH/up.log" 2>&1 || die "upgrade to $VERSION+check2 failed: $(cat "$SCRATCH/up.log")"
enabled="$(in_root systemctl --root=/ is-enabled kubelet.service 2>&1 || true)"
[[ "$enabled" == disabled ]] || die "an upgrade turned the admin's disabled kubelet.service into '$enabled'"
in_root dpkg -P "$PACKAGE" >/dev/null 2>&1 || die "purge after the upgrades failed"
listing "$SCRATCH/after-upgrades"
diff "$SCRATCH/before" "$SCRATCH/after-upgrades" >&2 || die "install, upgrades, purge: the root differs from before"
ok "edited /etc/default/kubelet kept, enabled stays enabled, disabled stays disabled; purge leaves nothing ($(took))"

step "switch from a package named kubelet (a stand-in laid out as upstream's)"
# A stand-in for upstream's kubelet package: its files, its conffile and debhelper-style
# maintainer scripts (enable on configure; mask on remove; purge and unmask on purge).
mkdir -p "$SCRATCH/up/DEBIAN" "$SCRATCH/up/usr/bin" "$SCRATCH/up/lib/systemd/system" "$SCRATCH/up/etc/default"
printf '#!/bin/sh\necho "Kubernetes v1.33.0"\n' >"$SCRATCH/up/usr/bin/kubelet"
chmod 755 "$SCRATCH/up/usr/bin/kubelet"
cp "$SCRATCH/x/lib/systemd/system/kubelet.service" "$SCRATCH/up/lib/systemd/system/"
printf 'KUBELET_EXTRA_ARGS=\n' >"$SCRATCH/up/etc/default/kubelet"
printf '/etc/default/kubelet\n' >"$SCRATCH/up/DEBIAN/conffiles"
cat >"$SCRATCH/up/DEBIAN/control" <<EOF
Package: kubelet
Version: 1.33.0-1.1
Architecture: $ARCH
Maintainer: kubelet-rs check <check@invalid>
Depends: iptables (>= 1.4.21), mount
Description: stand-in for upstream's kubelet package (kubelet-rs check)
EOF
cat >"$SCRATCH/up/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	deb-systemd-helper unmask kubelet.service >/dev/null || true
	if deb-systemd-helper --quiet was-enabled kubelet.service; then
		deb-systemd-helper enable kubelet.service >/dev/null || true
	fi
fi
EOF
cat >"$SCRATCH/up/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ]; then
	deb-systemd-helper mask kubelet.service >/dev/null || true
fi
if [ "$1" = purge ]; then
	deb-systemd-helper purge kubelet.service >/dev/null || true
	deb-systemd-helper unmask kubelet.service >/dev/null || true
fi
EOF
chmod 755 "$SCRATCH/up/DEBIAN/postinst" "$SCRATCH/up/DEBIAN/postrm"
dpkg-deb --root-owner-group -Zgzip --build "$SCRATCH/up" "$ROOT/tmp/upstream-kubelet.deb" >/dev/null
in_root dpkg -i /tmp/upstream-kubelet.deb >"$SCRATCH/switch.log" 2>&1 || die "the stand-in does not install: $(cat "$SCRATCH/switch.log")"
in_root apt-get -q install -y --no-install-recommends "/tmp/$PACKAGE.deb" >>"$SCRATCH/switch.log" 2>&1 || {
	cat "$SCRATCH/switch.log" >&2
	die "apt-get install of $PACKAGE over the kubelet package failed"
}
grep -qE '^0 upgraded, 1 newly installed, 1 to remove' "$SCRATCH/switch.log" || {
	cat "$SCRATCH/switch.log" >&2
	die "apt did not replace the kubelet package with $PACKAGE"
}
old_status="$(in_root dpkg-query -W -f='${Status}' kubelet)"
[[ "$old_status" == "deinstall ok config-files" ]] || die "the kubelet package is '$old_status' after the switch"
[[ "$(in_root --offline /usr/bin/kubelet --version)" == "$version_line" ]] || die "/usr/bin/kubelet is not ours after the switch"
enabled="$(in_root systemctl --root=/ is-enabled kubelet.service 2>&1 || true)"
[[ "$enabled" == enabled ]] || die "after the switch kubelet.service is '$enabled' (the old package's mask not lifted?)"
in_root dpkg -P kubelet >>"$SCRATCH/switch.log" 2>&1 || die "purging the old kubelet package failed"
[[ "$(cat "$ROOT/etc/default/kubelet" 2>/dev/null)" == "KUBELET_EXTRA_ARGS=" ]] ||
	die "purging the old kubelet package took /etc/default/kubelet from $PACKAGE"
owner="$(in_root dpkg -S /etc/default/kubelet 2>&1 || true)"
[[ "$owner" == "$PACKAGE: /etc/default/kubelet" ]] || die "/etc/default/kubelet belongs to '$owner'"
enabled="$(in_root systemctl --root=/ is-enabled kubelet.service 2>&1 || true)"
ok "apt replaced 'kubelet' (left '$old_status'); ours runs; kubelet.service enabled (mask lifted); after purging the old package /etc/default/kubelet is still $PACKAGE's and kubelet.service is '$enabled' ($(took))"

# ---------------------------------------------------------------------------------------------
step "booted root: systemd starts the kubelet (systemd-nspawn, no network)"
in_root dpkg -P "$PACKAGE" >/dev/null 2>&1 || die "purging before the boot failed"
listing "$SCRATCH/before-boot"
diff "$SCRATCH/before" "$SCRATCH/before-boot" >&2 || die "after the switch and a purge the root differs from before"
rm -rf "$ROOT/run/systemd"
cp "$DEB" "$ROOT/var/tmp/$PACKAGE.deb"
# The container: systemd as its init, its own network namespace with loopback only, not
# registered with machined nor given a scope (no systemd runs this machine).
systemd-nspawn -D "$ROOT" --boot --private-network --register=no --keep-unit --quiet \
	-M "krs-deb-check-$$" >"$SCRATCH/nspawn.log" 2>&1 &
NSPAWN_PID=$!
stop_container() {
	[[ -n "${NSPAWN_PID:-}" ]] || return 0
	kill -TERM "$NSPAWN_PID" 2>/dev/null || true
	local i
	for ((i = 0; i < 300; i++)); do
		kill -0 "$NSPAWN_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$NSPAWN_PID" 2>/dev/null; then
		log "systemd-nspawn ($NSPAWN_PID) ignored SIGTERM for 30s: SIGKILL"
		kill -KILL "$NSPAWN_PID" 2>/dev/null || true
	fi
	wait "$NSPAWN_PID" 2>/dev/null || true
	NSPAWN_PID=""
}
trap 'stop_container; cleanup' EXIT
INIT_PID=""
for ((i = 0; i < 600; i++)); do
	kill -0 "$NSPAWN_PID" 2>/dev/null || die "systemd-nspawn ended: $(tail -n5 "$SCRATCH/nspawn.log")"
	INIT_PID="$(pgrep -P "$NSPAWN_PID" -x systemd || true)"
	[[ -n "$INIT_PID" ]] && break
	sleep 0.1
done
[[ -n "$INIT_PID" ]] || die "no systemd in the container after 60s"
# in_box CMD...: CMD in the container's namespaces and root.
in_box() { nsenter -t "$INIT_PID" -m -u -i -n -p -r -w env -i PATH="$CHROOT_PATH" LC_ALL=C.UTF-8 "$@"; }
state=""
for ((i = 0; i < 120; i++)); do
	state="$(in_box systemctl is-system-running 2>/dev/null || true)"
	[[ "$state" == running || "$state" == degraded ]] && break
	sleep 0.5
done
[[ "$state" == running || "$state" == degraded ]] || die "the container's systemd is '$state' after 60s"
ok "systemd $(in_box systemctl --version | head -n1 | awk '{print $2}') booted in the container: $state ($(took))"

# show PROPERTY: kubelet.service's property in the container.
show() { in_box systemctl show kubelet.service -p "$1" --value; }
in_box dpkg -i "/var/tmp/$PACKAGE.deb" >"$SCRATCH/box-install.log" 2>&1 || {
	cat "$SCRATCH/box-install.log" >&2
	die "dpkg -i in the booted container failed"
}
! grep -q "in a chroot" "$SCRATCH/box-install.log" || die "the postinst took the booted container for a chroot"
for ((i = 0; i < 50; i++)); do
	[[ "$(show ExecMainStartTimestampMonotonic)" != 0 ]] && break
	sleep 0.1
done
[[ "$(show ExecMainStartTimestampMonotonic)" != 0 ]] || die "the postinst did not start kubelet.service"
[[ "$(show UnitFileState)" == enabled ]] || die "kubelet.service is '$(show UnitFileState)' after install"
ok "dpkg -i: the postinst enabled and started kubelet.service (now $(show ActiveState)/$(show SubState): without a container runtime the kubelet exits, as upstream's does without kubeadm's files)"

# kubeadm's drop-in, and /etc/default/kubelet read through it: KUBELET_EXTRA_ARGS=--version makes
# the kubelet print its version and exit 0, which Restart=always (not on-failure) restarts.
mkdir -p "$ROOT/etc/systemd/system/kubelet.service.d"
kubeadm_dropin >"$ROOT/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
printf 'KUBELET_EXTRA_ARGS=--version\n' >"$ROOT/etc/default/kubelet"
in_box systemctl daemon-reload
in_box systemctl restart kubelet.service
t_restart="$(date +%s%N)"
restarts0="$(show NRestarts)"
for ((i = 0; i < 200; i++)); do
	[[ "$(show NRestarts)" -gt "$restarts0" ]] && break
	sleep 0.1
done
restarts="$(show NRestarts)"
gap_ms="$((($(date +%s%N) - t_restart) / 1000000))"
((restarts > restarts0)) || die "kubelet.service was not restarted within 20s after exiting 0 (Restart=always, RestartSec=10)"
((gap_ms >= 9500)) || die "kubelet.service was restarted after ${gap_ms}ms, before RestartSec=10"
[[ "$(show ExecMainStatus)" == 0 ]] || die "the kubelet's last exit status is $(show ExecMainStatus), not 0"
journal="$(in_box journalctl -u kubelet.service -o cat --no-pager)"
[[ "$journal" == *"$version_line"* ]] || die "the kubelet did not print its version through the drop-in: $journal"
argv="$(show ExecStart)"
[[ "$argv" == *"argv[]=/usr/bin/kubelet \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS"* ]] ||
	die "kubelet.service's ExecStart is not the drop-in's: $argv"
ok "with kubeadm's drop-in: ExecStart is the drop-in's, KUBELET_EXTRA_ARGS from /etc/default/kubelet reached the kubelet (it printed \"$version_line\", exit 0), and systemd restarted it (NRestarts $restarts0 -> $restarts) ${gap_ms}ms after the start ($(took))"
rm -r "$ROOT/etc/systemd/system/kubelet.service.d"
printf 'KUBELET_EXTRA_ARGS=\n' >"$ROOT/etc/default/kubelet"

# stops COUNT: how many times systemd has logged stopping kubelet.service.
stops() { in_box journalctl -u kubelet.service -o cat --no-pager | grep -c '^Stopped kubelet.service' || true; }
stops0="$(stops)"
in_box dpkg -r "$PACKAGE" >"$SCRATCH/box-remove.log" 2>&1 || {
	cat "$SCRATCH/box-remove.log" >&2
	die "dpkg -r in the booted container failed"
}
stops1="$(stops)"
((stops1 > stops0)) || die "dpkg -r did not stop kubelet.service (systemd logged no stop)"
[[ "$(show LoadState)" == not-found ]] || die "after dpkg -r kubelet.service is '$(show LoadState)', not not-found (no daemon-reload?)"
[[ "$(show ActiveState)" == inactive ]] || die "after dpkg -r kubelet.service is '$(show ActiveState)'"
box_root="$(stat -L -c %d:%i "/proc/$INIT_PID/root")"
for comm in /proc/[0-9]*/comm; do
	pid_dir="${comm%/comm}"
	[[ "$(cat "$comm" 2>/dev/null)" == kubelet ]] || continue
	if [[ "$(stat -L -c %d:%i "$pid_dir/root" 2>/dev/null)" == "$box_root" ]]; then
		die "a kubelet still runs in the container after dpkg -r: ${pid_dir#/proc/}"
	fi
done
in_box dpkg -P "$PACKAGE" >/dev/null 2>&1 || die "dpkg -P in the booted container failed"
ok "dpkg -r in the booted container: the prerm stopped kubelet.service (stops logged: $stops0 -> $stops1), no kubelet runs, systemd no longer knows kubelet.service; purged"
stop_container
ok "container stopped ($(took))"

log "all checks passed in $((SECONDS - T0))s"
