package specs

// The objects a KVCluster owns.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

const (
	walVolume    = "wal"
	configVolume = "config"
)

// EngineConfig turns the KVCluster's engine settings into engine.yaml.
func EngineConfig(c *kvapi.KVCluster) (contract.EngineConfig, error) {
	e := c.Spec.Engine
	ratio, err := strconv.ParseFloat(e.Compaction.Ratio, 64)
	if err != nil {
		return contract.EngineConfig{}, fmt.Errorf("engine.compaction.ratio %q: %w", e.Compaction.Ratio, err)
	}
	cfg := contract.EngineConfig{
		// A, S and R are engine.yaml's alone: the CRD keeps to the policy.
		Memstore: contract.Memstore{Policy: contract.MemstorePolicy(e.Memstore.Policy), Bytes: e.Memstore.Bytes.Value(),
			MaxWALBytes:    e.Memstore.MaxWALBytes.Value(),
			ActiveFraction: contract.DefaultMemstoreActiveFraction, PipelineSegments: contract.DefaultMemstorePipelineSegments,
			RedundancyThreshold: contract.DefaultMemstoreRedundancyThreshold},
		Retention:       contract.Retention{MaxVersions: int(e.Retention.MaxVersions)},
		BlockCacheBytes: e.BlockCacheBytes.Value(),
		Compaction: contract.Compaction{
			MinFiles: int(e.Compaction.MinFiles), MaxFiles: int(e.Compaction.MaxFiles),
			Ratio: ratio, MaxBytes: e.Compaction.MaxBytes.Value(),
		},
		Offload:  contract.OffloadMode(e.Offload),
		Warmup:   contract.Warmup{Mode: contract.WarmupMode(e.Warmup.Mode)},
		SyncMode: contract.SyncMode(e.SyncMode),
	}
	if e.Retention.GCTTL != "" {
		ttl, err := e.Retention.GCTTL.Parse()
		if err != nil {
			return contract.EngineConfig{}, fmt.Errorf("engine.retention.gcTTL: %w", err)
		}
		cfg.Retention.GCTTL = contract.Duration{Duration: ttl}
	} else {
		cfg.Retention.GCTTL = contract.Duration{Duration: contract.DefaultGCTTL}
	}
	if e.Memstore.MaxWALAge != "" {
		age, err := e.Memstore.MaxWALAge.Parse()
		if err != nil {
			return contract.EngineConfig{}, fmt.Errorf("engine.memstore.maxWALAge: %w", err)
		}
		cfg.Memstore.MaxWALAge = contract.Duration{Duration: age}
	} else {
		cfg.Memstore.MaxWALAge = contract.Duration{Duration: contract.DefaultMaxWALAge}
	}
	cfg.Memstore.MaxStoreWALBytes = e.Memstore.MaxStoreWALBytes.Value()
	if e.Warmup.RateBytesPerSecond != nil {
		cfg.Warmup.RateBytesPerSecond = *e.Warmup.RateBytesPerSecond
	}
	if cfg.Memstore.MaxWALBytes == 0 {
		cfg.Memstore.MaxWALBytes = contract.DefaultMaxWALMemstores * cfg.Memstore.Bytes
	}
	// The stores validate engine.yaml when they start; what they would
	// refuse is refused here, before any pod restarts with it.
	if err := cfg.Validate(); err != nil {
		return contract.EngineConfig{}, fmt.Errorf("spec.engine: %w", err)
	}
	return cfg, nil
}

// BuildStoreConfigMap is the ConfigMap holding engine.yaml.
func BuildStoreConfigMap(c *kvapi.KVCluster) (*corev1.ConfigMap, error) {
	cfg, err := EngineConfig(c)
	if err != nil {
		return nil, err
	}
	data, err := contract.MarshalEngineConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: clusterMeta(c, c.EngineConfigMapName()),
		Data:       map[string]string{contract.EngineConfigFile: string(data)},
	}
	StampHash(cm, cm.Data)
	return cm, nil
}

func storePorts() []corev1.ServicePort { return servicePorts(contract.StoreGRPCPort) }

// BuildStoreHeadlessService gives each storage pod a stable DNS name and is
// what the ServiceMonitor scrapes.
func BuildStoreHeadlessService(c *kvapi.KVCluster) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: clusterMeta(c, c.HeadlessServiceName()),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 StoreSelectorLabels(c),
			Ports:                    storePorts(),
			PublishNotReadyAddresses: true,
		},
	}
	s.Labels[contract.LabelService] = contract.ServiceHeadless
	StampHash(s, s.Spec)
	return s
}

