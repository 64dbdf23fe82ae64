//! Command-line flags with Go pflag semantics, as the upstream kubelet parses them.
//!
//! clap cannot express several pflag behaviours that scripts and kubeadm drop-ins rely
//! on (boolean flags never consume the next word, `_` and `-` are interchangeable in
//! names, a value may start with `-`, per-flag deprecation notices, map flags whose
//! first use replaces the configured value), so the flag set is a table and the
//! tokenizer below follows pflag's rules directly.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Taint;

use super::KubeletFlags;
use super::config::{KubeletConfiguration, MemoryReservation, VModuleItem};
use super::duration::{GoDuration, parse_go_duration};
use super::quantity::parse_quantity;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arity {
    /// `--flag` means true; a value must be attached with `=`.
    Bool,
    /// Takes `--flag=value` or `--flag value`.
    Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// --help / --version.
    Global,
    /// Stored in [`KubeletFlags`].
    Flag,
    /// Overrides a KubeletConfiguration field; upstream marks these deprecated in
    /// favour of the config file.
    Config,
    /// Config-backed but not deprecated upstream (-v, --vmodule, ...).
    ConfigKept,
    /// No longer has an effect; accepted so old units keep starting.
    Ignored,
}

#[derive(Debug)]
pub(crate) struct FlagDef {
    pub name: &'static str,
    pub short: Option<char>,
    pub arity: Arity,
    pub type_name: &'static str,
    pub default: &'static str,
    pub usage: &'static str,
    pub scope: Scope,
    /// Deprecation notice printed when the flag is used (besides the Config default).
    pub deprecated: Option<&'static str>,
}

const CONFIG_DEPRECATION: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
const CADVISOR_DEPRECATION: &str = "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to legacy concerns, it will follow the standard CLI deprecation timeline before being removed.";
const REMOVED: &str = "it has been removed upstream and is ignored by this kubelet";

const fn def(
    name: &'static str,
    arity: Arity,
    type_name: &'static str,
    default: &'static str,
    usage: &'static str,
    scope: Scope,
) -> FlagDef {
    FlagDef {
        name,
        short: None,
        arity,
        type_name,
        default,
        usage,
        scope,
        deprecated: None,
    }
}

const fn with_short(mut d: FlagDef, c: char) -> FlagDef {
    d.short = Some(c);
    d
}

const fn deprecated(mut d: FlagDef, msg: &'static str) -> FlagDef {
    d.deprecated = Some(msg);
    d
}

use Arity::{Bool as B, Value as V};
use Scope::{Config as C, ConfigKept as K, Flag as F, Global as G, Ignored as I};

