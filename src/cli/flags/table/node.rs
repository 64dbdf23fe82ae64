//! KubeletConfiguration flags, part three: container logs, API client limits, eviction,
//! reservations, registration and logging.

use super::*;

pub(super) static NODE: &[FlagDef] = &[
    config(
        "container-log-max-size",
        STRING,
        config_default(|c| c.container_log_max_size.shown()),
        "Set the maximum size (e.g. 10Mi) of container log file before it is rotated.",
        |c, v, _| assign(&mut c.container_log_max_size, text(v)),
    ),
    config(
        "container-log-max-files",
        INT32,
        config_default(|c| c.container_log_max_files.shown()),
        "Set the maximum number of container log files that can be present for a container. The number must be >= 2.",
        |c, v, _| assign(&mut c.container_log_max_files, int32(v)),
    ),
    config(
        "container-log-max-workers",
        INT32,
        config_default(|c| c.container_log_max_workers.shown()),
        "Set the maximum number of concurrent workers for log rotation.",
        |c, v, _| assign(&mut c.container_log_max_workers, int32(v)),
    ),
    config(
        "container-log-monitor-interval",
        DURATION,
        config_default(|c| c.container_log_monitor_interval.shown()),
        "Set the duration at which the container logs are monitored for rotation.",
        |c, v, _| assign(&mut c.container_log_monitor_interval, duration(v)),
    ),
    config(
        "allowed-unsafe-sysctls",
        STRINGS,
        NONE,
        "Comma-separated whitelist of unsafe sysctls or unsafe sysctl patterns (ending in *). Use these at your own risk.",
        |c, v, first| strings(&mut c.allowed_unsafe_sysctls, v, first),
    ),
    config(
        "node-status-max-images",
        INT32,
        config_default(|c| c.node_status_max_images.shown()),
        "The maximum number of images to report in Node.Status.Images. If -1 is specified, no cap will be applied.",
        |c, v, _| assign(&mut c.node_status_max_images, int32(v)),
    ),
    config(
        "kernel-memcg-notification",
        BOOL,
        NONE,
        "If enabled, the kubelet will integrate with the kernel memcg notification to determine if memory eviction thresholds are crossed rather than polling.",
        |c, v, _| assign(&mut c.kernel_memcg_notification, boolean(v)),
    ),
    config(
        "local-storage-capacity-isolation",
        BOOL,
        config_default(|c| c.local_storage_capacity_isolation.shown()),
        "If true, local ephemeral storage isolation is enabled. Otherwise, local storage isolation feature will be disabled",
        |c, v, _| assign(&mut c.local_storage_capacity_isolation, boolean(v)),
    ),
    config(
        "max-open-files",
        INT,
        config_default(|c| c.max_open_files.shown()),
        "Number of files that can be opened by Kubelet process.",
        |c, v, _| assign(&mut c.max_open_files, int64(v)),
    ),
    config(
        "kube-api-content-type",
        STRING,
        config_default(|c| c.content_type.shown()),
        "Content type of requests sent to apiserver.",
        |c, v, _| assign(&mut c.content_type, text(v)),
    ),
    config(
        "kube-api-qps",
        INT32,
        config_default(|c| c.kube_api_qps.shown()),
        "QPS to use while talking with kubernetes apiserver. The number must be >= 0.",
        |c, v, _| assign(&mut c.kube_api_qps, int32(v)),
    ),
    config(
        "kube-api-burst",
        INT32,
        config_default(|c| c.kube_api_burst.shown()),
        "Burst to use while talking with kubernetes apiserver. The number must be >= 0.",
        |c, v, _| assign(&mut c.kube_api_burst, int32(v)),
    ),
    config(
        "serialize-image-pulls",
        BOOL,
        config_default(|c| c.serialize_image_pulls.shown()),
        "Pull images one at a time.",
        |c, v, _| assign(&mut c.serialize_image_pulls, boolean(v)),
    ),
    config(
        "eviction-hard",
        MAP_STRING_STRING,
        config_default(|c| thresholds_shown(&c.eviction_hard)),
        "A set of eviction thresholds (e.g. memory.available<1Gi) that if met would trigger a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_hard, v, '<', first),
    ),
    config(
        "eviction-soft",
        MAP_STRING_STRING,
        NONE,
        "A set of eviction thresholds (e.g. memory.available<1.5Gi) that if met over a corresponding grace period would trigger a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_soft, v, '<', first),
    ),
    config(
        "eviction-soft-grace-period",
        MAP_STRING_STRING,
        NONE,
        "A set of eviction grace periods (e.g. memory.available=1m30s) that correspond to how long a soft eviction threshold must hold before triggering a pod eviction.",
        |c, v, first| string_map(&mut c.eviction_soft_grace_period, v, '=', first),
    ),
    config(
        "eviction-pressure-transition-period",
        DURATION,
        config_default(|c| c.eviction_pressure_transition_period.shown()),
        "Duration for which the kubelet has to wait before transitioning out of an eviction pressure condition.",
        |c, v, _| assign(&mut c.eviction_pressure_transition_period, duration(v)),
    ),
    config(
        "eviction-max-pod-grace-period",
        INT32,
        NONE,
        "Maximum allowed grace period (in seconds) to use when terminating pods in response to a soft eviction threshold being met. If negative, defer to pod specified value.",
        |c, v, _| assign(&mut c.eviction_max_pod_grace_period, int32(v)),
    ),
    config(
        "eviction-minimum-reclaim",
        MAP_STRING_STRING,
        NONE,
        "A set of minimum reclaims (e.g. imagefs.available=2Gi) that describes the minimum amount of resource the kubelet will reclaim when performing a pod eviction if that resource is under pressure.",
        |c, v, first| string_map(&mut c.eviction_minimum_reclaim, v, '=', first),
    ),
    config(
        "pods-per-core",
        INT32,
        NONE,
        "Number of Pods per core that can run on this Kubelet. A value of 0 disables this limit.",
        |c, v, _| assign(&mut c.pods_per_core, int32(v)),
    ),
    config(
        "protect-kernel-defaults",
        BOOL,
        NONE,
        "Default kubelet behaviour for kernel tuning. If set, kubelet errors if any of kernel tunables is different than kubelet defaults.",
        |c, v, _| assign(&mut c.protect_kernel_defaults, boolean(v)),
    ),
    config(
        "reserved-cpus",
        STRING,
        NONE,
        "A comma-separated list of CPUs or CPU ranges that are reserved for system and kubernetes usage.",
        |c, v, _| assign(&mut c.reserved_system_cpus, text(v)),
    ),
    config(
        "system-reserved",
        MAP_STRING_STRING,
        NONE,
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for non-kubernetes components. [default=none]",
        |c, v, first| string_map(&mut c.system_reserved, v, '=', first),
    ),
    config(
        "kube-reserved",
        MAP_STRING_STRING,
        NONE,
        "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for kubernetes system components. [default=none]",
        |c, v, first| string_map(&mut c.kube_reserved, v, '=', first),
    ),
    config(
        "enforce-node-allocatable",
        STRINGS,
        config_default(|c| c.enforce_node_allocatable.shown()),
        "A comma separated list of levels of node allocatable enforcement to be enforced by kubelet. Acceptable options are 'none', 'pods', 'system-reserved', and 'kube-reserved'.",
        |c, v, first| strings(&mut c.enforce_node_allocatable, v, first),
    ),
    config(
        "system-reserved-cgroup",
        STRING,
        NONE,
        "Absolute name of the top level cgroup that is used to manage non-kubernetes components for which compute resources were reserved via '--system-reserved' flag. [default='']",
        |c, v, _| assign(&mut c.system_reserved_cgroup, text(v)),
    ),
    config(
        "kube-reserved-cgroup",
        STRING,
        NONE,
        "Absolute name of the top level cgroup that is used to manage kubernetes components for which compute resources were reserved via '--kube-reserved' flag. [default='']",
        |c, v, _| assign(&mut c.kube_reserved_cgroup, text(v)),
    ),
    config(
        "memory-manager-policy",
        STRING,
        config_default(|c| c.memory_manager_policy.shown()),
        "Memory Manager policy to use. Possible values: 'None', 'Static'.",
        |c, v, _| assign(&mut c.memory_manager_policy, text(v)),
    ),
    config(
        "reserved-memory",
        STRING,
        NONE,
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
        config_default(|c| c.register_node.shown()),
        "Register the node with the apiserver. If --kubeconfig is not provided, this flag is irrelevant, as the Kubelet won't have an apiserver to register with.",
        |c, v, _| assign(&mut c.register_node, boolean(v)),
    ),
    config(
        "register-with-taints",
        STRING,
        NONE,
        "Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\"). No-op if register-node is false.",
        |c, v, _| assign(&mut c.register_with_taints, taints(v)),
    ),
    config(
        "seccomp-default",
        BOOL,
        NONE,
        "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.",
        |c, v, _| assign(&mut c.seccomp_default, boolean(v)),
    ),
    config(
        "logging-format",
        STRING,
        config_default(|c| c.logging.format.shown()),
        "Sets the log format. Permitted formats: \"json\" (gated by LoggingBetaOptions), \"text\".",
        |c, v, _| assign(&mut c.logging.format, text(v)),
    ),
    config(
        "log-flush-frequency",
        DURATION,
        config_default(|c| c.logging.flush_frequency.duration.shown()),
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
        NONE,
        "number for the log level verbosity",
        |c, v, _| assign(&mut c.logging.verbosity, level(v)),
    )
    .not_deprecated()
    .short('v'),
    config(
        "vmodule",
        MODULE_LEVELS,
        NONE,
        "comma-separated list of pattern=N settings for file-filtered logging (only works for text log format)",
        |c, v, _| assign(&mut c.logging.vmodule, vmodule(v)),
    )
    .not_deprecated(),
    config(
        "log-json-split-stream",
        BOOL,
        NONE,
        "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.",
        |c, v, _| assign(&mut c.logging.options.json.split_stream, boolean(v)),
    ),
    config(
        "log-json-info-buffer-size",
        QUANTITY,
        NONE,
        "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance.",
        |c, v, _| assign(&mut c.logging.options.json.info_buffer_size, quantity_text(v)),
    ),
    config(
        "log-text-split-stream",
        BOOL,
        NONE,
        "[Alpha] In text format, write error messages to stderr and info messages to stdout.",
        |c, v, _| assign(&mut c.logging.options.text.split_stream, boolean(v)),
    ),
    config(
        "log-text-info-buffer-size",
        QUANTITY,
        NONE,
        "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance.",
        |c, v, _| assign(&mut c.logging.options.text.info_buffer_size, quantity_text(v)),
    ),
];