// BuildStoreClientService is the clients' entry point (gRPC only).
func BuildStoreClientService(c *kvapi.KVCluster) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: clusterMeta(c, c.ClientServiceName()),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: StoreSelectorLabels(c),
			Ports:    storePorts()[:1],
		},
	}
	s.Labels[contract.LabelService] = contract.ServiceClient
	StampHash(s, s.Spec)
	return s
}

// StoreArgs are `bellows store` flags (docs/interfaces.md). pool is the
// CompactionPool compactionPoolRef names (nil when there is none or it does
// not exist): the split size follows its cache (RegionSplitOf).
func StoreArgs(c *kvapi.KVCluster, pool *kvapi.CompactionPool) []string {
	args := []string{
		"store",
		contract.Arg(contract.FlagListen, fmt.Sprintf(":%d", contract.StoreGRPCPort)),
		contract.Arg(contract.FlagMetricsListen, fmt.Sprintf(":%d", contract.MetricsPort)),
		contract.Arg(contract.FlagBucket, c.Spec.Bucket.URL),
		contract.Arg(contract.FlagWALDir, contract.WALMountPath),
		contract.Arg(contract.FlagConfig, contract.EngineConfigPath),
	}
	if len(c.Spec.Regions.SplitKeys) > 0 {
		args = append(args, contract.Arg(contract.FlagSplitKeys, strings.Join(c.Spec.Regions.SplitKeys, ",")))
	} else {
		args = append(args, contract.Arg(contract.FlagRegions, c.Spec.Regions.RegionCount()))
	}
	// Both are written out, so the pods do not depend on the image's
	// defaults: an operator and a store of different versions agree.
	split := RegionSplitOf(c, pool).Bytes
	args = append(args, contract.Arg(contract.FlagSplitBytes, split))
	mergeBytes := split / 4
	if q := c.Spec.Regions.MergeBytes; q != nil {
		mergeBytes = q.Value()
	}
	args = append(args, contract.Arg(contract.FlagMergeBytes, mergeBytes))
	moves := kvapi.DefaultMaxMovesInFlight
	if m := c.Spec.Regions.MaxMovesInFlight; m != nil {
		moves = *m
	}
	args = append(args, contract.Arg(contract.FlagMaxMovesInFlight, moves))
	recut := kvapi.DefaultRecutTolerancePct
	if p := c.Spec.Regions.RecutTolerancePercent; p != nil {
		recut = *p
	}
	args = append(args, contract.Arg(contract.FlagRecutTolerance, float64(recut)/100))
	minBytes := contract.DefaultBalanceMinBytes
	if q := c.Spec.Regions.BalanceMinBytes; q != nil {
		minBytes = q.Value()
	}
	args = append(args, contract.Arg(contract.FlagBalanceMinBytes, minBytes))
	qps := kvapi.DefaultSplitQPS
	if c.Spec.Regions.SplitQPS != nil {
		qps = *c.Spec.Regions.SplitQPS
	}
	args = append(args, contract.Arg(contract.FlagSplitQPS, qps))
	// Always written, the default too: stores that disagreed on the bound
	// would read with different uncertainty windows, so it comes from the
	// one pod template rather than from each image's default. A duration
	// prints in one form (250ms), so rewriting the spec as 0.25s rolls
	// nothing.
	args = append(args, contract.Arg(contract.FlagMaxClockOffset, c.Spec.MaxClockOffsetOrDefault()))
	args = append(args, contract.Arg(contract.FlagWALArchiveInterval, c.Spec.WALArchiveIntervalOrDefault()))
	durability := c.Spec.Durability.Mode
	if durability == "" {
		durability = contract.DefaultDurability
	}
	args = append(args, contract.Arg(contract.FlagDurability, durability))
	// The store reads the replica count from its StatefulSet (a watch),
	// so a replica change leaves the pod template alone: no store
	// restarts, only the regions whose owner changes move.
	args = append(args, contract.Arg(contract.FlagRegionOwner, fmt.Sprintf("$(%s)", contract.PodIndexEnv)))
	args = append(args, contract.Arg(contract.FlagReplicasFrom, c.Namespace+"/"+c.StatefulSetName()))
	// Every store forwards requests for the others' regions, so the client
	// Service (which load-balances) serves any key. Peers are the headless
	// Service's endpoints, its port "grpc".
	args = append(args, contract.Arg(contract.FlagPeerService, c.Namespace+"/"+c.HeadlessServiceName()))
	if svc, ok := c.CompactorServiceName(); ok && c.Spec.Engine.Offload != "Disabled" {
		args = append(args, contract.Arg(contract.FlagCompactorService, c.Namespace+"/"+svc))
	}
	if c.Spec.TLS.TLSEnabled() {
		args = append(args, contract.Arg(contract.FlagTLSDir, contract.TLSMountPath),
			contract.Arg(contract.FlagTokensFile, contract.TokensMountPath+"/"+contract.TokensFile))
	}
	return args
}