/// Every flag the kubelet accepts. Help output sorts by name.
pub(crate) static FLAGS: &[FlagDef] = &[
    // Global.
    with_short(def("help", B, "", "", "help for kubelet", G), 'h'),
    def(
        "version",
        B,
        "version[=true]",
        "",
        "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version",
        G,
    ),
    // KubeletFlags.
    def(
        "config",
        V,
        "string",
        "",
        "The Kubelet will load its initial configuration from this file. The path may be absolute or relative; relative paths start at the Kubelet's current working directory. Omit this flag to use the built-in default configuration values. Command-line flags override configuration from this file.",
        F,
    ),
    def(
        "config-dir",
        V,
        "string",
        "",
        "Path to a directory to specify drop-ins, allows the user to optionally specify additional configs to overwrite what is provided by default and in the KubeletConfigFile flag. [default='']",
        F,
    ),
    def(
        "kubeconfig",
        V,
        "string",
        "",
        "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode.",
        F,
    ),
    def(
        "bootstrap-kubeconfig",
        V,
        "string",
        "",
        "Path to a kubeconfig file that will be used to get client certificate for kubelet. If the file specified by --kubeconfig does not exist, the bootstrap kubeconfig is used to request a client certificate from the API server.",
        F,
    ),
    def(
        "hostname-override",
        V,
        "string",
        "",
        "If non-empty, will use this string as identification instead of the actual hostname.",
        F,
    ),
    def(
        "node-ip",
        V,
        "string",
        "",
        "IP address (or comma-separated dual-stack IP addresses) of the node. If unset, kubelet will use the node's default IPv4 address, if any, or its default IPv6 address if it has no IPv4 addresses.",
        F,
    ),
    def(
        "cert-dir",
        V,
        "string",
        "/var/lib/kubelet/pki",
        "The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored.",
        F,
    ),
    def(
        "cloud-provider",
        V,
        "string",
        "",
        "The provider for cloud services. Set to empty string for running with no cloud provider. Set to 'external' for running with an external cloud provider.",
        F,
    ),
    def(
        "root-dir",
        V,
        "string",
        "/var/lib/kubelet",
        "Directory path for managing kubelet files (volume mounts, etc).",
        F,
    ),
    def(
        "node-labels",
        V,
        "mapStringString",
        "",
        "Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','.",
        F,
    ),
    def(
        "lock-file",
        V,
        "string",
        "",
        "<Warning: Alpha feature> The path to file for kubelet to use as a lock file.",
        F,
    ),
    def(
        "exit-on-lock-contention",
        B,
        "",
        "",
        "Whether kubelet should exit upon lock-file contention.",
        F,
    ),
    def(
        "runtime-cgroups",
        V,
        "string",
        "",
        "Optional absolute name of cgroups to create and run the runtime in.",
        F,
    ),
    deprecated(
        def(
            "pod-infra-container-image",
            V,
            "string",
            "registry.k8s.io/pause:3.10",
            "Specified image will not be pruned by the image garbage collector. CRI implementations have their own configuration to set this image.",
            F,
        ),
        "will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.",
    ),
    def(
        "image-credential-provider-config",
        V,
        "string",
        "",
        "Path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; non-recursive search).",
        F,
    ),
    def(
        "image-credential-provider-bin-dir",
        V,
        "string",
        "",
        "The path to the directory where credential provider plugin binaries are located.",
        F,
    ),
    deprecated(
        def(
            "minimum-container-ttl-duration",
            V,
            "duration",
            "",
            "Minimum age for a finished container before it is garbage collected. Examples: '300ms', '10s' or '2h45m'",
            F,
        ),
        "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    deprecated(
        def(
            "maximum-dead-containers-per-container",
            V,
            "int32",
            "1",
            "Maximum number of old instances to retain per container. Each container takes up some disk space.",
            F,
        ),
        "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    deprecated(
        def(
            "maximum-dead-containers",
            V,
            "int32",
            "-1",
            "Maximum number of old instances of containers to retain globally. Each container takes up some disk space. To disable, set to a negative number.",
            F,
        ),
        "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    def(
        "housekeeping-interval",
        V,
        "duration",
        "10s",
        "Interval between container housekeepings",
        F,
    ),
    // KubeletConfiguration-backed.
    def(
        "enable-server",
        B,
        "",
        "true",
        "Enable the Kubelet's server",
        C,
    ),
    def(
        "fail-swap-on",
        B,
        "",
        "true",
        "Makes the Kubelet fail to start if swap is enabled on the node.",
        C,
    ),
    def(
        "fail-cgroupv1",
        B,
        "",
        "",
        "Prevents the kubelet from starting on hosts that use cgroup v1.",
        C,
    ),
    def(
        "pod-manifest-path",
        V,
        "string",
        "",
        "Path to the directory containing static pod files to run, or the path to a single static pod file. Files starting with dots will be ignored.",
        C,
    ),
    def(
        "sync-frequency",
        V,
        "duration",
        "1m0s",
        "Max period between synchronizing running containers and config",
        C,
    ),
    def(
        "file-check-frequency",
        V,
        "duration",
        "20s",
        "Duration between checking config files for new data",
        C,
    ),
    def(
        "http-check-frequency",
        V,
        "duration",
        "20s",
        "Duration between checking http for new data",
        C,
    ),
    def(
        "manifest-url",
        V,
        "string",
        "",
        "URL for accessing additional Pod specifications to run",
        C,
    ),
    def(
        "manifest-url-header",
        V,
        "colonSeparatedMultimapStringString",
        "",
        "Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url. Multiple headers with the same name will be added in the same order provided.",
        C,
    ),
    def(
        "address",
        V,
        "ip",
        "0.0.0.0",
        "The IP address for the Kubelet to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)",
        C,
    ),
    def(
        "port",
        V,
        "int32",
        "10250",
        "The port for the Kubelet to serve on.",
        C,
    ),
    def(
        "read-only-port",
        V,
        "int32",
        "10255",
        "The read-only port for the Kubelet to serve on with no authentication/authorization (set to 0 to disable)",
        C,
    ),
    def(
        "container-runtime-endpoint",
        V,
        "string",
        "unix:///run/containerd/containerd.sock",
        "The endpoint of container runtime service. Unix Domain Sockets are supported on Linux. Examples: 'unix:///path/to/runtime.sock'",
        C,
    ),
    def(
        "image-service-endpoint",
        V,
        "string",
        "",
        "The endpoint of container image service. If not specified, it will be the same with --container-runtime-endpoint by default.",
        C,
    ),
    def(
        "anonymous-auth",
        B,
        "",
        "true",
        "Enables anonymous requests to the Kubelet server. Requests that are not rejected by another authentication method are treated as anonymous requests.",
        C,
    ),
    def(
        "authentication-token-webhook",
        B,
        "",
        "",
        "Use the TokenReview API to determine authentication for bearer tokens.",
        C,
    ),
    def(
        "authentication-token-webhook-cache-ttl",
        V,
        "duration",
        "2m0s",
        "The duration to cache responses from the webhook token authenticator.",
        C,
    ),
    def(
        "client-ca-file",
        V,
        "string",
        "",
        "If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate.",
        C,
    ),
    def(
        "authorization-mode",
        V,
        "string",
        "AlwaysAllow",
        "Authorization mode for Kubelet server. Valid options are AlwaysAllow or Webhook. Webhook mode uses the SubjectAccessReview API to determine authorization.",
        C,
    ),
    def(
        "authorization-webhook-cache-authorized-ttl",
        V,
        "duration",
        "5m0s",
        "The duration to cache 'authorized' responses from the webhook authorizer.",
        C,
    ),
    def(
        "authorization-webhook-cache-unauthorized-ttl",
        V,
        "duration",
        "30s",
        "The duration to cache 'unauthorized' responses from the webhook authorizer.",
        C,
    ),
    def(
        "tls-cert-file",
        V,
        "string",
        "",
        "File containing x509 Certificate used for serving HTTPS (with intermediate certs, if any, concatenated after server cert).",
        C,
    ),
    def(
        "tls-private-key-file",
        V,
        "string",
        "",
        "File containing x509 private key matching --tls-cert-file.",
        C,
    ),
    def(
        "rotate-server-certificates",
        B,
        "",
        "",
        "Auto-request and rotate the kubelet serving certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.",
        C,
    ),
    def(
        "tls-cipher-suites",
        V,
        "strings",
        "",
        "Comma-separated list of cipher suites for the server. If omitted, the default cipher suites will be used.",
        C,
    ),
    def(
        "tls-min-version",
        V,
        "string",
        "",
        "Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
        C,
    ),
    def(
        "rotate-certificates",
        B,
        "",
        "",
        "Auto rotate the kubelet client certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.",
        C,
    ),
    def(
        "registry-qps",
        V,
        "int32",
        "5",
        "If > 0, limit registry pull QPS to this value. If 0, unlimited.",
        C,
    ),
    def(
        "registry-burst",
        V,
        "int32",
        "10",
        "Maximum size of a bursty pulls, temporarily allows pulls to burst to this number, while still not exceeding registry-qps. Only used if --registry-qps > 0",
        C,
    ),
    def(
        "event-qps",
        V,
        "int32",
        "50",
        "QPS to limit event creations. The number must be >= 0. If 0 will use DefaultQPS: 5.",
        C,
    ),
    def(
        "event-burst",
        V,
        "int32",
        "100",
        "Maximum size of a bursty event records, temporarily allows event records to burst to this number, while still not exceeding event-qps.",
        C,
    ),
    def(
        "enable-debugging-handlers",
        B,
        "",
        "true",
        "Enables server endpoints for log collection and local running of containers and commands",
        C,
    ),
    def(
        "contention-profiling",
        B,
        "",
        "",
        "Enable block profiling, if profiling is enabled",
        C,
    ),
    def(
        "healthz-port",
        V,
        "int32",
        "10248",
        "The port of the localhost healthz endpoint (set to 0 to disable)",
        C,
    ),
    def(
        "healthz-bind-address",
        V,
        "ip",
        "127.0.0.1",
        "The IP address for the healthz server to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)",
        C,
    ),
    def(
        "oom-score-adj",
        V,
        "int32",
        "-999",
        "The oom-score-adj value for kubelet process. Values must be within the range [-1000, 1000]",
        C,
    ),
    def(
        "cluster-domain",
        V,
        "string",
        "",
        "Domain for this cluster. If set, kubelet will configure all containers to search this domain in addition to the host's search domains",
        C,
    ),
    def(
        "volume-plugin-dir",
        V,
        "string",
        "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
        "The full path of the directory in which to search for additional third party volume plugins",
        C,
    ),
    def(
        "cluster-dns",
        V,
        "strings",
        "",
        "Comma-separated list of DNS server IP address. This value is used for containers DNS server in case of Pods with \"dnsPolicy=ClusterFirst\".",
        C,
    ),
    def(
        "streaming-connection-idle-timeout",
        V,
        "duration",
        "4h0m0s",
        "Maximum time a streaming connection can be idle before the connection is automatically closed. 0 indicates no timeout. Example: '5m'.",
        C,
    ),
    def(
        "node-status-update-frequency",
        V,
        "duration",
        "10s",
        "Specifies how often kubelet posts node status to master.",
        C,
    ),
    def(
        "minimum-image-ttl-duration",
        V,
        "duration",
        "2m0s",
        "Minimum age for an unused image before it is garbage collected. Examples: '300ms', '10s' or '2h45m'.",
        C,
    ),
    def(
        "image-gc-high-threshold",
        V,
        "int32",
        "85",
        "The percent of disk usage after which image garbage collection is always run. Values must be within the range [0, 100], To disable image garbage collection, set to 100.",
        C,
    ),
    def(
        "image-gc-low-threshold",
        V,
        "int32",
        "80",
        "The percent of disk usage before which image garbage collection is never run. Lowest disk usage to garbage collect to. Values must be within the range [0, 100] and should not be larger than that of --image-gc-high-threshold.",
        C,
    ),
    def(
        "volume-stats-agg-period",
        V,
        "duration",
        "1m0s",
        "Specifies interval for kubelet to calculate and cache the volume disk usage for all pods and volumes.",
        C,
    ),
    def(
        "feature-gates",
        V,
        "mapStringBool",
        "",
        "A set of key=value pairs that describe feature gates for alpha/experimental features.",
        C,
    ),
    def(
        "kubelet-cgroups",
        V,
        "string",
        "",
        "Optional absolute name of cgroups to create and run the Kubelet in.",
        C,
    ),
    def(
        "system-cgroups",
        V,
        "string",
        "",
        "Optional absolute name of cgroups in which to place all non-kernel processes that are not already inside a cgroup under '/'. Empty for no container. Rolling back the flag requires a reboot.",
        C,
    ),
    def(
        "provider-id",
        V,
        "string",
        "",
        "Unique identifier for identifying the node in a machine database, i.e cloudprovider",
        K,
    ),
    def(
        "cgroups-per-qos",
        B,
        "",
        "true",
        "Enable creation of QoS cgroup hierarchy, if true top level QoS and pod cgroups are created.",
        C,
    ),
    def(
        "cgroup-driver",
        V,
        "string",
        "cgroupfs",
        "Driver that the kubelet uses to manipulate cgroups on the host. Possible values: 'cgroupfs', 'systemd'",
        C,
    ),
    def(
        "cgroup-root",
        V,
        "string",
        "",
        "Optional root cgroup to use for pods. This is handled by the container runtime on a best effort basis. Default: '', which means use the container runtime default.",
        C,
    ),
    def(
        "cpu-manager-policy",
        V,
        "string",
        "none",
        "CPU Manager policy to use. Possible values: 'none', 'static'.",
        C,
    ),
    def(
        "cpu-manager-policy-options",
        V,
        "mapStringString",
        "",
        "A set of key=value CPU Manager policy options to use, to fine tune their behaviour.",
        C,
    ),
    def(
        "cpu-manager-reconcile-period",
        V,
        "duration",
        "10s",
        "<Warning: Alpha feature> CPU Manager reconciliation period. Examples: '10s', or '1m'.",
        C,
    ),
    def(
        "qos-reserved",
        V,
        "mapStringString",
        "",
        "<Warning: Alpha feature> A set of ResourceName=Percentage (e.g. memory=50%) pairs that describe how pod resource requests are reserved at the QoS level.",
        C,
    ),
    def(
        "topology-manager-policy",
        V,
        "string",
        "none",
        "Topology Manager policy to use. Possible values: 'none', 'best-effort', 'restricted', 'single-numa-node'.",
        C,
    ),
    def(
        "topology-manager-scope",
        V,
        "string",
        "container",
        "Scope to which topology hints applied. Possible values: 'container', 'pod'.",
        C,
    ),
    def(
        "topology-manager-policy-options",
        V,
        "mapStringString",
        "",
        "A set of key=value Topology Manager policy options to use, to fine tune their behaviour.",
        C,
    ),
    def(
        "runtime-request-timeout",
        V,
        "duration",
        "2m0s",
        "Timeout of all runtime requests except long running request - pull, logs, exec and attach. When timeout exceeded, kubelet will cancel the request, throw out an error and retry later.",
        C,
    ),
    def(
        "hairpin-mode",
        V,
        "string",
        "promiscuous-bridge",
        "How should the kubelet setup hairpin NAT. Valid values are \"promiscuous-bridge\", \"hairpin-veth\" and \"none\".",
        C,
    ),
    def(
        "max-pods",
        V,
        "int32",
        "110",
        "Number of Pods that can run on this Kubelet.",
        C,
    ),
    def(
        "pod-cidr",
        V,
        "string",
        "",
        "The CIDR to use for pod IP addresses, only used in standalone mode. In cluster mode, this is obtained from the control plane.",
        C,
    ),
    def(
        "pod-max-pids",
        V,
        "int",
        "-1",
        "Set the maximum number of processes per pod. If -1, the kubelet defaults to the node allocatable pid capacity.",
        C,
    ),
    def(
        "resolv-conf",
        V,
        "string",
        "/etc/resolv.conf",
        "Resolver configuration file used as the basis for the container DNS resolution configuration.",
        C,
    ),
    def(
        "runonce",
        B,
        "",
        "",
        "If true, exit after spawning pods from static pod files or remote urls. Exclusive with --enable-server",
        C,
    ),
    def(
        "cpu-cfs-quota",
        B,
        "",
        "true",
        "Enable CPU CFS quota enforcement for containers that specify CPU limits",
        C,
    ),
    def(
        "cpu-cfs-quota-period",
        V,
        "duration",
        "100ms",
        "Sets CPU CFS quota period value, cpu.cfs_period_us, defaults to Linux Kernel default",
        C,
    ),
    def(
        "enable-controller-attach-detach",
        B,
        "",
        "true",
        "Enables the Attach/Detach controller to manage attachment/detachment of volumes scheduled to this node, and disables kubelet from executing any attach/detach operations",
        C,
    ),
    def(
        "make-iptables-util-chains",
        B,
        "",
        "true",
        "If true, kubelet will ensure iptables utility rules are present on host.",
        C,
    ),
    deprecated(
        def(
            "iptables-masquerade-bit",
            V,
            "int32",
            "14",
            "Has no effect; use kube-proxy parameters to configure the KUBE-MARK-MASQ chain.",
            C,
        ),
        "This flag has no effect and will be removed in a future version.",
    ),
    deprecated(
        def(
            "iptables-drop-bit",
            V,
            "int32",
            "15",
            "Has no effect; kubelet no longer creates a KUBE-MARK-DROP chain",
            C,
        ),
        "This flag has no effect and will be removed in a future version.",
    ),
    def(
        "container-log-max-size",
        V,
        "string",
        "10Mi",
        "Set the maximum size (e.g. 10Mi) of container log file before it is rotated.",
        C,
    ),
    def(
        "container-log-max-files",
        V,
        "int32",
        "5",
        "Set the maximum number of container log files that can be present for a container. The number must be >= 2.",
        C,
    ),
    def(
        "container-log-max-workers",
        V,
        "int32",
        "1",
        "Set the maximum number of concurrent workers for log rotation.",
        C,
    ),
    def(
        "container-log-monitor-interval",
        V,
        "duration",
        "10s",
        "Set the duration at which the container logs are monitored for rotation.",
        C,
    ),
    def(
        "allowed-unsafe-sysctls",
        V,
        "strings",
        "",
        "Comma-separated whitelist of unsafe sysctls or unsafe sysctl patterns (ending in *). Use these at your own risk.",
        C,
    ),
    def(
        "node-status-max-images",
        V,
        "int32",
        "50",
        "The maximum number of images to report in Node.Status.Images. If -1 is specified, no cap will be applied.",
        C,
    ),
    def(
        "kernel-memcg-notification",
        B,
        "",
        "",
        "If enabled, the kubelet will integrate with the kernel memcg notification to determine if memory eviction thresholds are crossed rather than polling.",
        C,
    ),
    def(
        "local-storage-capacity-isolation",
        B,
        "",
        "true",
        "If true, local ephemeral storage isolation is enabled. Otherwise, local storage isolation feature will be disabled",
        C,
    ),
    def(
        "max-open-files",
        V,
        "int",
        "1000000",
        "Number of files that can be opened by Kubelet process.",
        C,
    ),
    def(
        "kube-api-content-type",
        V,
        "string",
        "application/vnd.kubernetes.protobuf",
        "Content type of requests sent to apiserver.",
        C,
    ),
    def(
        "kube-api-qps",
        V,
        "int32",
        "50",
        "QPS to use while talking with kubernetes apiserver. The number must be >= 0.",
        C,
    ),
    def(
        "kube-api-burst",
        V,
        "int32",
        "100",
        "Burst to use while talking with kubernetes apiserver. The number must be >= 0.",
        C,
    ),
    def(
        "serialize-image-pulls",
        B,
        "",
        "true",
        "Pull images one at a time.",
        C,
    ),
    def(
        "eviction-hard",
        V,
        "mapStringString",
        "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
        "A set of eviction thresholds (e.g. memory.available<1Gi) that if met would trigger a pod eviction.",
        C,
    ),
    def(
        "eviction-soft",
        V,
        "mapStringString",
        "",
        "A set of eviction thresholds (e.g. memory.available<1.5Gi) that if met over a corresponding grace period would trigger a pod eviction.",
        C,
    ),
    def(
        "eviction-soft-grace-period",
        V,
        "mapStringString",
        "",
        "A set of eviction grace periods (e.g. memory.available=1m30s) that correspond to how long a soft eviction threshold must hold before triggering a pod eviction.",
        C,
    ),
    def(
        "eviction-pressure-transition-period",
        V,
        "duration",
        "5m0s",
        "Duration for which the kubelet has to wait before transitioning out of an eviction pressure condition.",
        C,
    ),
    def(
        "eviction-max-pod-grace-period",
        V,
        "int32",
        "",
        "Maximum allowed grace period (in seconds) to use when terminating pods in response to a soft eviction threshold being met. If negative, defer to pod specified value.",
        C,
    ),
    def(
        "eviction-minimum-reclaim",
        V,
        "mapStringString",
        "",
        "A set of minimum reclaims (e.g. imagefs.available=2Gi) that describes the minimum amount of resource the kubelet will reclaim when performing a pod eviction if that resource is under pressure.",
        C,
    ),
    def(
        "pods-per-core",
        V,
        "int32",
        "",
        "Number of Pods per core that can run on this Kubelet. A value of 0 disables this limit.",
        C,
    ),
    def(
        "protect-kernel-defaults",
        B,
        "",
        "",
        "Default kubelet behaviour for kernel tuning. If set, kubelet errors if any of kernel tunables is different than kubelet defaults.",
        C,
    ),
    def(
        "reserved-cpus",
        V,
        "string",
        "",
        "A comma-separated list of CPUs or CPU ranges that are reserved for system and kubernetes usage.",
        C,
    ),
    def(
        "system-reserved",
        V,
        "mapStringString",
        "",
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for non-kubernetes components. [default=none]",
        C,
    ),
    def(
        "kube-reserved",
        V,
        "mapStringString",
        "",
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for kubernetes system components. [default=none]",
        C,
    ),
    def(
        "enforce-node-allocatable",
        V,
        "strings",
        "[pods]",
        "A comma separated list of levels of node allocatable enforcement to be enforced by kubelet. Acceptable options are 'none', 'pods', 'system-reserved', and 'kube-reserved'.",
        C,
    ),
    def(
        "system-reserved-cgroup",
        V,
        "string",
        "",
        "Absolute name of the top level cgroup that is used to manage non-kubernetes components for which compute resources were reserved via '--system-reserved' flag. [default='']",
        C,
    ),
    def(
        "kube-reserved-cgroup",
        V,
        "string",
        "",
        "Absolute name of the top level cgroup that is used to manage kubernetes components for which compute resources were reserved via '--kube-reserved' flag. [default='']",
        C,
    ),
    def(
        "memory-manager-policy",
        V,
        "string",
        "None",
        "Memory Manager policy to use. Possible values: 'None', 'Static'.",
        C,
    ),
    def(
        "reserved-memory",
        V,
        "string",
        "",
        "A comma separated list of memory reservations for NUMA nodes. (e.g. --reserved-memory 0:memory=1Gi,hugepages-1M=2Gi --reserved-memory 1:memory=2Gi).",
        C,
    ),
    def(
        "register-node",
        B,
        "",
        "true",
        "Register the node with the apiserver. If --kubeconfig is not provided, this flag is irrelevant, as the Kubelet won't have an apiserver to register with.",
        C,
    ),
    def(
        "register-with-taints",
        V,
        "string",
        "",
        "Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\"). No-op if register-node is false.",
        C,
    ),
    def(
        "seccomp-default",
        B,
        "",
        "",
        "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.",
        C,
    ),
    def(
        "logging-format",
        V,
        "string",
        "text",
        "Sets the log format. Permitted formats: \"json\" (gated by LoggingBetaOptions), \"text\".",
        C,
    ),
    def(
        "log-flush-frequency",
        V,
        "duration",
        "5s",
        "Maximum number of seconds between log flushes",
        K,
    ),
    with_short(
        def("v", V, "Level", "", "number for the log level verbosity", K),
        'v',
    ),
    def(
        "vmodule",
        V,
        "pattern=N,...",
        "",
        "comma-separated list of pattern=N settings for file-filtered logging (only works for text log format)",
        K,
    ),
    def(
        "log-json-split-stream",
        B,
        "",
        "",
        "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.",
        C,
    ),
    def(
        "log-json-info-buffer-size",
        V,
        "quantity",
        "",
        "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance.",
        C,
    ),
    def(
        "log-text-split-stream",
        B,
        "",
        "",
        "[Alpha] In text format, write error messages to stderr and info messages to stdout.",
        C,
    ),
    def(
        "log-text-info-buffer-size",
        V,
        "quantity",
        "",
        "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance.",
        C,
    ),
    // cadvisor leftovers: deprecated upstream, no effect here.
    deprecated(
        def("application-metrics-count-limit", V, "int", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("boot-id-file", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("container-hints", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("containerd", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("containerd-namespace", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("enable-load-reader", B, "", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("event-storage-age-limit", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("event-storage-event-limit", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("global-housekeeping-interval", V, "duration", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("log-cadvisor-usage", B, "", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("machine-id-file", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-user", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-password", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-host", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-db", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-table", V, "string", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-secure", B, "", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    deprecated(
        def("storage-driver-buffer-duration", V, "duration", "", "", I),
        CADVISOR_DEPRECATION,
    ),
    // Removed upstream over the years; old unit files and kubeadm flag files still pass them.
    def("container-runtime", V, "", "", "", I),
    def("network-plugin", V, "", "", "", I),
    def("network-plugin-dir", V, "", "", "", I),
    def("network-plugin-mtu", V, "", "", "", I),
    def("cni-bin-dir", V, "", "", "", I),
    def("cni-conf-dir", V, "", "", "", I),
    def("cni-cache-dir", V, "", "", "", I),
    def("docker-endpoint", V, "", "", "", I),
    def("docker", V, "", "", "", I),
    def("docker-root", V, "", "", "", I),
    def("docker-env-metadata-whitelist", V, "", "", "", I),
    def("docker-only", B, "", "", "", I),
    def("docker-disable-shared-pid", B, "", "", "", I),
    def("image-pull-progress-deadline", V, "", "", "", I),
    def("experimental-dockershim", B, "", "", "", I),
    def("experimental-dockershim-root-directory", V, "", "", "", I),
    def("dockershim-root-directory", V, "", "", "", I),
    def("redirect-container-streaming", B, "", "", "", I),
    def("allow-privileged", B, "", "", "", I),
    def("cadvisor-port", V, "", "", "", I),
    def("enable-cadvisor-json-endpoints", B, "", "", "", I),
    def("non-masquerade-cidr", V, "", "", "", I),
    def("master-service-namespace", V, "", "", "", I),
    def("cloud-config", V, "", "", "", I),
    def("azure-container-registry-config", V, "", "", "", I),
    def("experimental-mounter-path", V, "", "", "", I),
    def("experimental-bootstrap-kubeconfig", V, "", "", "", I),
    def("experimental-allocatable-ignore-eviction", B, "", "", "", I),
    def(
        "experimental-check-node-capabilities-before-mount",
        B,
        "",
        "",
        "",
        I,
    ),
    def("experimental-kernel-memcg-notification", B, "", "", "", I),
    def("experimental-fail-swap-on", B, "", "", "", I),
    def("experimental-qos-reserved", V, "", "", "", I),
    def("experimental-allowed-unsafe-sysctls", V, "", "", "", I),
    def("keep-terminated-pod-volumes", B, "", "", "", I),
    def("register-schedulable", B, "", "", "", I),
    def("require-kubeconfig", B, "", "", "", I),
    def("api-servers", V, "", "", "", I),
    def("auth-path", V, "", "", "", I),
    def("low-diskspace-threshold-mb", V, "", "", "", I),
    def("host-network-sources", V, "", "", "", I),
    def("host-pid-sources", V, "", "", "", I),
    def("host-ipc-sources", V, "", "", "", I),
    def("seccomp-profile-root", V, "", "", "", I),
    def("dynamic-config-dir", V, "", "", "", I),
    def("enable-custom-metrics", B, "", "", "", I),
    def("really-crash-for-testing", B, "", "", "", I),
    def("chaos-chance", V, "", "", "", I),
    def("resource-container", V, "", "", "", I),
    def("system-container", V, "", "", "", I),
    def("rkt-path", V, "", "", "", I),
    def("rkt-api-endpoint", V, "", "", "", I),
    def("rkt-stage1-image", V, "", "", "", I),
    def("lock-file-path", V, "", "", "", I),
    def("logtostderr", B, "", "", "", I),
    def("alsologtostderr", B, "", "", "", I),
    def("log-dir", V, "", "", "", I),
    def("log-file", V, "", "", "", I),
    def("log-file-max-size", V, "", "", "", I),
    def("log-backtrace-at", V, "", "", "", I),
    def("stderrthreshold", V, "", "", "", I),
    def("skip-headers", B, "", "", "", I),
    def("skip-log-headers", B, "", "", "", I),
    def("one-output", B, "", "", "", I),
    def("add-dir-header", B, "", "", "", I),
];

/// pflag's word-separator normalisation: `--node_ip` is `--node-ip`.
fn normalize(name: &str) -> String {
    name.replace('_', "-")
}

pub(crate) fn lookup(name: &str) -> Option<&'static FlagDef> {
    let n = normalize(name);
    FLAGS.iter().find(|f| f.name == n)
}

fn lookup_short(c: char) -> Option<&'static FlagDef> {
    FLAGS.iter().find(|f| f.short == Some(c))
}

/// One flag as it appeared on the command line.
#[derive(Clone, Debug)]
pub(crate) struct Occurrence {
    pub def: &'static FlagDef,
    pub value: String,
}

/// Splits `args` (without the program name) into flag occurrences, pflag style.
pub(crate) fn tokenize(args: &[String]) -> Result<Vec<Occurrence>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if let Some(extra) = args.get(i) {
                return Err(format!("unknown command {extra:?}"));
            }
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if name.is_empty() || name.starts_with('-') || name.starts_with('=') {
                return Err(format!("bad flag syntax: {arg}"));
            }
            let def = lookup(name).ok_or_else(|| format!("unknown flag: --{name}"))?;
            let value = match (attached, def.arity) {
                (Some(v), _) => v,
                (None, Arity::Bool) => "true".to_string(),
                (None, Arity::Value) => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| format!("flag needs an argument: --{name}"))?;
                    i += 1;
                    v.clone()
                }
            };
            out.push(Occurrence { def, value });
        } else if arg.len() > 1 && arg.starts_with('-') {
            let shorts: Vec<char> = arg[1..].chars().collect();
            let mut j = 0;
            while j < shorts.len() {
                let c = shorts[j];
                let def = lookup_short(c)
                    .ok_or_else(|| format!("unknown shorthand flag: '{c}' in {arg}"))?;
                let rest: String = shorts[j + 1..].iter().collect();
                if let Some(v) = rest.strip_prefix('=') {
                    out.push(Occurrence {
                        def,
                        value: v.to_string(),
                    });
                    break;
                }
                match def.arity {
                    Arity::Bool => {
                        out.push(Occurrence {
                            def,
                            value: "true".to_string(),
                        });
                        j += 1;
                    }
                    Arity::Value if !rest.is_empty() => {
                        out.push(Occurrence { def, value: rest });
                        break;
                    }
                    Arity::Value => {
                        let v = args
                            .get(i)
                            .ok_or_else(|| format!("flag needs an argument: '{c}' in {arg}"))?;
                        i += 1;
                        out.push(Occurrence {
                            def,
                            value: v.clone(),
                        });
                        break;
                    }
                }
            }
        } else {
            return Err(format!("unknown command {arg:?}"));
        }
    }
    Ok(out)
}

/// The notice pflag prints when a deprecated flag is used, or ours for ignored ones.
pub(crate) fn usage_warning(def: &FlagDef) -> Option<String> {
    match (def.scope, def.deprecated) {
        (_, Some(msg)) => Some(format!("Flag --{} has been deprecated, {msg}", def.name)),
        (Scope::Config, None) => Some(format!(
            "Flag --{} has been deprecated, {CONFIG_DEPRECATION}",
            def.name
        )),
        (Scope::Ignored, None) => Some(format!("Flag --{} is not supported, {REMOVED}", def.name)),
        _ => None,
    }
}

fn invalid(value: &str, name: &str, reason: impl std::fmt::Display) -> String {
    format!("invalid argument {value:?} for \"--{name}\" flag: {reason}")
}

/// Go's strconv.ParseBool.
pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Go's strconv.ParseInt with base 0 (0x, 0o, 0b and leading-0 octal prefixes).
pub(crate) fn parse_int(s: &str, bits: u32) -> Result<i64, String> {
    let err = |what: &str| format!("strconv.ParseInt: parsing {s:?}: {what}");
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let body = body.replace('_', "");
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d.to_string())
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d.to_string())
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d.to_string())
        } else if body.len() > 1 && body.starts_with('0') {
            (8, body[1..].to_string())
        } else {
            (10, body.clone())
        };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return Err(err("invalid syntax"));
    }
    let magnitude = i128::from_str_radix(&digits, radix).map_err(|_| err("invalid syntax"))?;
    let v = if neg { -magnitude } else { magnitude };
    let max = (1i128 << (bits - 1)) - 1;
    let min = -(1i128 << (bits - 1));
    if v > max || v < min {
        return Err(err("value out of range"));
    }
    Ok(v as i64)
}

