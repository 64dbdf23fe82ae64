#!/usr/bin/env bash
# Usage: e2e/images.sh INSTANCE
#        e2e/images.sh --list
#        e2e/images.sh --tarballs FILE
#
# Builds, as OCI tarballs (hack/testbed/oci_image.py: no docker, no registry), every image the
# upstream v1.20.2 e2e suite's [Conformance] and [NodeConformance] specs run, under the names
# its test/utils/image/manifest.go gives them with the default registries, and imports them into
# the running test-bed containerd INSTANCE (hack/testbed/containerd.sh start INSTANCE),
# namespace k8s.io. e2e/images.md says how each image is made and which ones are stand-ins.
#
#   INSTANCE  the containerd instance to import into (required: no default, so that the shared
#             "krs" instance is only ever chosen on purpose)
#   --list    print "NAME<TAB>IMAGE" for every image name this script provides, and exit
#   --tarballs FILE
#             build every tarball (pause and busybox too), import none, and write FILE: one
#             line per tarball, "TAR NAME..."; with KRS_PREBUILT_IMAGES=FILE, `e2e/images.sh
#             INSTANCE` then builds nothing and imports those (a VM of e2e/vm/run.sh conformance:
#             no cargo there, and not the packages the images copy)
#
# pause and busybox come from hack/testbed/images.sh (run first, same INSTANCE). The Go binaries
# (agnhost, nonewprivs, sample-apiserver, sample-device-plugin) come from hack/upstream/build.sh,
# built static. The tools the suite runs inside agnhost and jessie-dnsutils (curl, OpenBSD nc,
# dig, iproute2, bash, dash) and etcd are this machine's Debian binaries, copied with the shared
# objects they load; missing packages are installed.
# Tarballs are cached in /var/cache/kubelet-rs/images/ (names starting with e2e-), keyed by
# their inputs; an image whose names all point at the expected digest is not imported again.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTBED="$HERE/../hack/testbed"
# shellcheck source=hack/testbed/lib.sh
source "$TESTBED/lib.sh"
# shellcheck source=hack/testbed/image_lib.sh
source "$TESTBED/image_lib.sh"

# shellcheck source=hack/upstream/lib.sh
source "$HERE/../hack/upstream/lib.sh"
UPSTREAM_CACHE="$KRS_UPSTREAM_CACHE"
UPSTREAM_BIN="$KRS_UPSTREAM_BIN_DIR"

# Debian packages whose binaries are copied into images, as package:command.
HOST_TOOLS=(
	curl:curl
	bash:bash
	netcat-openbsd:nc.openbsd
	bind9-dnsutils:dig
	libc-bin:getent
	dash:dash
	iproute2:ss
	etcd-server:etcd
)

# The image names (manifest.go of v1.20.2, default registries), per image, in build order.
IMAGES=(agnhost nautilus kitten nonroot nonewprivs sample-apiserver sample-device-plugin etcd
	jessie-dnsutils nginx httpd redis)
declare -A NAMES=(
	[agnhost]="k8s.gcr.io/e2e-test-images/agnhost:2.21"
	[nautilus]="gcr.io/kubernetes-e2e-test-images/nautilus:1.0"
	[kitten]="gcr.io/kubernetes-e2e-test-images/kitten:1.0"
	[nonroot]="gcr.io/kubernetes-e2e-test-images/nonroot:1.0"
	[nonewprivs]="gcr.io/kubernetes-e2e-test-images/nonewprivs:1.0"
	[sample-apiserver]="gcr.io/kubernetes-e2e-test-images/sample-apiserver:1.17"
	# Not in manifest.go: the node e2e suite's device plugin specs name it in
	# test/e2e/testing-manifests/sample-device-plugin.yaml.
	[sample-device-plugin]="gcr.io/kubernetes-e2e-test-images/sample-device-plugin:1.0"
	[etcd]="k8s.gcr.io/etcd:3.4.13-0"
	[jessie-dnsutils]="gcr.io/kubernetes-e2e-test-images/jessie-dnsutils:1.0"
	# Stand-ins: busybox servers on the ports the real images listen on.
	[nginx]="docker.io/library/nginx:1.14-alpine docker.io/library/nginx:1.15-alpine"
	[httpd]="docker.io/library/httpd:2.4.38-alpine docker.io/library/httpd:2.4.39-alpine"
	[redis]="docker.io/library/redis:5.0.5-alpine"
)
# Made by hack/testbed/images.sh, listed here for --list.
TESTBED_NAMES=(pause:k8s.gcr.io/pause:3.2 busybox:docker.io/library/busybox:1.29)

