//! Every flag the kubelet accepts, each declared once: name, help and setter together.

use super::values::{
    assign, bool_map, boolean, duration, header_map, int32, int64, ip, label_pairs, level,
    node_ips, optional_path, optional_text, path, quantity_text, reserved_memory, string_map,
    strings, taints, text, unsplit_string_map, vmodule,
};
use super::{Arity, FlagDef, Setter, ValueError};
use crate::config::{DEFAULT_CERT_DIR, DEFAULT_POD_INFRA_IMAGE, DEFAULT_ROOT_DIR, KubeletFlags};
use crate::config::{
    DEFAULT_CONTAINER_RUNTIME_ENDPOINT, DEFAULT_RESOLV_CONF, DEFAULT_VOLUME_PLUGIN_DIR,
    FlushFrequency, KubeletConfiguration,
};

/// Upstream deprecates every flag that sets a `KubeletConfiguration` field with this notice.
const CONFIG_DEPRECATION: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
const CADVISOR_DEPRECATION: &str = "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to legacy concerns, it will follow the standard CLI deprecation timeline before being removed.";

/// How a flag takes its value, and the type name `--help` shows for it.
struct Kind(Arity, &'static str);

const BOOL: Kind = Kind(Arity::Bool, "");
const STRING: Kind = Kind(Arity::Value, "string");
const STRINGS: Kind = Kind(Arity::Value, "strings");
const INT32: Kind = Kind(Arity::Value, "int32");
const INT: Kind = Kind(Arity::Value, "int");
const DURATION: Kind = Kind(Arity::Value, "duration");
const IP: Kind = Kind(Arity::Value, "ip");
const QUANTITY: Kind = Kind(Arity::Value, "quantity");
const MAP_STRING_STRING: Kind = Kind(Arity::Value, "mapStringString");
const MAP_STRING_BOOL: Kind = Kind(Arity::Value, "mapStringBool");
const HEADERS: Kind = Kind(Arity::Value, "colonSeparatedMultimapStringString");
const LEVEL: Kind = Kind(Arity::Value, "Level");
const MODULE_LEVELS: Kind = Kind(Arity::Value, "pattern=N,...");
const VERSION: Kind = Kind(Arity::Bool, "version[=true]");
/// Ignored flags show no type.
const ANY: Kind = Kind(Arity::Value, "");

type FlagsSetter = fn(&mut KubeletFlags, &str) -> Result<(), ValueError>;
type ConfigSetter = fn(&mut KubeletConfiguration, &str, bool) -> Result<(), ValueError>;

const fn def(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    usage: &'static str,
    deprecated: Option<&'static str>,
    setter: Setter,
) -> FlagDef {
    FlagDef {
        name,
        short: None,
        arity: kind.0,
        type_name: kind.1,
        default,
        usage,
        deprecated,
        setter,
    }
}

/// A setting that exists only as a flag.
const fn flag(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    usage: &'static str,
    set: FlagsSetter,
) -> FlagDef {
    def(name, kind, default, usage, None, Setter::Flags(set))
}

/// A flag that sets a `KubeletConfiguration` field, deprecated in favour of the file.
const fn config(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    usage: &'static str,
    set: ConfigSetter,
) -> FlagDef {
    def(
        name,
        kind,
        default,
        usage,
        Some(CONFIG_DEPRECATION),
        Setter::Config(set),
    )
}

/// A flag removed upstream: accepted, warned about, hidden from `--help`.
const fn ignored(name: &'static str, kind: Kind) -> FlagDef {
    def(name, kind, "", "", None, Setter::Ignored)
}

/// A cadvisor flag upstream still registers, deprecated, with no effect.
const fn cadvisor(name: &'static str, kind: Kind) -> FlagDef {
    def(
        name,
        kind,
        "",
        "",
        Some(CADVISOR_DEPRECATION),
        Setter::Ignored,
    )
}

impl FlagDef {
    const fn short(mut self, c: char) -> Self {
        self.short = Some(c);
        self
    }

    const fn deprecated(mut self, notice: &'static str) -> Self {
        self.deprecated = Some(notice);
        self
    }

    /// For the configuration flags upstream does not deprecate (the logging flags and
    /// `--provider-id`).
    const fn not_deprecated(mut self) -> Self {
        self.deprecated = None;
        self
    }
}

/// Every flag the kubelet accepts. Help output sorts by name.
pub(crate) static FLAGS: &[FlagDef] = &[
    def("help", BOOL, "", "help for kubelet", None, Setter::Help).short('h'),
    def(
        "version",
        VERSION,
        "",
        "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version",
        None,
        Setter::Version,
    ),
    // Settings kept only as flags (KubeletFlags).
    flag(
        "config",
        STRING,
        "",
        "The Kubelet will load its initial configuration from this file. The path may be absolute or relative; relative paths start at the Kubelet's current working directory. Omit this flag to use the built-in default configuration values. Command-line flags override configuration from this file.",
        |f, v| assign(&mut f.config_file, optional_path(v)),
    ),
    flag(
        "config-dir",
        STRING,
        "",
        "Path to a directory to specify drop-ins, allows the user to optionally specify additional configs to overwrite what is provided by default and in the KubeletConfigFile flag. [default='']",
        |f, v| assign(&mut f.config_dir, optional_path(v)),
    ),
    flag(
        "kubeconfig",
        STRING,
        "",
        "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode.",
        |f, v| assign(&mut f.kubeconfig, optional_path(v)),
    ),
    flag(
        "bootstrap-kubeconfig",
        STRING,
        "",
        "Path to a kubeconfig file that will be used to get client certificate for kubelet. If the file specified by --kubeconfig does not exist, the bootstrap kubeconfig is used to request a client certificate from the API server.",
        |f, v| assign(&mut f.bootstrap_kubeconfig, optional_path(v)),
    ),
    flag(
        "hostname-override",
        STRING,
        "",
        "If non-empty, will use this string as identification instead of the actual hostname.",
        |f, v| assign(&mut f.hostname_override, optional_text(v)),
    ),
    flag(
        "node-ip",
        STRING,
        "",
        "IP address (or comma-separated dual-stack IP addresses) of the node. If unset, kubelet will use the node's default IPv4 address, if any, or its default IPv6 address if it has no IPv4 addresses.",
        |f, v| assign(&mut f.node_ip, node_ips(v)),
    ),
    flag(
        "cert-dir",
        STRING,
        DEFAULT_CERT_DIR,
        "The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored.",
        |f, v| assign(&mut f.cert_dir, path(v)),
    ),
    flag(
        "cloud-provider",
        STRING,
        "",
        "The provider for cloud services. Set to empty string for running with no cloud provider. Set to 'external' for running with an external cloud provider.",
        |f, v| assign(&mut f.cloud_provider, text(v)),
    ),
    flag(
        "root-dir",
        STRING,
        DEFAULT_ROOT_DIR,
        "Directory path for managing kubelet files (volume mounts, etc).",
        |f, v| assign(&mut f.root_dir, path(v)),
    ),
    flag(
        "node-labels",
        MAP_STRING_STRING,
        "",
        "Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','.",
        |f, v| label_pairs(&mut f.node_labels, v),
    ),
    flag(
        "lock-file",
        STRING,
        "",
        "<Warning: Alpha feature> The path to file for kubelet to use as a lock file.",
        |f, v| assign(&mut f.lock_file, optional_path(v)),
    ),
    flag(
        "exit-on-lock-contention",
        BOOL,
        "",
        "Whether kubelet should exit upon lock-file contention.",
        |f, v| assign(&mut f.exit_on_lock_contention, boolean(v)),
    ),
    flag(
        "runtime-cgroups",
        STRING,
        "",
        "Optional absolute name of cgroups to create and run the runtime in.",
        |f, v| assign(&mut f.runtime_cgroups, text(v)),
    ),
    flag(
        "pod-infra-container-image",
        STRING,
        DEFAULT_POD_INFRA_IMAGE,
        "Specified image will not be pruned by the image garbage collector. CRI implementations have their own configuration to set this image.",
        |f, v| assign(&mut f.pod_infra_container_image, text(v)),
    )
    .deprecated("will be removed in 1.35. Image garbage collector will get sandbox image information from CRI."),
    flag(
        "image-credential-provider-config",
        STRING,
        "",
        "Path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; non-recursive search).",
        |f, v| assign(&mut f.image_credential_provider_config, optional_path(v)),
    ),
    flag(
        "image-credential-provider-bin-dir",
        STRING,
        "",
        "The path to the directory where credential provider plugin binaries are located.",
        |f, v| assign(&mut f.image_credential_provider_bin_dir, optional_path(v)),
    ),
    flag(
        "minimum-container-ttl-duration",
        DURATION,
        "",
        "Minimum age for a finished container before it is garbage collected. Examples: '300ms', '10s' or '2h45m'",
        |f, v| assign(&mut f.minimum_container_ttl_duration, duration(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "maximum-dead-containers-per-container",
        INT32,
        "1",
        "Maximum number of old instances to retain per container. Each container takes up some disk space.",
        |f, v| assign(&mut f.max_per_pod_container_count, int32(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "maximum-dead-containers",
        INT32,
        "-1",
        "Maximum number of old instances of containers to retain globally. Each container takes up some disk space. To disable, set to a negative number.",
        |f, v| assign(&mut f.max_container_count, int32(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "housekeeping-interval",
        DURATION,
        "10s",
        "Interval between container housekeepings",
        |f, v| assign(&mut f.housekeeping_interval, duration(v)),
    ),
    // KubeletConfiguration fields: upstream deprecates setting them by flag.
    config(
        "enable-server",
        BOOL,
        "true",
        "Enable the Kubelet's server",
        |c, v, _| assign(&mut c.enable_server, boolean(v)),
    ),
    config(
        "fail-swap-on",
        BOOL,
        "true",
        "Makes the Kubelet fail to start if swap is enabled on the node.",
        |c, v, _| assign(&mut c.fail_swap_on, boolean(v)),
    ),
    config(
        "fail-cgroupv1",
        BOOL,
        "",
        "Prevents the kubelet from starting on hosts that use cgroup v1.",
        |c, v, _| assign(&mut c.fail_cgroup_v1, boolean(v)),
    ),
    config(
        "pod-manifest-path",
        STRING,
        "",
        "Path to the directory containing static pod files to run, or the path to a single static pod file. Files starting with dots will be ignored.",
        |c, v, _| assign(&mut c.static_pod_path, text(v)),
    ),
    config(
        "sync-frequency",
        DURATION,
        "1m0s",
        "Max period between synchronizing running containers and config",
        |c, v, _| assign(&mut c.sync_frequency, duration(v)),
    ),
    config(
        "file-check-frequency",
        DURATION,
        "20s",
        "Duration between checking config files for new data",
        |c, v, _| assign(&mut c.file_check_frequency, duration(v)),
    ),
    config(
        "http-check-frequency",
        DURATION,
        "20s",
        "Duration between checking http for new data",
        |c, v, _| assign(&mut c.http_check_frequency, duration(v)),
    ),
    config(
        "manifest-url",
        STRING,
        "",
        "URL for accessing additional Pod specifications to run",
        |c, v, _| assign(&mut c.static_pod_url, text(v)),
    ),
    config(
        "manifest-url-header",
        HEADERS,
        "",
        "Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url. Multiple headers with the same name will be added in the same order provided.",
        |c, v, first| header_map(&mut c.static_pod_url_header, v, first),
    ),
    config(
        "address",
        IP,
        "0.0.0.0",
        "The IP address for the Kubelet to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)",
        |c, v, _| assign(&mut c.address, ip(v)),
    ),
    config(
        "port",
        INT32,
        "10250",
        "The port for the Kubelet to serve on.",
        |c, v, _| assign(&mut c.port, int32(v)),
    ),
    config(
        "read-only-port",
        INT32,
        "10255",
        "The read-only port for the Kubelet to serve on with no authentication/authorization (set to 0 to disable)",
        |c, v, _| assign(&mut c.read_only_port, int32(v)),
    ),
    config(
        "container-runtime-endpoint",
        STRING,
        DEFAULT_CONTAINER_RUNTIME_ENDPOINT,
        "The endpoint of container runtime service. Unix Domain Sockets are supported on Linux. Examples: 'unix:///path/to/runtime.sock'",
        |c, v, _| assign(&mut c.container_runtime_endpoint, text(v)),
    ),
    config(
        "image-service-endpoint",
        STRING,
        "",
        "The endpoint of container image service. If not specified, it will be the same with --container-runtime-endpoint by default.",
        |c, v, _| assign(&mut c.image_service_endpoint, text(v)),
    ),
    config(
        "anonymous-auth",
        BOOL,
        "true",
        "Enables anonymous requests to the Kubelet server. Requests that are not rejected by another authentication method are treated as anonymous requests.",
        |c, v, _| assign(&mut c.authentication.anonymous.enabled, boolean(v)),
    ),
    config(
        "authentication-token-webhook",
        BOOL,
        "",
        "Use the TokenReview API to determine authentication for bearer tokens.",
        |c, v, _| assign(&mut c.authentication.webhook.enabled, boolean(v)),
    ),
    config(
        "authentication-token-webhook-cache-ttl",
        DURATION,
        "2m0s",
        "The duration to cache responses from the webhook token authenticator.",
        |c, v, _| assign(&mut c.authentication.webhook.cache_ttl, duration(v)),
    ),
    config(
        "client-ca-file",
        STRING,
        "",
        "If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate.",
        |c, v, _| assign(&mut c.authentication.x509.client_ca_file, text(v)),
    ),
    config(
        "authorization-mode",
        STRING,
        "AlwaysAllow",
        "Authorization mode for Kubelet server. Valid options are AlwaysAllow or Webhook. Webhook mode uses the SubjectAccessReview API to determine authorization.",
        |c, v, _| assign(&mut c.authorization.mode, text(v)),
    ),
    config(
        "authorization-webhook-cache-authorized-ttl",
        DURATION,
        "5m0s",
        "The duration to cache 'authorized' responses from the webhook authorizer.",
        |c, v, _| assign(&mut c.authorization.webhook.cache_authorized_ttl, duration(v)),
    ),
    config(
        "authorization-webhook-cache-unauthorized-ttl",
        DURATION,
        "30s",
        "The duration to cache 'unauthorized' responses from the webhook authorizer.",
        |c, v, _| assign(&mut c.authorization.webhook.cache_unauthorized_ttl, duration(v)),
    ),
    config(
        "tls-cert-file",
        STRING,
        "",
        "File containing x509 Certificate used for serving HTTPS (with intermediate certs, if any, concatenated after server cert).",
        |c, v, _| assign(&mut c.tls_cert_file, text(v)),
    ),
    config(
        "tls-private-key-file",
        STRING,
        "",
        "File containing x509 private key matching --tls-cert-file.",
        |c, v, _| assign(&mut c.tls_private_key_file, text(v)),
    ),
    config(
        "rotate-server-certificates",
        BOOL,
        "",
        "Auto-request and rotate the kubelet serving certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.",
        |c, v, _| assign(&mut c.server_tls_bootstrap, boolean(v)),
    ),
    config(
        "tls-cipher-suites",
        STRINGS,
        "",
        "Comma-separated list of cipher suites for the server. If omitted, the default cipher suites will be used.",
        |c, v, first| strings(&mut c.tls_cipher_suites, v, first),
    ),
    config(
        "tls-min-version",
        STRING,
        "",
        "Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
        |c, v, _| assign(&mut c.tls_min_version, text(v)),
    ),
    config(
        "rotate-certificates",
        BOOL,
        "",
        "Auto rotate the kubelet client certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.",
        |c, v, _| assign(&mut c.rotate_certificates, boolean(v)),
    ),
    config(
        "registry-qps",
        INT32,
        "5",
        "If > 0, limit registry pull QPS to this value. If 0, unlimited.",
        |c, v, _| assign(&mut c.registry_pull_qps, int32(v)),
    ),
    config(
        "registry-burst",
        INT32,
        "10",
        "Maximum size of a bursty pulls, temporarily allows pulls to burst to this number, while still not exceeding registry-qps. Only used if --registry-qps > 0",
        |c, v, _| assign(&mut c.registry_burst, int32(v)),
    ),
    config(
        "event-qps",
        INT32,
        "50",
        "QPS to limit event creations. The number must be >= 0. If 0 will use DefaultQPS: 5.",
        |c, v, _| assign(&mut c.event_record_qps, int32(v)),
    ),
    config(
        "event-burst",
        INT32,
        "100",
        "Maximum size of a bursty event records, temporarily allows event records to burst to this number, while still not exceeding event-qps.",
        |c, v, _| assign(&mut c.event_burst, int32(v)),
    ),
    config(
        "enable-debugging-handlers",
        BOOL,
        "true",
        "Enables server endpoints for log collection and local running of containers and commands",
        |c, v, _| assign(&mut c.enable_debugging_handlers, boolean(v)),
    ),
    config(
        "contention-profiling",
        BOOL,
        "",
        "Enable block profiling, if profiling is enabled",
        |c, v, _| assign(&mut c.enable_contention_profiling, boolean(v)),
    ),
    config(
        "healthz-port",
        INT32,
        "10248",
        "The port of the localhost healthz endpoint (set to 0 to disable)",
        |c, v, _| assign(&mut c.healthz_port, int32(v)),
    ),
    config(
        "healthz-bind-address",
        IP,
        "127.0.0.1",
        "The IP address for the healthz server to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)",
        |c, v, _| assign(&mut c.healthz_bind_address, ip(v)),
    ),
    config(
        "oom-score-adj",
        INT32,
        "-999",
        "The oom-score-adj value for kubelet process. Values must be within the range [-1000, 1000]",
        |c, v, _| assign(&mut c.oom_score_adj, int32(v)),
    ),
    config(
        "cluster-domain",
        STRING,
        "",
        "Domain for this cluster. If set, kubelet will configure all containers to search this domain in addition to the host's search domains",
        |c, v, _| assign(&mut c.cluster_domain, text(v)),
    ),
    config(
        "volume-plugin-dir",
        STRING,
        DEFAULT_VOLUME_PLUGIN_DIR,
        "The full path of the directory in which to search for additional third party volume plugins",
        |c, v, _| assign(&mut c.volume_plugin_dir, text(v)),
    ),
    config(
        "cluster-dns",
        STRINGS,
        "",
        "Comma-separated list of DNS server IP address. This value is used for containers DNS server in case of Pods with \"dnsPolicy=ClusterFirst\".",
        |c, v, first| strings(&mut c.cluster_dns, v, first),
    ),
    config(
        "streaming-connection-idle-timeout",
        DURATION,
        "4h0m0s",
        "Maximum time a streaming connection can be idle before the connection is automatically closed. 0 indicates no timeout. Example: '5m'.",
        |c, v, _| assign(&mut c.streaming_connection_idle_timeout, duration(v)),
    ),
    config(
        "node-status-update-frequency",
        DURATION,
        "10s",
        "Specifies how often kubelet posts node status to master.",
        |c, v, _| assign(&mut c.node_status_update_frequency, duration(v)),
    ),
    config(
        "minimum-image-ttl-duration",
        DURATION,
        "2m0s",
        "Minimum age for an unused image before it is garbage collected. Examples: '300ms', '10s' or '2h45m'.",
        |c, v, _| assign(&mut c.image_minimum_gc_age, duration(v)),
    ),
    config(
        "image-gc-high-threshold",
        INT32,
        "85",
        "The percent of disk usage after which image garbage collection is always run. Values must be within the range [0, 100], To disable image garbage collection, set to 100.",
        |c, v, _| assign(&mut c.image_gc_high_threshold_percent, int32(v)),
    ),
    config(
        "image-gc-low-threshold",
        INT32,
        "80",
        "The percent of disk usage before which image garbage collection is never run. Lowest disk usage to garbage collect to. Values must be within the range [0, 100] and should not be larger than that of --image-gc-high-threshold.",
        |c, v, _| assign(&mut c.image_gc_low_threshold_percent, int32(v)),
    ),
    config(
        "volume-stats-agg-period",
        DURATION,
        "1m0s",
        "Specifies interval for kubelet to calculate and cache the volume disk usage for all pods and volumes.",
        |c, v, _| assign(&mut c.volume_stats_agg_period, duration(v)),
    ),
    config(
        "feature-gates",
        MAP_STRING_BOOL,
        "",
        "A set of key=value pairs that describe feature gates for alpha/experimental features.",
        // Flag gates merge key by key over the file's gates, flag values winning.
        |c, v, _| bool_map(&mut c.feature_gates, v),
    ),
    config(
        "kubelet-cgroups",
        STRING,
        "",
        "Optional absolute name of cgroups to create and run the Kubelet in.",
        |c, v, _| assign(&mut c.kubelet_cgroups, text(v)),
    ),
    config(
        "system-cgroups",
        STRING,
        "",
        "Optional absolute name of cgroups in which to place all non-kernel processes that are not already inside a cgroup under '/'. Empty for no container. Rolling back the flag requires a reboot.",
        |c, v, _| assign(&mut c.system_cgroups, text(v)),
    ),
    config(
        "provider-id",
        STRING,
        "",
        "Unique identifier for identifying the node in a machine database, i.e cloudprovider",
        |c, v, _| assign(&mut c.provider_id, text(v)),
    )
    .not_deprecated(),
    config(
        "cgroups-per-qos",
        BOOL,
        "true",
        "Enable creation of QoS cgroup hierarchy, if true top level QoS and pod cgroups are created.",
        |c, v, _| assign(&mut c.cgroups_per_qos, boolean(v)),
    ),
    config(
        "cgroup-driver",
        STRING,
        "cgroupfs",
        "Driver that the kubelet uses to manipulate cgroups on the host. Possible values: 'cgroupfs', 'systemd'",
        |c, v, _| assign(&mut c.cgroup_driver, text(v)),
    ),
    config(
        "cgroup-root",
        STRING,
        "",
        "Optional root cgroup to use for pods. This is handled by the container runtime on a best effort basis. Default: '', which means use the container runtime default.",
        |c, v, _| assign(&mut c.cgroup_root, text(v)),
    ),
    config(
        "cpu-manager-policy",
        STRING,
        "none",
        "CPU Manager policy to use. Possible values: 'none', 'static'.",
        |c, v, _| assign(&mut c.cpu_manager_policy, text(v)),
    ),
    config(
        "cpu-manager-policy-options",
        MAP_STRING_STRING,
        "",
        "A set of key=value CPU Manager policy options to use, to fine tune their behaviour.",
        |c, v, first| unsplit_string_map(&mut c.cpu_manager_policy_options, v, first),
    ),
    config(
        "cpu-manager-reconcile-period",
        DURATION,
        "10s",
        "<Warning: Alpha feature> CPU Manager reconciliation period. Examples: '10s', or '1m'.",
        |c, v, _| assign(&mut c.cpu_manager_reconcile_period, duration(v)),
    ),
    config(
        "qos-reserved",
        MAP_STRING_STRING,
        "",
        "<Warning: Alpha feature> A set of ResourceName=Percentage (e.g. memory=50%) pairs that describe how pod resource requests are reserved at the QoS level.",
        |c, v, first| string_map(&mut c.qos_reserved, v, '=', first),
    ),
    config(
        "topology-manager-policy",
        STRING,
        "none",
        "Topology Manager policy to use. Possible values: 'none', 'best-effort', 'restricted', 'single-numa-node'.",
        |c, v, _| assign(&mut c.topology_manager_policy, text(v)),
    ),
    config(
        "topology-manager-scope",
        STRING,
        "container",
        "Scope to which topology hints applied. Possible values: 'container', 'pod'.",
        |c, v, _| assign(&mut c.topology_manager_scope, text(v)),
    ),
    config(
        "topology-manager-policy-options",
        MAP_STRING_STRING,
        "",
        "A set of key=value Topology Manager policy options to use, to fine tune their behaviour.",
        |c, v, first| unsplit_string_map(&mut c.topology_manager_policy_options, v, first),
    ),
    config(
        "runtime-request-timeout",
        DURATION,
        "2m0s",
        "Timeout of all runtime requests except long running request - pull, logs, exec and attach. When timeout exceeded, kubelet will cancel the request, throw out an error and retry later.",
        |c, v, _| assign(&mut c.runtime_request_timeout, duration(v)),
    ),
    config(
        "hairpin-mode",
        STRING,
        "promiscuous-bridge",
        "How should the kubelet setup hairpin NAT. Valid values are \"promiscuous-bridge\", \"hairpin-veth\" and \"none\".",
        |c, v, _| assign(&mut c.hairpin_mode, text(v)),
    ),
    config(
        "max-pods",
        INT32,
        "110",
        "Number of Pods that can run on this Kubelet.",
        |c, v, _| assign(&mut c.max_pods, int32(v)),
    ),
    config(
        "pod-cidr",
        STRING,
        "",
        "The CIDR to use for pod IP addresses, only used in standalone mode. In cluster mode, this is obtained from the control plane.",
        |c, v, _| assign(&mut c.pod_cidr, text(v)),
    ),
    config(
        "pod-max-pids",
        INT,
        "-1",
        "Set the maximum number of processes per pod. If -1, the kubelet defaults to the node allocatable pid capacity.",
        |c, v, _| assign(&mut c.pod_pids_limit, int64(v)),
    ),
    config(
        "resolv-conf",
        STRING,
        DEFAULT_RESOLV_CONF,
        "Resolver configuration file used as the basis for the container DNS resolution configuration.",
        |c, v, _| assign(&mut c.resolv_conf, text(v)),
    ),
    config(
        "runonce",
        BOOL,
        "",
        "If true, exit after spawning pods from static pod files or remote urls. Exclusive with --enable-server",
        |c, v, _| assign(&mut c.run_once, boolean(v)),
    ),
    config(
        "cpu-cfs-quota",
        BOOL,
        "true",
        "Enable CPU CFS quota enforcement for containers that specify CPU limits",
        |c, v, _| assign(&mut c.cpu_cfs_quota, boolean(v)),
    ),
    config(
        "cpu-cfs-quota-period",
        DURATION,
        "100ms",
        "Sets CPU CFS quota period value, cpu.cfs_period_us, defaults to Linux Kernel default",
        |c, v, _| assign(&mut c.cpu_cfs_quota_period, duration(v)),
    ),
    config(
        "enable-controller-attach-detach",
        BOOL,
        "true",
        "Enables the Attach/Detach controller to manage attachment/detachment of volumes scheduled to this node, and disables kubelet from executing any attach/detach operations",
        |c, v, _| assign(&mut c.enable_controller_attach_detach, boolean(v)),
    ),
    config(
        "make-iptables-util-chains",
        BOOL,
        "true",
        "If true, kubelet will ensure iptables utility rules are present on host.",
        |c, v, _| assign(&mut c.make_iptables_util_chains, boolean(v)),
    ),
    config(
        "iptables-masquerade-bit",
        INT32,
        "14",
        "Has no effect; use kube-proxy parameters to configure the KUBE-MARK-MASQ chain.",
        |c, v, _| assign(&mut c.iptables_masquerade_bit, int32(v)),
    )
    .deprecated("This flag has no effect and will be removed in a future version."),
    config(
        "iptables-drop-bit",
        INT32,
        "15",
        "Has no effect; kubelet no longer creates a KUBE-MARK-DROP chain",
        |c, v, _| assign(&mut c.iptables_drop_bit, int32(v)),
    )
    .deprecated("This flag has no effect and will be removed in a future version."),
    config(
        "container-log-max-size",
        STRING,
        "10Mi",
        "Set the maximum size (e.g. 10Mi) of container log file before it is rotated.",
        |c, v, _| assign(&mut c.container_log_max_size, text(v)),
    ),
    config(
        "container-log-max-files",
        INT32,
        "5",
        "Set the maximum number of container log files that can be present for a container. The number must be >= 2.",
        |c, v, _| assign(&mut c.container_log_max_files, int32(v)),
    ),
    config(
        "container-log-max-workers",
        INT32,
        "1",
        "Set the maximum number of concurrent workers for log rotation.",
        |c, v, _| assign(&mut c.container_log_max_workers, int32(v)),
    ),
    config(
        "container-log-monitor-interval",
        DURATION,
        "10s",
        "Set the duration at which the container logs are monitored for rotation.",
        |c, v, _| assign(&mut c.container_log_monitor_interval, duration(v)),
    ),
    config(
        "allowed-unsafe-sysctls",
        STRINGS,
        "",
        "Comma-separated whitelist of unsafe sysctls or unsafe sysctl patterns (ending in *). Use these at your own risk.",
        |c, v, first| strings(&mut c.allowed_unsafe_sysctls, v, first),
    ),
    config(
        "node-status-max-images",
        INT32,
        "50",
        "The maximum number of images to report in Node.Status.Images. If -1 is specified, no cap will be applied.",
        |c, v, _| assign(&mut c.node_status_max_images, int32(v)),
    ),
    config(
        "kernel-memcg-notification",
        BOOL,
        "",
        "If enabled, the kubelet will integrate with the kernel memcg notification to determine if memory eviction thresholds are crossed rather than polling.",
        |c, v, _| assign(&mut c.kernel_memcg_notification, boolean(v)),
    ),
    config(
        "local-storage-capacity-isolation",
        BOOL,
        "true",
        "If true, local ephemeral storage isolation is enabled. Otherwise, local storage isolation feature will be disabled",
        |c, v, _| assign(&mut c.local_storage_capacity_isolation, boolean(v)),
    ),
    config(
        "max-open-files",
        INT,
        "1000000",
        "Number of files that can be opened by Kubelet process.",
        |c, v, _| assign(&mut c.max_open_files, int64(v)),
    ),
    config(
        "kube-api-content-type",
        STRING,
        "application/vnd.kubernetes.protobuf",
        "Content type of requests sent to apiserver.",
        |c, v, _| assign(&mut c.content_type, text(v)),
    ),
    config(
        "kube-api-qps",
        INT32,
        "50",
        "QPS to use while talking with kubernetes apiserver. The number must be >= 0.",
        |c, v, _| assign(&mut c.kube_api_qps, int32(v)),
    ),
    config(
        "kube-api-burst",
        INT32,
        "100",
        "Burst to use while talking with kubernetes apiserver. The number must be >= 0.",
        |c, v, _| assign(&mut c.kube_api_burst, int32(v)),
    ),
    config(
        "serialize-image-pulls",
        BOOL,
        "true",
        "Pull images one at a time.",
        |c, v, _| assign(&mut c.serialize_image_pulls, boolean(v)),
    ),
    config(
        "eviction-hard",
        MAP_STRING_STRING,
        "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
        "A set of eviction thresholds (e.g. memory.available<1Gi) that if met would trigger a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_hard, v, '<', first),
    ),
    config(
        "eviction-soft",
        MAP_STRING_STRING,
        "",
        "A set of eviction thresholds (e.g. memory.available<1.5Gi) that if met over a corresponding grace period would trigger a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_soft, v, '<', first),
    ),
    config(
        "eviction-soft-grace-period",
        MAP_STRING_STRING,
        "",
        "A set of eviction grace periods (e.g. memory.available=1m30s) that correspond to how long a soft eviction threshold must hold before triggering a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_soft_grace_period, v, '=', first),
    ),
    config(
        "eviction-pressure-transition-period",
        DURATION,
        "5m0s",
        "Duration for which the kubelet has to wait before transitioning out of an eviction pressure condition.",
        |c, v, _| assign(&mut c.eviction_pressure_transition_period, duration(v)),
    ),
    config(
        "eviction-max-pod-grace-period",
        INT32,
        "",
        "Maximum allowed grace period (in seconds) to use when terminating pods in response to a soft eviction threshold being met. If negative, defer to pod specified value.",
        |c, v, _| assign(&mut c.eviction_max_pod_grace_period, int32(v)),
    ),
    config(
        "eviction-minimum-reclaim",
        MAP_STRING_STRING,
        "",
        "A set of minimum reclaims (e.g. imagefs.available=2Gi) that describes the minimum amount of resource the kubelet will reclaim when performing a pod eviction if that resource is under pressure.",
        |c, v, first| string_map(&mut c.eviction_minimum_reclaim, v, '=', first),
    ),
    config(
        "pods-per-core",
        INT32,
        "",
        "Number of Pods per core that can run on this Kubelet. A value of 0 disables this limit.",
        |c, v, _| assign(&mut c.pods_per_core, int32(v)),
    ),
    config(
        "protect-kernel-defaults",
        BOOL,
        "",
        "Default kubelet behaviour for kernel tuning. If set, kubelet errors if any of kernel tunables is different than kubelet defaults.",
        |c, v, _| assign(&mut c.protect_kernel_defaults, boolean(v)),
    ),
    config(
        "reserved-cpus",
        STRING,
        "",
        "A comma-separated list of CPUs or CPU ranges that are reserved for system and kubernetes usage.",
        |c, v, _| assign(&mut c.reserved_system_cpus, text(v)),
    ),
    config(
        "system-reserved",
        MAP_STRING_STRING,
        "",
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for non-kubernetes components. [default=none]",
        |c, v, first| string_map(&mut c.system_reserved, v, '=', first),
    ),
    config(
        "kube-reserved",
        MAP_STRING_STRING,
        "",
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for kubernetes system components. [default=none]",
        |c, v, first| string_map(&mut c.kube_reserved, v, '=', first),
    ),
    config(
        "enforce-node-allocatable",
        STRINGS,
        "[pods]",
        "A comma separated list of levels of node allocatable enforcement to be enforced by kubelet. Acceptable options are 'none', 'pods', 'system-reserved', and 'kube-reserved'.",
        |c, v, first| strings(&mut c.enforce_node_allocatable, v, first),
    ),
    config(
        "system-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top level cgroup that is used to manage non-kubernetes components for which compute resources were reserved via '--system-reserved' flag. [default='']",
        |c, v, _| assign(&mut c.system_reserved_cgroup, text(v)),
    ),
    config(
        "kube-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top level cgroup that is used to manage kubernetes components for which compute resources were reserved via '--kube-reserved' flag. [default='']",
        |c, v, _| assign(&mut c.kube_reserved_cgroup, text(v)),
    ),
    config(
        "memory-manager-policy",
        STRING,
        "None",
        "Memory Manager policy to use. Possible values: 'None', 'Static'.",
        |c, v, _| assign(&mut c.memory_manager_policy, text(v)),
    ),
    config(
        "reserved-memory",
        STRING,
        "",
        "A comma separated list of memory reservations for NUMA nodes. (e.g. --reserved-memory 0:memory=1Gi,hugepages-1M=2Gi --reserved-memory 1:memory=2Gi).",
        |c, v, first| {
            if first {
                c.reserved_memory.clear();
            }
            c.reserved_memory.push(reserved_memory(v)?);
            Ok(())
        },
    ),
    config(
        "register-node",
        BOOL,
        "true",
        "Register the node with the apiserver. If --kubeconfig is not provided, this flag is irrelevant, as the Kubelet won't have an apiserver to register with.",
        |c, v, _| assign(&mut c.register_node, boolean(v)),
    ),
    config(
        "register-with-taints",
        STRING,
        "",
        "Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\"). No-op if register-node is false.",
        |c, v, _| assign(&mut c.register_with_taints, taints(v)),
    ),
    config(
        "seccomp-default",
        BOOL,
        "",
        "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.",
        |c, v, _| assign(&mut c.seccomp_default, boolean(v)),
    ),
    config(
        "logging-format",
        STRING,
        "text",
        "Sets the log format. Permitted formats: \"json\" (gated by LoggingBetaOptions), \"text\".",
        |c, v, _| assign(&mut c.logging.format, text(v)),
    ),
    config(
        "log-flush-frequency",
        DURATION,
        "5s",
        "Maximum number of seconds between log flushes",
        |c, v, _| {
            let duration = duration(v)?;
            c.logging.flush_frequency = FlushFrequency {
                duration,
                serialize_as_string: true,
            };
            Ok(())
        },
    )
    .not_deprecated(),
    config(
        "v",
        LEVEL,
        "",
        "number for the log level verbosity",
        |c, v, _| assign(&mut c.logging.verbosity, level(v)),
    )
    .not_deprecated()
    .short('v'),
    config(
        "vmodule",
        MODULE_LEVELS,
        "",
        "comma-separated list of pattern=N settings for file-filtered logging (only works for text log format)",
        |c, v, _| assign(&mut c.logging.vmodule, vmodule(v)),
    )
    .not_deprecated(),
    config(
        "log-json-split-stream",
        BOOL,
        "",
        "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.",
        |c, v, _| assign(&mut c.logging.options.json.split_stream, boolean(v)),
    ),
    config(
        "log-json-info-buffer-size",
        QUANTITY,
        "",
        "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance.",
        |c, v, _| assign(&mut c.logging.options.json.info_buffer_size, quantity_text(v)),
    ),
    config(
        "log-text-split-stream",
        BOOL,
        "",
        "[Alpha] In text format, write error messages to stderr and info messages to stdout.",
        |c, v, _| assign(&mut c.logging.options.text.split_stream, boolean(v)),
    ),
    config(
        "log-text-info-buffer-size",
        QUANTITY,
        "",
        "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance.",
        |c, v, _| assign(&mut c.logging.options.text.info_buffer_size, quantity_text(v)),
    ),
    // cadvisor leftovers: deprecated upstream, no effect here.
    cadvisor("application-metrics-count-limit", INT),
    cadvisor("boot-id-file", STRING),
    cadvisor("container-hints", STRING),
    cadvisor("containerd", STRING),
    cadvisor("containerd-namespace", STRING),
    cadvisor("enable-load-reader", BOOL),
    cadvisor("event-storage-age-limit", STRING),
    cadvisor("event-storage-event-limit", STRING),
    cadvisor("global-housekeeping-interval", DURATION),
    cadvisor("log-cadvisor-usage", BOOL),
    cadvisor("machine-id-file", STRING),
    cadvisor("storage-driver-user", STRING),
    cadvisor("storage-driver-password", STRING),
    cadvisor("storage-driver-host", STRING),
    cadvisor("storage-driver-db", STRING),
    cadvisor("storage-driver-table", STRING),
    cadvisor("storage-driver-secure", BOOL),
    cadvisor("storage-driver-buffer-duration", DURATION),
    // Removed upstream over the years; old unit files and kubeadm flag files still pass them.
    ignored("container-runtime", ANY),
    ignored("network-plugin", ANY),
    ignored("network-plugin-dir", ANY),
    ignored("network-plugin-mtu", ANY),
    ignored("cni-bin-dir", ANY),
    ignored("cni-conf-dir", ANY),
    ignored("cni-cache-dir", ANY),
    ignored("docker-endpoint", ANY),
    ignored("docker", ANY),
    ignored("docker-root", ANY),
    ignored("docker-env-metadata-whitelist", ANY),
    ignored("docker-only", BOOL),
    ignored("docker-disable-shared-pid", BOOL),
    ignored("image-pull-progress-deadline", ANY),
    ignored("experimental-dockershim", BOOL),
    ignored("experimental-dockershim-root-directory", ANY),
    ignored("dockershim-root-directory", ANY),
    ignored("redirect-container-streaming", BOOL),
    ignored("allow-privileged", BOOL),
    ignored("cadvisor-port", ANY),
    ignored("enable-cadvisor-json-endpoints", BOOL),
    ignored("non-masquerade-cidr", ANY),
    ignored("master-service-namespace", ANY),
    ignored("cloud-config", ANY),
    ignored("azure-container-registry-config", ANY),
    ignored("experimental-mounter-path", ANY),
    ignored("experimental-bootstrap-kubeconfig", ANY),
    ignored("experimental-allocatable-ignore-eviction", BOOL),
    ignored("experimental-check-node-capabilities-before-mount", BOOL),
    ignored("experimental-kernel-memcg-notification", BOOL),
    ignored("experimental-fail-swap-on", BOOL),
    ignored("experimental-qos-reserved", ANY),
    ignored("experimental-allowed-unsafe-sysctls", ANY),
    ignored("keep-terminated-pod-volumes", BOOL),
    ignored("register-schedulable", BOOL),
    ignored("require-kubeconfig", BOOL),
    ignored("api-servers", ANY),
    ignored("auth-path", ANY),
    ignored("low-diskspace-threshold-mb", ANY),
    ignored("host-network-sources", ANY),
    ignored("host-pid-sources", ANY),
    ignored("host-ipc-sources", ANY),
    ignored("seccomp-profile-root", ANY),
    ignored("dynamic-config-dir", ANY),
    ignored("enable-custom-metrics", BOOL),
    ignored("really-crash-for-testing", BOOL),
    ignored("chaos-chance", ANY),
    ignored("resource-container", ANY),
    ignored("system-container", ANY),
    ignored("rkt-path", ANY),
    ignored("rkt-api-endpoint", ANY),
    ignored("rkt-stage1-image", ANY),
    ignored("lock-file-path", ANY),
    ignored("logtostderr", BOOL),
    ignored("alsologtostderr", BOOL),
    ignored("log-dir", ANY),
    ignored("log-file", ANY),
    ignored("log-file-max-size", ANY),
    ignored("log-backtrace-at", ANY),
    ignored("stderrthreshold", ANY),
    ignored("skip-headers", BOOL),
    ignored("skip-log-headers", BOOL),
    ignored("one-output", BOOL),
    ignored("add-dir-header", BOOL),
];

/// pflag's word-separator normalisation: `--node_ip` is `--node-ip`.
fn normalize(name: &str) -> String {
    name.replace('_', "-")
}

pub(crate) fn lookup(name: &str) -> Option<&'static FlagDef> {
    let n = normalize(name);
    FLAGS.iter().find(|f| f.name == n)
}

pub(crate) fn lookup_short(c: char) -> Option<&'static FlagDef> {
    FLAGS.iter().find(|f| f.short == Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a configuration flag's setter as the command line would.
    fn apply_config(
        c: &mut KubeletConfiguration,
        name: &str,
        v: &str,
        first: bool,
    ) -> Result<(), String> {
        let def = lookup(name).ok_or_else(|| format!("no flag --{name}"))?;
        let Setter::Config(set) = def.setter else {
            return Err(format!("--{name} is not a configuration flag"));
        };
        set(c, v, first).map_err(|reason| {
            super::super::FlagError::InvalidValue {
                flag: def.name,
                value: v.to_string(),
                reason,
            }
            .to_string()
        })
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

    /// Each setter accepts a typical value of the type its help names.
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
            let res = match f.setter {
                Setter::Flags(set) => set(&mut KubeletFlags::default(), sample),
                Setter::Config(set) => set(&mut KubeletConfiguration::defaulted(), sample, true),
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
}