fn parse_i32(name: &str, v: &str) -> Result<i32, String> {
    parse_int(v, 32)
        .map(|n| n as i32)
        .map_err(|e| invalid(v, name, e))
}

fn parse_i64(name: &str, v: &str) -> Result<i64, String> {
    parse_int(v, 64).map_err(|e| invalid(v, name, e))
}

fn parse_flag_bool(name: &str, v: &str) -> Result<bool, String> {
    parse_bool(v).map_err(|e| invalid(v, name, e))
}

fn parse_dur(name: &str, v: &str) -> Result<GoDuration, String> {
    parse_go_duration(v)
        .map(GoDuration)
        .map_err(|e| invalid(v, name, e))
}

fn parse_ip(name: &str, v: &str) -> Result<String, String> {
    v.trim()
        .parse::<IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| invalid(v, name, format!("{v:?} is not a valid IP address")))
}

/// pflag StringSlice: comma separated; the first use replaces, later uses append.
fn set_strings(target: &mut Vec<String>, v: &str, first: bool) {
    if first {
        target.clear();
    }
    if v.is_empty() {
        return;
    }
    target.extend(v.split(',').map(|s| s.trim().to_string()));
}

/// component-base MapStringString and friends: `k<sep>v` pairs, optionally comma
/// separated; the first use replaces the map, later uses merge into it.
fn set_map(
    target: &mut BTreeMap<String, String>,
    name: &str,
    v: &str,
    sep: char,
    split_commas: bool,
    first: bool,
) -> Result<(), String> {
    if first {
        target.clear();
    }
    let pairs: Vec<&str> = if split_commas {
        v.split(',').collect()
    } else {
        vec![v]
    };
    for pair in pairs {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (k, val) = pair
            .split_once(sep)
            .ok_or_else(|| invalid(v, name, format!("malformed pair, expect string{sep}string")))?;
        target.insert(k.trim().to_string(), val.trim().to_string());
    }
    Ok(())
}