// BuildStoreStatefulSet is the storage pods. Updates roll one pod at a time
// (OrderedReady, RollingUpdate): a pod is replaced only once the previous
// one is Ready; the operator additionally waits for a rollout to finish
// before it writes the next change. pool is as for StoreArgs.
func BuildStoreStatefulSet(c *kvapi.KVCluster, cm *corev1.ConfigMap, pool *kvapi.CompactionPool) *appsv1.StatefulSet {
	env := []corev1.EnvVar{
		{Name: contract.PodIndexEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: contract.PodNamespaceEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	var envFrom []corev1.EnvFromSource
	if ref := c.Spec.Bucket.CredentialsSecretRef; ref != nil {
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *ref}})
	}
	container := corev1.Container{
		Name:            "store",
		Image:           c.Spec.Image,
		ImagePullPolicy: c.Spec.ImagePullPolicy,
		Args:            StoreArgs(c, pool),
		Env:             env,
		EnvFrom:         envFrom,
		Ports:           containerPorts(contract.StoreGRPCPort),
		Resources:       StoreResources(c, pool),
		ReadinessProbe:  httpProbe(contract.PathReadyz, 5),
		LivenessProbe:   httpProbe(contract.PathHealthz, 10),
		SecurityContext: ContainerSecurityContext(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: walVolume, MountPath: contract.WALMountPath},
			{Name: configVolume, MountPath: contract.ConfigMountDir, ReadOnly: true},
		},
	}
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: walVolume, Labels: StoreSelectorLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.Spec.Storage.Size}},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: clusterMeta(c, c.StatefulSetName()),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(c.Spec.Replicas),
			ServiceName:         c.HeadlessServiceName(),
			Selector:            &metav1.LabelSelector{MatchLabels: StoreSelectorLabels(c)},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type:          appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      CommonLabels(c.Name, contract.ComponentStore),
					Annotations: map[string]string{contract.ConfigHashAnnotation: SpecHash(cm)},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            c.StoreIdentityName(),
					SecurityContext:               PodSecurityContext(),
					Containers:                    []corev1.Container{container},
					TerminationGracePeriodSeconds: ptr.To(int64(contract.StoreGracePeriod / time.Second)),
					Volumes: []corev1.Volume{{
						Name:         configVolume,
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{pvc},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
	if c.Spec.TLS.TLSEnabled() {
		withTLS(&sts.Spec.Template.Spec, c.StoreTLSSecretName())
		withTokens(&sts.Spec.Template.Spec, c.TokensSecretName())
	}
	applyScheduling(&sts.Spec.Template.Spec, c.Spec.Scheduling, StoreSelectorLabels(c))
	StampHash(sts, sts.Spec)
	return sts
}

// httpProbe GETs path on the container's metrics port.
func httpProbe(path string, period int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(contract.PortNameMetrics)}},
		PeriodSeconds: period, FailureThreshold: 3,
	}
}

// BuildStorePDB lets at most one storage pod be voluntarily disrupted at a time.
func BuildStorePDB(c *kvapi.KVCluster) *policyv1.PodDisruptionBudget {
	return buildOneAtATimePDB(clusterMeta(c, c.PodDisruptionBudgetName()), StoreSelectorLabels(c))
}

// BuildStoreServiceAccount is the storage pods' identity.
func BuildStoreServiceAccount(c *kvapi.KVCluster) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{ObjectMeta: clusterMeta(c, c.StoreIdentityName())}
	StampHash(sa, nil)
	return sa
}