usage() { sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2; }

list_names() {
	local image name entry
	for image in "${IMAGES[@]}"; do
		for name in ${NAMES[$image]}; do printf '%s\t%s\n' "$name" "$image"; done
	done
	for entry in "${TESTBED_NAMES[@]}"; do printf '%s\t%s\n' "${entry#*:}" "${entry%%:*}"; done
}

# --- inputs ------------------------------------------------------------------------------------

ensure_host_tools() {
	local missing=() entry
	for entry in "${HOST_TOOLS[@]}"; do
		command -v "${entry#*:}" >/dev/null || missing+=("${entry%%:*}")
	done
	[[ ${#missing[@]} -gt 0 ]] || return 0
	krs_log "installing ${missing[*]} (tools copied into the images)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	for entry in "${HOST_TOOLS[@]}"; do
		command -v "${entry#*:}" >/dev/null || krs_die "${entry#*:} missing after installing ${entry%%:*}"
	done
}

ensure_upstream_binaries() {
	local t targets=()
	# agnhost, nonewprivs, sample-apiserver, sample-device-plugin (hack/upstream/targets:
	# e2e-images), built without cgo.
	krs_upstream_ensure e2e-images
	mapfile -t targets < <(krs_upstream_targets e2e-images)
	for t in "${targets[@]}"; do
		t="$(krs_upstream_bin "$(basename "$t")")"
		# Without this the busybox-based images fail with "exec ...: no such file or directory".
		if ldd "$t" >/dev/null 2>&1; then
			krs_die "$t is dynamically linked; delete it and rebuild (build.sh builds it static)"
		fi
	done
}

# The unpacked upstream tree (hack/upstream/build.sh fetched it), for the images' data files.
upstream_tree() {
	local tree
	tree="$(find "$UPSTREAM_CACHE/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' \
		2>/dev/null | head -n1)"
	[[ -n "$tree" ]] || krs_die "no upstream tree under $UPSTREAM_CACHE/src: run hack/upstream/build.sh"
	printf '%s\n' "$tree"
}

# image_key NAME FILE...: the cache key of image NAME built from FILEs by this recipe.
image_key() {
	local name="$1" f
	shift
	{
		printf '%s %s\n' "$RECIPE" "$name"
		for f in "$@"; do printf '%s %s\n' "$f" "$(sha256_of "$f")"; done
	} | sha256sum | cut -d' ' -f1
}

# --- staging helpers -----------------------------------------------------------------------------

# glibc tools resolve names through NSS: files first (/etc/hosts), then DNS, as Debian does.
stage_nsswitch() {
	printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' 'networks: files' \
		'protocols: files' 'services: files' >"$1/etc/nsswitch.conf"
	chmod 0644 "$1/etc/nsswitch.conf"
}

# write_script PATH: an executable from stdin.
write_script() {
	mkdir -p "$(dirname "$1")"
	cat >"$1"
	chmod 0755 "$1"
}

# --- the images --------------------------------------------------------------------------------

# agnhost: upstream's image is alpine plus curl, OpenBSD nc, dig, iproute2 and bash, the porter
# certificates and /uploads in /, /agnhost, the /agnhost-2 link (entrypoint tests), entrypoint
# /agnhost with the argument pause. Here busybox plus the same tools from Debian, and /bin/sh is
# bash: Debian's busybox sh runs its own applets before anything on PATH, so `sh -c "nc -zv ..."`
# (the service specs) would get busybox nc, which has no -z; alpine's sh finds /usr/bin/nc.
stage_agnhost() {
	local stage="$1"
	stage_busybox "$stage"
	stage_nsswitch "$stage"
	copy_host_binary "$stage" "$(command -v curl)" /usr/bin/curl
	copy_host_binary "$stage" "$(command -v nc.openbsd)" /usr/bin/nc
	copy_host_binary "$stage" "$(command -v dig)" /usr/bin/dig
	copy_host_binary "$stage" "$(command -v host)" /usr/bin/host
	copy_host_binary "$stage" "$(command -v nslookup)" /usr/bin/nslookup
	copy_host_binary "$stage" "$(command -v getent)" /usr/bin/getent
	copy_host_binary "$stage" "$(command -v ss)" /usr/sbin/ss
	copy_host_binary "$stage" "$(command -v ip)" /usr/sbin/ip
	copy_host_binary "$stage" "$(command -v bash)" /bin/bash
	ln -sfn bash "$stage/bin/sh"
	mkdir -m 0755 "$stage/uploads"
	install -m 0644 "$TREE/test/images/agnhost/porter/localhost.crt" "$stage/localhost.crt"
	install -m 0600 "$TREE/test/images/agnhost/porter/localhost.key" "$stage/localhost.key"
	install -m 0755 "$UPSTREAM_BIN/agnhost" "$stage/agnhost"
	ln -s agnhost "$stage/agnhost-2"
}

agnhost_inputs() {
	closure /bin/busybox "$UPSTREAM_BIN/agnhost" "$(command -v curl)" "$(command -v nc.openbsd)" \
		"$(command -v dig)" "$(command -v host)" "$(command -v nslookup)" "$(command -v getent)" \
		"$(command -v ss)" "$(command -v ip)" "$(command -v bash)"
	printf '%s\n' "$TREE/test/images/agnhost/porter/localhost.crt" \
		"$TREE/test/images/agnhost/porter/localhost.key"
}

# nautilus, kitten: the agnhost image plus a picture and data.json in /, served by
# `agnhost test-webserver` (the image's argument) on port 80.
stage_nautilus() {
	stage_agnhost "$1"
	install -m 0644 "$TREE/test/images/nautilus/html/nautilus.jpg" "$1/nautilus.jpg"
	install -m 0644 "$TREE/test/images/nautilus/html/data.json" "$1/data.json"
}
stage_kitten() {
	stage_agnhost "$1"
	install -m 0644 "$TREE/test/images/kitten/html/kitten.jpg" "$1/kitten.jpg"
	install -m 0644 "$TREE/test/images/kitten/html/data.json" "$1/data.json"
}

# nonroot: a base image whose user is 1234 (the user is set by oci_image.py --user).
stage_nonroot() {
	stage_busybox "$1"
}

# nonewprivs: nnp (prints its effective uid) setuid root in /usr/local/bin.
stage_nonewprivs() {
	stage_busybox "$1"
	install -D -m 4755 "$UPSTREAM_BIN/nonewprivs" "$1/usr/local/bin/nnp"
}

# sample-apiserver: the tree's k8s.io/sample-apiserver as /sample-apiserver, its entrypoint.
stage_sample_apiserver() {
	stage_busybox "$1"
	install -m 0755 "$UPSTREAM_BIN/sample-apiserver" "$1/sample-apiserver"
}

# sample-device-plugin: the tree's test/images/sample-device-plugin as /sampledeviceplugin, the
# name its Dockerfile gives it. It serves two devices of example.com/resource on a socket in
# $PLUGIN_SOCK_DIR and registers with the kubelet.
stage_sample_device_plugin() {
	stage_busybox "$1"
	install -m 0755 "$UPSTREAM_BIN/sample-device-plugin" "$1/sampledeviceplugin"
}

# etcd: the aggregator spec runs /usr/local/bin/etcd (Debian's etcd-server, 3.4).
stage_etcd() {
	stage_busybox "$1"
	copy_host_binary "$1" "$(command -v etcd)" /usr/local/bin/etcd
}

# jessie-dnsutils: the DNS specs' second querier runs dig, getent and `hostname -i` in sh, which
# is dash as on Debian (busybox sh would run its own applets before PATH's tools).
stage_jessie_dnsutils() {
	local stage="$1"
	stage_busybox "$stage"
	stage_nsswitch "$stage"
	copy_host_binary "$stage" "$(command -v dig)" /usr/bin/dig
	copy_host_binary "$stage" "$(command -v host)" /usr/bin/host
	copy_host_binary "$stage" "$(command -v nslookup)" /usr/bin/nslookup
	copy_host_binary "$stage" "$(command -v getent)" /usr/bin/getent
	copy_host_binary "$stage" "$(command -v bash)" /bin/bash
	copy_host_binary "$stage" "$(command -v dash)" /bin/dash
	ln -sfn dash "$stage/bin/sh"
}

# The stand-ins' servers run behind a shell that forwards SIGTERM: busybox httpd and nc, as pid 1,
# would ignore it and every pod deletion would wait out its grace period.
stage_serve_wrapper() {
	write_script "$1/usr/local/bin/krs-serve" <<'EOF'
#!/bin/sh
# kubelet-rs test image stand-in: runs COMMAND... in the background and stops it on SIGTERM,
# SIGINT, SIGQUIT or SIGWINCH (httpd's stop signal), exiting 0 as the real servers do.
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT QUIT WINCH
wait "$child"
EOF
}

# nginx stand-in: busybox httpd on port 80 serving /usr/share/nginx/html; `nginx` (the image's
# command, with any arguments) starts it.
stage_nginx() {
	local stage="$1"
	stage_busybox "$stage"
	stage_serve_wrapper "$stage"
	mkdir -p "$stage/usr/share/nginx/html"
	cat >"$stage/usr/share/nginx/html/index.html" <<'EOF'
<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>kubelet-rs test stand-in: busybox httpd serving /usr/share/nginx/html on port 80.</p>
</body>
</html>
EOF
	chmod 0644 "$stage/usr/share/nginx/html/index.html"
	write_script "$stage/usr/sbin/nginx" <<'EOF'
#!/bin/sh
# kubelet-rs stand-in for nginx: its arguments (-g 'daemon off;') are ignored.
exec /usr/local/bin/krs-serve httpd -f -p 80 -h /usr/share/nginx/html
EOF
}

# httpd stand-in: busybox httpd on port 80 serving /usr/local/apache2/htdocs ("It works!", which
# the kubectl specs look for); `httpd-foreground` (the image's command) starts it.
stage_httpd() {
	local stage="$1"
	stage_busybox "$stage"
	stage_serve_wrapper "$stage"
	mkdir -p "$stage/usr/local/apache2/htdocs"
	printf '%s\n' '<html><body><h1>It works!</h1></body></html>' \
		>"$stage/usr/local/apache2/htdocs/index.html"
	chmod 0644 "$stage/usr/local/apache2/htdocs/index.html"
	write_script "$stage/usr/local/bin/httpd-foreground" <<'EOF'
#!/bin/sh
# kubelet-rs stand-in for Apache httpd: busybox httpd serves the same document root on port 80.
exec /usr/local/bin/krs-serve httpd -f -p 80 -h /usr/local/apache2/htdocs
EOF
}

# redis stand-in: a TCP server on 6379 answering the Redis protocol minimally: +PONG to PING,
# +OK to anything else (enough for a client to connect and ping; it stores nothing).
stage_redis() {
	local stage="$1"
	stage_busybox "$stage"
	stage_serve_wrapper "$stage"
	mkdir -m 0755 "$stage/data"
	write_script "$stage/usr/local/bin/redis-reply" <<'EOF'
#!/bin/sh
# One connection of the kubelet-rs redis stand-in: reads commands (inline or RESP arrays).
while IFS= read -r line; do
	line="${line%"$(printf '\r')"}"
	case "$line" in
	\**)
		# An array of N bulk strings: the command is the first; skip length lines.
		n="${line#\*}"
		cmd=""
		i=0
		while [ "$i" -lt "$n" ] && IFS= read -r len && IFS= read -r arg; do
			arg="${arg%"$(printf '\r')"}"
			[ -n "$cmd" ] || cmd="$arg"
			i=$((i + 1))
		done
		;;
	*) cmd="${line%% *}" ;;
	esac
	[ -n "$cmd" ] || continue
	case "$cmd" in
	[Pp][Ii][Nn][Gg]) printf '+PONG\r\n' ;;
	[Qq][Uu][Ii][Tt]) printf '+OK\r\n'; exit 0 ;;
	*) printf '+OK\r\n' ;;
	esac