fn set_bool_map(target: &mut BTreeMap<String, bool>, name: &str, v: &str) -> Result<(), String> {
    for pair in v.split(',') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (k, val) = pair
            .split_once('=')
            .ok_or_else(|| invalid(v, name, format!("missing bool value for {pair}")))?;
        let b = parse_bool(val.trim())
            .map_err(|e| invalid(v, name, format!("invalid value of {k}: {val}, err: {e}")))?;
        target.insert(k.trim().to_string(), b);
    }
    Ok(())
}

/// `key=value:Effect` or `key:Effect`, comma separated.
pub(crate) fn parse_taints(v: &str) -> Result<Vec<Taint>, String> {
    let mut out = Vec::new();
    for spec in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kv, effect) = spec
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid taint spec: {spec}"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "invalid taint effect: {effect}, unsupported taint effect"
            ));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, val)) => (k, Some(val.to_string())),
            None => (kv, None),
        };
        if !crate::names::is_qualified_name(key) {
            return Err(format!("invalid taint spec: {spec}, invalid key {key:?}"));
        }
        if let Some(val) = &value
            && !crate::names::is_label_value(val)
        {
            return Err(format!("invalid taint spec: {spec}, invalid value {val:?}"));
        }
        out.push(Taint {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(out)
}

/// `<numa>:<resource>=<quantity>,...`.
fn parse_reserved_memory(v: &str) -> Result<MemoryReservation, String> {
    let (node, limits) = v
        .split_once(':')
        .ok_or_else(|| format!("the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got {v}"))?;
    let numa_node: i32 = node
        .trim()
        .parse()
        .map_err(|_| format!("failed to parse the NUMA node ID {node:?}"))?;
    let mut r = MemoryReservation {
        numa_node,
        limits: BTreeMap::new(),
    };
    for pair in limits.split(',') {
        let (k, q) = pair.split_once('=').ok_or_else(|| {
            format!("the reserved limit has incorrect value, expected type=quantity, got {pair}")
        })?;
        parse_quantity(q).map_err(|e| format!("failed to parse the quantity {q:?}: {e}"))?;
        r.limits.insert(k.trim().to_string(), q.trim().to_string());
    }
    Ok(r)
}

fn parse_vmodule(name: &str, v: &str) -> Result<Vec<VModuleItem>, String> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (pattern, level) = part.split_once('=').ok_or_else(|| {
            invalid(
                v,
                name,
                format!("{part:?} does not have the pattern=N format"),
            )
        })?;
        let verbosity: u32 = level
            .parse()
            .map_err(|_| invalid(v, name, format!("parsing verbosity in {part:?}")))?;
        out.push(VModuleItem {
            file_pattern: pattern.to_string(),
            verbosity,
        });
    }
    Ok(out)
}