// storeRoleRules let a store discover the compaction workers and its peers:
// it lists and watches (an informer: never a get) the EndpointSlices of the
// CompactionPool's Service (label kubernetes.io/service-name=<pool>-compactor)
// and of its own headless Service (<cluster>-headless) in its own namespace,
// and its own StatefulSet's replica count (--replicas-from), by name: the
// informer lists and watches with the field selector metadata.name=<cluster>,
// which is what lets RBAC's resourceNames admit a list or watch. The operator
// must hold these permissions itself to grant them (see the RBAC markers in
// controllers/kvcluster_controller.go).
func storeRoleRules(c *kvapi.KVCluster) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"discovery.k8s.io"},
		Resources: []string{"endpointslices"},
		Verbs:     []string{"list", "watch"},
	}, {
		// --replicas-from: the stores' own StatefulSet's spec.replicas.
		APIGroups:     []string{"apps"},
		Resources:     []string{"statefulsets"},
		ResourceNames: []string{c.StatefulSetName()},
		Verbs:         []string{"list", "watch"},
	}}
}

// BuildStoreRole is what the storage pods may do in their namespace.
func BuildStoreRole(c *kvapi.KVCluster) *rbacv1.Role {
	r := &rbacv1.Role{ObjectMeta: clusterMeta(c, c.StoreIdentityName()), Rules: storeRoleRules(c)}
	StampHash(r, r.Rules)
	return r
}

// BuildStoreRoleBinding grants BuildStoreRole to BuildStoreServiceAccount.
func BuildStoreRoleBinding(c *kvapi.KVCluster) *rbacv1.RoleBinding {
	b := &rbacv1.RoleBinding{
		ObjectMeta: clusterMeta(c, c.StoreIdentityName()),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: c.StoreIdentityName()},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: c.StoreIdentityName(), Namespace: c.Namespace}},
	}
	StampHash(b, struct {
		RoleRef  rbacv1.RoleRef
		Subjects []rbacv1.Subject
	}{b.RoleRef, b.Subjects})
	return b
}

// BuildStoreServiceMonitor scrapes the storage pods through the headless Service.
func BuildStoreServiceMonitor(c *kvapi.KVCluster) *unstructured.Unstructured {
	sel := StoreSelectorLabels(c)
	sel[contract.LabelService] = contract.ServiceHeadless
	return buildServiceMonitor(clusterMeta(c, c.ServiceMonitorName()), sel, c.Spec.TLS.TLSEnabled())
}

// RegionAssignments says which regions each pod serves: region i belongs to
// the pod with ordinal i mod replicas (what --region-owner ORDINAL with
// --replicas-from, or ORDINAL/REPLICAS, means to the store).
func RegionAssignments(c *kvapi.KVCluster) []kvapi.RegionAssignment {
	n, r := c.Spec.Regions.RegionCount(), c.Spec.Replicas
	if r <= 0 {
		return nil
	}
	out := make([]kvapi.RegionAssignment, 0, r)
	for ord := int32(0); ord < r; ord++ {
		var idx []string
		for i := ord; i < n; i += r {
			idx = append(idx, strconv.Itoa(int(i)))
		}
		s := strings.Join(idx, ",")
		if len(s) > 200 {
			s = s[:strings.LastIndex(s[:200], ",")] + ",…"
		}
		out = append(out, kvapi.RegionAssignment{Pod: c.PodName(ord), Regions: s, Count: int32(len(idx))})
	}
	return out
}

// MarkDraining turns the StatefulSet BuildStoreStatefulSet made for a
// scale-down to c.Spec.Replicas into the one that drains first: it keeps
// the current replicas, and marks the ordinals from the cluster's replicas
// up as leaving (contract.ServingReplicasAnnotation, read by the stores'
// balancer) since the drain began (contract.DrainingSinceAnnotation, which
// bounds it). The hash covers both, so the mark is written like any change.
func MarkDraining(sts *appsv1.StatefulSet, current int32, since time.Time) {
	serving := *sts.Spec.Replicas
	sts.Spec.Replicas = ptr.To(current)
	a := sts.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[contract.ServingReplicasAnnotation] = strconv.Itoa(int(serving))
	a[contract.DrainingSinceAnnotation] = since.UTC().Format(time.RFC3339)
	sts.SetAnnotations(a)
	StampHash(sts, sts.Spec)
}