done
EOF
	write_script "$stage/usr/local/bin/redis-server" <<'EOF'
#!/bin/sh
# kubelet-rs stand-in for redis-server: its arguments are ignored.
exec /usr/local/bin/krs-serve nc -ll -p 6379 -e /usr/local/bin/redis-reply
EOF
}

# make_image IMAGE STAGE_FN OCI_ARGS... -- INPUT...: builds (or takes from the cache) and imports
# one image under its NAMES.
make_image() {
	local image="$1" stage_fn="$2"
	shift 2
	local oci_args=() inputs=() names=() key tar args=()
	read -r -a names <<<"${NAMES[$image]}"
	while [[ $# -gt 0 && "$1" != -- ]]; do
		oci_args+=("$1")
		shift
	done
	[[ $# -gt 0 ]] && shift
	inputs=("$@")
	key="$(image_key "$image" "${inputs[@]}")"
	mapfile -t args < <(name_args "${names[@]}")
	tar="$(build_cached "e2e-$image" "$key" "$stage_fn" "" "${oci_args[@]}" "${args[@]}")"
	import_image "$tar" "${names[@]}"
}

main() {
	case "${1:-}" in
	--list)
		list_names
		return 0
		;;
	"" | -h | --help)
		usage
		[[ -n "${1:-}" ]] && return 0
		exit 2
		;;
	esac
	if [[ "$1" == --tarballs ]]; then
		[[ $# -eq 2 ]] || {
			usage
			exit 2
		}
		krs_require_root
		# pause and busybox first: --list starts the file.
		"$TESTBED/images.sh" --list "$2"
		export KRS_IMAGE_LIST_OUT="$2"
	else
		if [[ $# -ne 1 ]]; then
			usage
			exit 2
		fi
		krs_require_root
		if imported_prebuilt_into "$1"; then
			return 0
		fi
		# pause (k8s.gcr.io/pause:3.2 among its names) and busybox (docker.io/library/busybox:1.29).
		"$TESTBED/images.sh" "$KRS_I_NAME"
	fi
	[[ -x /bin/busybox ]] || krs_die "/bin/busybox missing: run hack/testbed/install.sh"

	ensure_host_tools
	ensure_upstream_binaries
	TREE="$(upstream_tree)"
	RECIPE="$(krs_image_recipe "${BASH_SOURCE[0]}")"

	local agnhost_in=() busybox_in=() inputs=()
	mapfile -t agnhost_in < <(agnhost_inputs)
	busybox_in=(/bin/busybox)

	make_image agnhost stage_agnhost \
		--entrypoint '["/agnhost"]' --cmd '["pause"]' -- "${agnhost_in[@]}"
	make_image nautilus stage_nautilus \
		--entrypoint '["/agnhost"]' --cmd '["test-webserver"]' -- "${agnhost_in[@]}" \
		"$TREE/test/images/nautilus/html/nautilus.jpg" "$TREE/test/images/nautilus/html/data.json"
	make_image kitten stage_kitten \
		--entrypoint '["/agnhost"]' --cmd '["test-webserver"]' -- "${agnhost_in[@]}" \
		"$TREE/test/images/kitten/html/kitten.jpg" "$TREE/test/images/kitten/html/data.json"
	make_image nonroot stage_nonroot \
		--user 1234 --cmd '["/bin/sh"]' -- "${busybox_in[@]}"
	make_image nonewprivs stage_nonewprivs \
		--cmd '["nnp"]' -- "${busybox_in[@]}" "$UPSTREAM_BIN/nonewprivs"
	make_image sample-apiserver stage_sample_apiserver \
		--entrypoint '["/sample-apiserver"]' -- "${busybox_in[@]}" "$UPSTREAM_BIN/sample-apiserver"
	make_image sample-device-plugin stage_sample_device_plugin \
		--entrypoint '["/sampledeviceplugin", "-alsologtostderr"]' -- "${busybox_in[@]}" \
		"$UPSTREAM_BIN/sample-device-plugin"
	mapfile -t inputs < <(closure /bin/busybox "$(command -v etcd)")
	make_image etcd stage_etcd --cmd '["/usr/local/bin/etcd"]' -- "${inputs[@]}"
	mapfile -t inputs < <(closure /bin/busybox "$(command -v dig)" "$(command -v host)" \
		"$(command -v nslookup)" "$(command -v getent)" "$(command -v bash)" "$(command -v dash)")
	make_image jessie-dnsutils stage_jessie_dnsutils \
		--cmd '["/bin/sh"]' -- "${inputs[@]}"
	make_image nginx stage_nginx \
		--cmd '["nginx", "-g", "daemon off;"]' -- "${busybox_in[@]}"
	make_image httpd stage_httpd --workdir /usr/local/apache2 \
		--env PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--env HTTPD_PREFIX=/usr/local/apache2 --cmd '["httpd-foreground"]' -- "${busybox_in[@]}"
	make_image redis stage_redis --workdir /data \
		--cmd '["redis-server"]' -- "${busybox_in[@]}"
	if [[ -n "${KRS_IMAGE_LIST_OUT:-}" ]]; then
		krs_log "e2e images built; tarballs listed in $KRS_IMAGE_LIST_OUT"
	else
		krs_log "e2e images ready in containerd $KRS_I_NAME"
	fi
}

main "$@"