/// Parses `--node-ip`: one address, or an IPv4 and an IPv6 address.
pub(crate) fn parse_node_ips(v: &str) -> Result<Vec<IpAddr>, String> {
    if v.trim().is_empty() {
        return Ok(Vec::new());
    }
    let ips = v
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("could not parse {:?}", s.trim()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(format!(
            "dual-stack --node-ip {v:?} must include one IPv4 address and one IPv6 address"
        )),
        _ => Err(format!(
            "must contain either a single IP or a dual-stack pair of IPs, got {v:?}"
        )),
    }
}

/// Applies a flags-only (`Scope::Flag`) occurrence.
pub(crate) fn apply_flag(f: &mut KubeletFlags, name: &str, v: &str) -> Result<(), String> {
    let path = || Some(PathBuf::from(v)).filter(|p| !p.as_os_str().is_empty());
    match name {
        "config" => f.config_file = path(),
        "config-dir" => f.config_dir = path(),
        "kubeconfig" => f.kubeconfig = path(),
        "bootstrap-kubeconfig" => f.bootstrap_kubeconfig = path(),
        "hostname-override" => f.hostname_override = Some(v.to_string()).filter(|s| !s.is_empty()),
        "node-ip" => f.node_ip = parse_node_ips(v).map_err(|e| invalid(v, name, e))?,
        "cert-dir" => f.cert_dir = PathBuf::from(v),
        "cloud-provider" => f.cloud_provider = v.to_string(),
        "root-dir" => f.root_dir = PathBuf::from(v),
        "node-labels" => {
            // Labels accumulate across uses; a key without '=' gets an empty value.
            for pair in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
                f.node_labels
                    .insert(k.trim().to_string(), val.trim().to_string());
            }
        }
        "lock-file" => f.lock_file = path(),
        "exit-on-lock-contention" => f.exit_on_lock_contention = parse_flag_bool(name, v)?,
        "runtime-cgroups" => f.runtime_cgroups = v.to_string(),
        "pod-infra-container-image" => f.pod_infra_container_image = v.to_string(),
        "image-credential-provider-config" => f.image_credential_provider_config = path(),
        "image-credential-provider-bin-dir" => f.image_credential_provider_bin_dir = path(),
        "minimum-container-ttl-duration" => f.minimum_container_ttl_duration = parse_dur(name, v)?,
        "maximum-dead-containers-per-container" => {
            f.max_per_pod_container_count = parse_i32(name, v)?
        }
        "maximum-dead-containers" => f.max_container_count = parse_i32(name, v)?,
        "housekeeping-interval" => f.housekeeping_interval = parse_dur(name, v)?,
        _ => return Err(format!("internal: flag --{name} has no handler")),
    }
    Ok(())
}

