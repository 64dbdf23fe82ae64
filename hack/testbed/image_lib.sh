# shellcheck shell=bash
# Helpers to build test images as OCI tarballs (oci_image.py, no docker, no registry) and import
# them into a test-bed containerd. Sourced after lib.sh and krs_instance_vars, never run.
# Used by hack/testbed/images.sh (pause, busybox), e2e/images.sh (the e2e suite's images) and
# e2e/kubeadm/images.sh (kubeadm's control-plane images).
#
# Two settings move the building and the importing apart, for a machine that cannot build (a VM
# of e2e/vm, with no cargo and none of the packages the images copy from the machine):
#   KRS_IMAGE_LIST_OUT=FILE   import_image imports nothing and appends "TAR NAME..." to FILE
#   KRS_PREBUILT_IMAGES=FILE  the scripts build nothing and import every tarball FILE lists

KRS_IMAGE_NAMESPACE="k8s.io"
KRS_IMAGE_CACHE="$KRS_CACHE_DIR/images"
KRS_IMAGE_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# KRS_CTR_TIMEOUT: seconds a ctr call may take (default 120; an import in a VM under software
# emulation takes longer).
ctr_() { timeout "${KRS_CTR_TIMEOUT:-120}" ctr --address "$KRS_I_SOCK" -n "$KRS_IMAGE_NAMESPACE" "$@"; }

sha256_of() { sha256sum "$@" | cut -d' ' -f1; }

# shared_objects FILE: the absolute paths of the shared objects FILE loads, the loader included
# (nothing for a static binary).
shared_objects() {
	ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' ||
		true
}

# closure FILE...: the FILEs and every shared object they load, one a line.
closure() {
	local f
	for f in "$@"; do
		printf '%s\n' "$f"
		shared_objects "$f"
	done | sort -u
}

# copy_host_binary STAGE SRC DEST: this machine's SRC as DEST in the image, and every shared object
# it loads at the path the loader looks for it (the image has no ld.so.cache: the loader then
# searches its default folders, which hold these paths).
copy_host_binary() {
	local stage="$1" src="$2" dest="$3" lib real
	install -D -m 0755 "$(readlink -f "$src")" "$stage$dest"
	while read -r lib; do
		[[ -e "$stage$lib" ]] && continue
		real="$(readlink -f "$lib")"
		install -D -m "$(stat -c %a "$real")" "$real" "$stage$lib"
	done < <(shared_objects "$src")
}

# krs_image_recipe FILE...: a hash of the files that say how images are made (this library,
# oci_image.py and the caller's FILEs); any change to them invalidates every cached tarball.
krs_image_recipe() {
	cat "$KRS_IMAGE_LIB_DIR/oci_image.py" "$KRS_IMAGE_LIB_DIR/image_lib.sh" "$@" |
		sha256sum | cut -d' ' -f1
}

# stage_busybox STAGE: a root folder with busybox, a link per applet in /bin, root and nobody.
stage_busybox() {
	local stage="$1" applet
	mkdir -p "$stage"/{bin,dev,etc,home,proc,root,sys,tmp,usr,var}
	chmod 0755 "$stage"/{bin,dev,etc,home,proc,sys,usr,var}
	chmod 0700 "$stage/root"
	chmod 1777 "$stage/tmp"
	install -m 0755 /bin/busybox "$stage/bin/busybox"
	while read -r applet; do
		[[ -n "$applet" && "$applet" != busybox && ! -e "$stage/bin/$applet" ]] || continue
		ln -s busybox "$stage/bin/$applet"
	done < <(/bin/busybox --list)
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/home:/bin/false' \
		>"$stage/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$stage/etc/group"
	chmod 0644 "$stage/etc/passwd" "$stage/etc/group"
}

# build_cached NAME KEY STAGE_FN STAGE_ARG OCI_ARGS...: prints the cached tarball's path,
# building it first when no tarball exists for KEY. STAGE_FN STAGE STAGE_ARG fills the root.
build_cached() {
	local name="$1" key="$2" stage_fn="$3" stage_arg="$4"
	shift 4
	local tar="$KRS_IMAGE_CACHE/$name-${key:0:16}.tar"
	if [[ -s "$tar" && -s "$tar.digest" ]]; then
		printf '%s\n' "$tar"
		return 0
	fi
	krs_log "building image $name"
	mkdir -p "$KRS_IMAGE_CACHE"
	local stage
	stage="$(mktemp -d)"
	# shellcheck disable=SC2064 # expand now: the trap must remove this very folder
	trap "rm -rf '$stage'; trap - RETURN" RETURN
	"$stage_fn" "$stage" "$stage_arg"
	python3 "$KRS_IMAGE_LIB_DIR/oci_image.py" --root "$stage" --out "$tar" \
		--arch "$(krs_host_arch)" "$@" >"$tar.digest.tmp"
	mv "$tar.digest.tmp" "$tar.digest"
	# Older builds of this image are dead weight now (the key is 16 characters: an image whose
	# name merely starts with NAME- is not one of them).
	find "$KRS_IMAGE_CACHE" -maxdepth 1 -name "$name-????????????????.tar*" \
		! -name "$(basename "$tar")*" -delete
	printf '%s\n' "$tar"
}

# Succeeds when every NAME exists in containerd and points at DIGEST.
all_present() {
	local digest="$1" listing name
	shift
	listing="$(ctr_ images ls 2>/dev/null | awk 'NR > 1 { print $1, $3 }')"
	for name in "$@"; do
		grep -qxF "$name $digest" <<<"$listing" || return 1
	done
}

# import_image TAR NAMES...: imports unless already there, then checks every name.
import_image() {
	local tar="$1" digest
	shift
	if [[ -n "${KRS_IMAGE_LIST_OUT:-}" ]]; then
		printf '%s\n' "$tar $*" >>"$KRS_IMAGE_LIST_OUT"
		return 0
	fi
	digest="$(<"$tar.digest")"
	if all_present "$digest" "$@"; then
		krs_log "present: $* ($digest)"
		return 0
	fi
	krs_log "importing $(basename "$tar")"
	ctr_ images import --all-platforms "$tar" >/dev/null
	all_present "$digest" "$@" || krs_die "after import, not every name of $tar points at $digest"
	krs_log "imported: $* ($digest)"
}

name_args() {
	local name
	for name in "$@"; do printf -- '--name\n%s\n' "$name"; done
}

# imported_prebuilt_into INSTANCE: import_image fills the running containerd INSTANCE from now
# on. Where the images come prebuilt (KRS_PREBUILT_IMAGES), they are all imported now and it
# succeeds: the caller builds nothing. Otherwise it fails, and the caller builds.
imported_prebuilt_into() {
	krs_instance_vars "$1"
	krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG" >/dev/null ||
		krs_die "containerd $KRS_I_NAME is not running: hack/testbed/containerd.sh start $KRS_I_NAME"
	[[ -n "${KRS_PREBUILT_IMAGES:-}" ]] || return 1
	import_prebuilt "$KRS_PREBUILT_IMAGES"
}

# import_prebuilt FILE: every "TAR NAME..." line of FILE imported (KRS_PREBUILT_IMAGES).
import_prebuilt() {
	local file="$1" line
	[[ -r "$file" ]] || krs_die "no image list at $file (KRS_PREBUILT_IMAGES)"
	while read -r line; do
		[[ -n "$line" ]] || continue
		# shellcheck disable=SC2086 # a line is TAR NAME..., none with blanks
		import_image $line
	done <"$file"
}
