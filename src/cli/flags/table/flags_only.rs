//! The flags that are not KubeletConfiguration fields (upstream's `KubeletFlags`), with
//! `--help` and `--version`.

use super::*;

pub(super) static FLAGS_ONLY: &[FlagDef] = &[
    def("help", BOOL, NONE, "help for kubelet", None, Setter::Help).short('h'),
    def(
        "version",
        VERSION,
        NONE,
        "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version",
        None,
        Setter::Version,
    ),
    flag(
        "config",
        STRING,
        NONE,
        "The Kubelet will load its initial configuration from this file. The path may be absolute or relative; relative paths start at the Kubelet's current working directory. Omit this flag to use the built-in default configuration values. Command-line flags override configuration from this file.",
        |f, v| assign(&mut f.config_file, optional_path(v)),
    ),
    flag(
        "config-dir",
        STRING,
        NONE,
        "Path to a directory to specify drop-ins, allows the user to optionally specify additional configs to overwrite what is provided by default and in the KubeletConfigFile flag. [default='']",
        |f, v| assign(&mut f.config_dir, optional_path(v)),
    ),
    flag(
        "kubeconfig",
        STRING,
        NONE,
        "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode.",
        |f, v| assign(&mut f.kubeconfig, optional_path(v)),
    ),
    flag(
        "bootstrap-kubeconfig",
        STRING,
        NONE,
        "Path to a kubeconfig file that will be used to get client certificate for kubelet. If the file specified by --kubeconfig does not exist, the bootstrap kubeconfig is used to request a client certificate from the API server.",
        |f, v| assign(&mut f.bootstrap_kubeconfig, optional_path(v)),
    ),
    flag(
        "hostname-override",
        STRING,
        NONE,
        "If non-empty, will use this string as identification instead of the actual hostname.",
        |f, v| assign(&mut f.hostname_override, optional_text(v)),
    ),
    flag(
        "node-ip",
        STRING,
        NONE,
        "IP address (or comma-separated dual-stack IP addresses) of the node. If unset, kubelet will use the node's default IPv4 address, if any, or its default IPv6 address if it has no IPv4 addresses.",
        |f, v| assign(&mut f.node_ip, node_ips(v)),
    ),
    flag(
        "cert-dir",
        STRING,
        flags_default(|f| f.cert_dir.shown()),
        "The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored.",
        |f, v| assign(&mut f.cert_dir, path(v)),
    ),
    flag(
        "cloud-provider",
        STRING,
        NONE,
        "The provider for cloud services. Set to empty string for running with no cloud provider. Set to 'external' for running with an external cloud provider.",
        |f, v| assign(&mut f.cloud_provider, text(v)),
    ),
    flag(
        "root-dir",
        STRING,
        flags_default(|f| f.root_dir.shown()),
        "Directory path for managing kubelet files (volume mounts, etc).",
        |f, v| assign(&mut f.root_dir, path(v)),
    ),
    flag(
        "node-labels",
        MAP_STRING_STRING,
        NONE,
        "Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','.",
        |f, v| label_pairs(&mut f.node_labels, v),
    ),
    flag(
        "lock-file",
        STRING,
        NONE,
        "<Warning: Alpha feature> The path to file for kubelet to use as a lock file.",
        |f, v| assign(&mut f.lock_file, optional_path(v)),
    ),
    flag(
        "exit-on-lock-contention",
        BOOL,
        NONE,
        "Whether kubelet should exit upon lock-file contention.",
        |f, v| assign(&mut f.exit_on_lock_contention, boolean(v)),
    ),
    flag(
        "runtime-cgroups",
        STRING,
        NONE,
        "Optional absolute name of cgroups to create and run the runtime in.",
        |f, v| assign(&mut f.runtime_cgroups, text(v)),
    ),
    flag(
        "pod-infra-container-image",
        STRING,
        flags_default(|f| f.pod_infra_container_image.shown()),
        "Specified image will not be pruned by the image garbage collector. CRI implementations have their own configuration to set this image.",
        |f, v| assign(&mut f.pod_infra_container_image, text(v)),
    )
    .deprecated("will be removed in 1.35. Image garbage collector will get sandbox image information from CRI."),
    flag(
        "image-credential-provider-config",
        STRING,
        NONE,
        "Path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; non-recursive search).",
        |f, v| assign(&mut f.image_credential_provider_config, optional_path(v)),
    ),
    flag(
        "image-credential-provider-bin-dir",
        STRING,
        NONE,
        "The path to the directory where credential provider plugin binaries are located.",
        |f, v| assign(&mut f.image_credential_provider_bin_dir, optional_path(v)),
    ),
    flag(
        "minimum-container-ttl-duration",
        DURATION,
        NONE,
        "Minimum age for a finished container before it is garbage collected. Examples: '300ms', '10s' or '2h45m'",
        |f, v| assign(&mut f.minimum_container_ttl_duration, duration(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "maximum-dead-containers-per-container",
        INT32,
        flags_default(|f| f.max_per_pod_container_count.shown()),
        "Maximum number of old instances to retain per container. Each container takes up some disk space.",
        |f, v| assign(&mut f.max_per_pod_container_count, int32(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "maximum-dead-containers",
        INT32,
        flags_default(|f| f.max_container_count.shown()),
        "Maximum number of old instances of containers to retain globally. Each container takes up some disk space. To disable, set to a negative number.",
        |f, v| assign(&mut f.max_container_count, int32(v)),
    )
    .deprecated("Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
    flag(
        "housekeeping-interval",
        DURATION,
        flags_default(|f| f.housekeeping_interval.shown()),
        "Interval between container housekeepings",
        |f, v| assign(&mut f.housekeeping_interval, duration(v)),
    ),
];