/// Applies a config-backed occurrence onto `c`.
pub(crate) fn apply_config(
    c: &mut KubeletConfiguration,
    name: &str,
    v: &str,
    first: bool,
) -> Result<(), String> {
    match name {
        "enable-server" => c.enable_server = parse_flag_bool(name, v)?,
        "fail-swap-on" => c.fail_swap_on = parse_flag_bool(name, v)?,
        "fail-cgroupv1" => c.fail_cgroup_v1 = parse_flag_bool(name, v)?,
        "pod-manifest-path" => c.static_pod_path = v.to_string(),
        "sync-frequency" => c.sync_frequency = parse_dur(name, v)?,
        "file-check-frequency" => c.file_check_frequency = parse_dur(name, v)?,
        "http-check-frequency" => c.http_check_frequency = parse_dur(name, v)?,
        "manifest-url" => c.static_pod_url = v.to_string(),
        "manifest-url-header" => {
            if first {
                c.static_pod_url_header.clear();
            }
            for pair in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (k, val) = pair.split_once(':').ok_or_else(|| {
                    invalid(
                        v,
                        name,
                        format!("malformed pair, expect string:string, got {pair}"),
                    )
                })?;
                c.static_pod_url_header
                    .entry(k.trim().to_string())
                    .or_default()
                    .push(val.trim().to_string());
            }
        }
        "address" => c.address = parse_ip(name, v)?,
        "port" => c.port = parse_i32(name, v)?,
        "read-only-port" => c.read_only_port = parse_i32(name, v)?,
        "container-runtime-endpoint" => c.container_runtime_endpoint = v.to_string(),
        "image-service-endpoint" => c.image_service_endpoint = v.to_string(),
        "anonymous-auth" => c.authentication.anonymous.enabled = parse_flag_bool(name, v)?,
        "authentication-token-webhook" => {
            c.authentication.webhook.enabled = parse_flag_bool(name, v)?
        }
        "authentication-token-webhook-cache-ttl" => {
            c.authentication.webhook.cache_ttl = parse_dur(name, v)?
        }
        "client-ca-file" => c.authentication.x509.client_ca_file = v.to_string(),
        "authorization-mode" => c.authorization.mode = v.to_string(),
        "authorization-webhook-cache-authorized-ttl" => {
            c.authorization.webhook.cache_authorized_ttl = parse_dur(name, v)?
        }
        "authorization-webhook-cache-unauthorized-ttl" => {
            c.authorization.webhook.cache_unauthorized_ttl = parse_dur(name, v)?
        }
        "tls-cert-file" => c.tls_cert_file = v.to_string(),
        "tls-private-key-file" => c.tls_private_key_file = v.to_string(),
        "rotate-server-certificates" => c.server_tls_bootstrap = parse_flag_bool(name, v)?,
        "tls-cipher-suites" => set_strings(&mut c.tls_cipher_suites, v, first),
        "tls-min-version" => c.tls_min_version = v.to_string(),
        "rotate-certificates" => c.rotate_certificates = parse_flag_bool(name, v)?,
        "registry-qps" => c.registry_pull_qps = parse_i32(name, v)?,
        "registry-burst" => c.registry_burst = parse_i32(name, v)?,
        "event-qps" => c.event_record_qps = parse_i32(name, v)?,
        "event-burst" => c.event_burst = parse_i32(name, v)?,
        "enable-debugging-handlers" => c.enable_debugging_handlers = parse_flag_bool(name, v)?,
        "contention-profiling" => c.enable_contention_profiling = parse_flag_bool(name, v)?,
        "healthz-port" => c.healthz_port = parse_i32(name, v)?,
        "healthz-bind-address" => c.healthz_bind_address = parse_ip(name, v)?,
        "oom-score-adj" => c.oom_score_adj = parse_i32(name, v)?,
        "cluster-domain" => c.cluster_domain = v.to_string(),
        "volume-plugin-dir" => c.volume_plugin_dir = v.to_string(),
        "cluster-dns" => set_strings(&mut c.cluster_dns, v, first),
        "streaming-connection-idle-timeout" => {
            c.streaming_connection_idle_timeout = parse_dur(name, v)?
        }
        "node-status-update-frequency" => c.node_status_update_frequency = parse_dur(name, v)?,
        "minimum-image-ttl-duration" => c.image_minimum_gc_age = parse_dur(name, v)?,
        "image-gc-high-threshold" => c.image_gc_high_threshold_percent = parse_i32(name, v)?,
        "image-gc-low-threshold" => c.image_gc_low_threshold_percent = parse_i32(name, v)?,
        "volume-stats-agg-period" => c.volume_stats_agg_period = parse_dur(name, v)?,
        // Flag gates merge key by key over the file's gates, flag values winning.
        "feature-gates" => set_bool_map(&mut c.feature_gates, name, v)?,
        "kubelet-cgroups" => c.kubelet_cgroups = v.to_string(),
        "system-cgroups" => c.system_cgroups = v.to_string(),
        "provider-id" => c.provider_id = v.to_string(),
        "cgroups-per-qos" => c.cgroups_per_qos = parse_flag_bool(name, v)?,
        "cgroup-driver" => c.cgroup_driver = v.to_string(),
        "cgroup-root" => c.cgroup_root = v.to_string(),
        "cpu-manager-policy" => c.cpu_manager_policy = v.to_string(),
        "cpu-manager-policy-options" => set_map(
            &mut c.cpu_manager_policy_options,
            name,
            v,
            '=',
            false,
            first,
        )?,
        "cpu-manager-reconcile-period" => c.cpu_manager_reconcile_period = parse_dur(name, v)?,
        "qos-reserved" => set_map(&mut c.qos_reserved, name, v, '=', true, first)?,
        "topology-manager-policy" => c.topology_manager_policy = v.to_string(),
        "topology-manager-scope" => c.topology_manager_scope = v.to_string(),
        "topology-manager-policy-options" => set_map(
            &mut c.topology_manager_policy_options,
            name,
            v,
            '=',
            false,
            first,
        )?,
        "runtime-request-timeout" => c.runtime_request_timeout = parse_dur(name, v)?,
        "hairpin-mode" => c.hairpin_mode = v.to_string(),
        "max-pods" => c.max_pods = parse_i32(name, v)?,
        "pod-cidr" => c.pod_cidr = v.to_string(),
        "pod-max-pids" => c.pod_pids_limit = parse_i64(name, v)?,
        "resolv-conf" => c.resolv_conf = v.to_string(),
        "runonce" => c.run_once = parse_flag_bool(name, v)?,
        "cpu-cfs-quota" => c.cpu_cfs_quota = parse_flag_bool(name, v)?,
        "cpu-cfs-quota-period" => c.cpu_cfs_quota_period = parse_dur(name, v)?,
        "enable-controller-attach-detach" => {
            c.enable_controller_attach_detach = parse_flag_bool(name, v)?
        }
        "make-iptables-util-chains" => c.make_iptables_util_chains = parse_flag_bool(name, v)?,
        "iptables-masquerade-bit" => c.iptables_masquerade_bit = parse_i32(name, v)?,
        "iptables-drop-bit" => c.iptables_drop_bit = parse_i32(name, v)?,
        "container-log-max-size" => c.container_log_max_size = v.to_string(),
        "container-log-max-files" => c.container_log_max_files = parse_i32(name, v)?,
        "container-log-max-workers" => c.container_log_max_workers = parse_i32(name, v)?,
        "container-log-monitor-interval" => c.container_log_monitor_interval = parse_dur(name, v)?,
        "allowed-unsafe-sysctls" => set_strings(&mut c.allowed_unsafe_sysctls, v, first),
        "node-status-max-images" => c.node_status_max_images = parse_i32(name, v)?,
        "kernel-memcg-notification" => c.kernel_memcg_notification = parse_flag_bool(name, v)?,
        "local-storage-capacity-isolation" => {
            c.local_storage_capacity_isolation = parse_flag_bool(name, v)?
        }
        "max-open-files" => c.max_open_files = parse_i64(name, v)?,
        "kube-api-content-type" => c.content_type = v.to_string(),
        "kube-api-qps" => c.kube_api_qps = parse_i32(name, v)?,
        "kube-api-burst" => c.kube_api_burst = parse_i32(name, v)?,
        "serialize-image-pulls" => c.serialize_image_pulls = parse_flag_bool(name, v)?,
        "eviction-hard" => set_map(&mut c.eviction_hard, name, v, '<', true, first)?,
        "eviction-soft" => set_map(&mut c.eviction_soft, name, v, '<', true, first)?,
        "eviction-soft-grace-period" => {
            set_map(&mut c.eviction_soft_grace_period, name, v, '=', true, first)?
        }
        "eviction-pressure-transition-period" => {
            c.eviction_pressure_transition_period = parse_dur(name, v)?
        }
        "eviction-max-pod-grace-period" => c.eviction_max_pod_grace_period = parse_i32(name, v)?,
        "eviction-minimum-reclaim" => {
            set_map(&mut c.eviction_minimum_reclaim, name, v, '=', true, first)?
        }
        "pods-per-core" => c.pods_per_core = parse_i32(name, v)?,
        "protect-kernel-defaults" => c.protect_kernel_defaults = parse_flag_bool(name, v)?,
        "reserved-cpus" => c.reserved_system_cpus = v.to_string(),
        "system-reserved" => set_map(&mut c.system_reserved, name, v, '=', true, first)?,
        "kube-reserved" => set_map(&mut c.kube_reserved, name, v, '=', true, first)?,
        "enforce-node-allocatable" => set_strings(&mut c.enforce_node_allocatable, v, first),
        "system-reserved-cgroup" => c.system_reserved_cgroup = v.to_string(),
        "kube-reserved-cgroup" => c.kube_reserved_cgroup = v.to_string(),
        "memory-manager-policy" => c.memory_manager_policy = v.to_string(),
        "reserved-memory" => {
            if first {
                c.reserved_memory.clear();
            }
            let r = parse_reserved_memory(v).map_err(|e| invalid(v, name, e))?;
            c.reserved_memory.push(r);
        }
        "register-node" => c.register_node = parse_flag_bool(name, v)?,
        "register-with-taints" => {
            c.register_with_taints = parse_taints(v).map_err(|e| invalid(v, name, e))?
        }
        "seccomp-default" => c.seccomp_default = parse_flag_bool(name, v)?,
        "logging-format" => c.logging.format = v.to_string(),
        "log-flush-frequency" => {
            c.logging.flush_frequency.duration = parse_dur(name, v)?;
            c.logging.flush_frequency.serialize_as_string = true;
        }
        "v" => {
            c.logging.verbosity = v
                .trim()
                .parse::<u32>()
                .map_err(|e| invalid(v, name, format!("strconv.ParseUint: parsing {v:?}: {e}")))?
        }
        "vmodule" => c.logging.vmodule = parse_vmodule(name, v)?,
        "log-json-split-stream" => c.logging.options.json.split_stream = parse_flag_bool(name, v)?,
        "log-text-split-stream" => c.logging.options.text.split_stream = parse_flag_bool(name, v)?,
        "log-json-info-buffer-size" | "log-text-info-buffer-size" => {
            parse_quantity(v).map_err(|e| invalid(v, name, e))?;
            let target = if name.starts_with("log-json") {
                &mut c.logging.options.json
            } else {
                &mut c.logging.options.text
            };
            target.info_buffer_size = v.to_string();
        }
        _ => return Err(format!("internal: flag --{name} has no handler")),
    }
    Ok(())
}

/// `--help` output in pflag's layout, flags sorted by name.
pub(crate) fn usage() -> String {
    let mut defs: Vec<&FlagDef> = FLAGS.iter().filter(|f| f.scope != Scope::Ignored).collect();
    defs.sort_by_key(|f| f.name);
    let lefts: Vec<String> = defs
        .iter()
        .map(|f| {
            let short = match f.short {
                Some(c) => format!("  -{c}, --{}", f.name),
                None => format!("      --{}", f.name),
            };
            if f.type_name.is_empty() {
                short
            } else {
                format!("{short} {}", f.type_name)
            }
        })
        .collect();
    let width = lefts.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    out.push_str(
        "The kubelet is the primary \"node agent\" that runs on each node. It can register the node \
with the apiserver using one of: the hostname; a flag to override the hostname; or specific logic \
for a cloud provider.\n\nThis implementation (kubelet-rs) accepts the upstream kubelet's flags and \
configuration file.\n\nUsage:\n  kubelet [flags]\n\nFlags:\n",
    );
    for (f, left) in defs.iter().zip(lefts) {
        let mut line = format!("{left:<width$}   {}", f.usage);
        if !f.default.is_empty() {
            let shown = match f.type_name {
                "string" | "ip" => format!("{:?}", f.default),
                _ => f.default.to_string(),
            };
            line.push_str(&format!(" (default {shown})"));
        }
        let notice = match (f.scope, f.deprecated) {
            (_, Some(msg)) => Some(msg),
            (Scope::Config, None) => Some(CONFIG_DEPRECATION),
            _ => None,
        };
        if let Some(msg) = notice {
            line.push_str(&format!(" (DEPRECATED: {msg})"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn toks(list: &[&str]) -> Vec<(String, String)> {
        match tokenize(&args(list)) {
            Ok(v) => v
                .into_iter()
                .map(|o| (o.def.name.to_string(), o.value))
                .collect(),
            Err(e) => panic!("tokenize {list:?}: {e}"),
        }
    }

    #[test]
    fn pflag_forms() {
        assert_eq!(
            toks(&[
                "--port=1",
                "--max-pods",
                "20",
                "--register-node",
                "--fail-swap-on=false"
            ]),
            vec![
                ("port".into(), "1".into()),
                ("max-pods".into(), "20".into()),
                ("register-node".into(), "true".into()),
                ("fail-swap-on".into(), "false".into()),
            ]
        );
        assert_eq!(toks(&["-v=2"]), vec![("v".into(), "2".into())]);
        assert_eq!(toks(&["-v", "3"]), vec![("v".into(), "3".into())]);
        assert_eq!(toks(&["-v4"]), vec![("v".into(), "4".into())]);
        assert_eq!(toks(&["--v=5"]), vec![("v".into(), "5".into())]);
        assert_eq!(
            toks(&["--node_ip=1.2.3.4"]),
            vec![("node-ip".into(), "1.2.3.4".into())]
        );
        assert_eq!(toks(&["-h"]), vec![("help".into(), "true".into())]);
        // A value flag takes the next word even if it looks like a flag.
        assert_eq!(
            toks(&["--cluster-domain", "--x"]),
            vec![("cluster-domain".into(), "--x".into())]
        );
        assert_eq!(
            toks(&["--cluster-domain="]),
            vec![("cluster-domain".into(), "".into())]
        );
    }

    #[test]
    fn tokenize_errors() {
        let err = |l: &[&str]| tokenize(&args(l)).err().unwrap_or_default();
        assert_eq!(err(&["--bogus-flag=1"]), "unknown flag: --bogus-flag");
        assert_eq!(err(&["-x"]), "unknown shorthand flag: 'x' in -x");
        assert_eq!(
            err(&["-config=/x"]),
            "unknown shorthand flag: 'c' in -config=/x"
        );
        assert_eq!(err(&["--port"]), "flag needs an argument: --port");
        assert_eq!(err(&["-v"]), "flag needs an argument: 'v' in -v");
        // Booleans never consume the next word, so it becomes a stray argument.
        assert_eq!(
            err(&["--register-node", "false"]),
            "unknown command \"false\""
        );
        assert_eq!(err(&["--", "run"]), "unknown command \"run\"");
    }

    #[test]
    fn value_parsers() {
        assert_eq!(parse_int("0x10", 32), Ok(16));
        assert_eq!(parse_int("-5", 32), Ok(-5));
        assert_eq!(parse_int("010", 32), Ok(8));
        assert!(parse_int("70000000000", 32).is_err());
        assert!(parse_int("abc", 32).is_err());
        assert_eq!(parse_bool("T"), Ok(true));
        assert!(parse_bool("yes").is_err());
        let t = parse_taints("a=b:NoSchedule,c:NoExecute").unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key, "a");
        assert_eq!(t[0].value.as_deref(), Some("b"));
        assert_eq!(t[1].value, None);
        assert_eq!(t[1].effect, "NoExecute");
        assert!(parse_taints("a=b:Sometimes").is_err());
        assert!(parse_taints("a=b").is_err());
        assert_eq!(parse_node_ips("10.0.0.1,fd00::1").map(|v| v.len()), Ok(2));
        assert!(parse_node_ips("10.0.0.1,10.0.0.2").is_err());
        assert!(parse_node_ips("nope").is_err());
        assert!(parse_node_ips("1.1.1.1,::1,2.2.2.2").is_err());
    }

    #[test]
    fn map_flags_replace_then_merge() {
        let mut c = KubeletConfiguration::defaulted();
        assert!(apply_config(&mut c, "eviction-hard", "memory.available<1Gi", true).is_ok());
        assert!(apply_config(&mut c, "eviction-hard", "nodefs.available<5%", false).is_ok());
        assert_eq!(c.eviction_hard.len(), 2);
        assert_eq!(c.eviction_hard["memory.available"], "1Gi");
        assert!(apply_config(&mut c, "eviction-hard", "memory.available=1Gi", true).is_err());
        c.feature_gates.insert("FromFile".into(), true);
        c.feature_gates.insert("Both".into(), true);
        assert!(apply_config(&mut c, "feature-gates", "Both=false,New=true", true).is_ok());
        assert_eq!(c.feature_gates.get("FromFile"), Some(&true));
        assert_eq!(c.feature_gates.get("Both"), Some(&false));
        assert_eq!(c.feature_gates.get("New"), Some(&true));
        assert!(apply_config(&mut c, "cluster-dns", "10.0.0.10,10.0.0.11", true).is_ok());
        assert!(apply_config(&mut c, "cluster-dns", "10.0.0.12", false).is_ok());
        assert_eq!(c.cluster_dns.len(), 3);
        assert!(apply_config(&mut c, "enforce-node-allocatable", "", true).is_ok());
        assert!(c.enforce_node_allocatable.is_empty());
        let e = apply_config(&mut c, "port", "http", true)
            .err()
            .unwrap_or_default();
        assert!(
            e.starts_with("invalid argument \"http\" for \"--port\" flag"),
            "{e}"
        );
    }

    #[test]
    fn every_flag_has_a_handler() {
        for f in FLAGS {
            let sample = match (f.arity, f.type_name) {
                (Arity::Bool, _) => "true",
                (_, "duration") => "1s",
                (_, "int32" | "int" | "Level") => "1",
                (_, "ip") => "1.2.3.4",
                (_, "mapStringBool") => "A=true",
                (_, "mapStringString") => "a=b",
                (_, "quantity") => "1Ki",
                _ => "x=1",
            };
            let sample = match f.name {
                "eviction-hard" | "eviction-soft" => "memory.available<1Gi",
                "register-with-taints" => "k=v:NoSchedule",
                "reserved-memory" => "0:memory=1Gi",
                "manifest-url-header" => "a:b",
                "node-ip" => "10.0.0.1",
                "vmodule" => "foo=2",
                _ => sample,
            };
            let res = match f.scope {
                Scope::Flag => apply_flag(&mut KubeletFlags::default(), f.name, sample),
                Scope::Config | Scope::ConfigKept => {
                    apply_config(&mut KubeletConfiguration::defaulted(), f.name, sample, true)
                }
                _ => Ok(()),
            };
            assert!(res.is_ok(), "--{} {sample}: {res:?}", f.name);
        }
    }

    #[test]
    fn no_duplicate_names() {
        let mut names: Vec<&str> = FLAGS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn usage_lists_flags_with_defaults() {
        let u = usage();
        assert!(u.contains("Usage:\n  kubelet [flags]"));
        assert!(u.contains("--root-dir string"));
        assert!(u.contains("(default \"/var/lib/kubelet\")"));
        assert!(u.contains("-v, --v Level"));
        assert!(u.contains("--max-pods int32"));
        assert!(u.contains("(default 110)"));
        assert!(!u.contains("--network-plugin"), "removed flags stay hidden");
    }
}
