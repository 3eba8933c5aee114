package controllers

// Pure builders of the objects a KVCluster owns: each takes the (defaulted)
// KVCluster and returns the desired object, with owner reference, labels and
// spec-hash annotation set. No client, no clock.

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/engineconfig"
)

const (
	walVolume      = "wal"
	walMountPath   = "/var/lib/bellows/wal"
	configVolume   = "config"
	configMountDir = "/etc/bellows"
	// storeGracePeriod leaves a store time to flush its memstores on SIGTERM.
	storeGracePeriod = int64(120)
	// configHashAnnotation on the pod template rolls the pods when engine.yaml changes.
	configHashAnnotation = "kv.bellows.dev/config-hash"
)

// Names of a KVCluster's children.
func storeConfigMapName(c *kvapi.KVCluster) string { return c.Name + "-engine" }
func storeHeadlessName(c *kvapi.KVCluster) string  { return c.Name + "-headless" }
func storeClientName(c *kvapi.KVCluster) string    { return c.Name }
func storeStatefulSetName(c *kvapi.KVCluster) string {
	return c.Name
}
func storePDBName(c *kvapi.KVCluster) string { return c.Name }

// storeIdentityName names the storage pods' ServiceAccount and its Role and
// RoleBinding.
func storeIdentityName(c *kvapi.KVCluster) string { return c.Name + "-store" }

// poolServiceName is the Service in front of a CompactionPool's workers.
func poolServiceName(poolName string) string { return poolName + "-compactor" }

func kvOwner(c *kvapi.KVCluster) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(c, kvapi.GroupVersion.WithKind("KVCluster"))}
}

func storeMeta(c *kvapi.KVCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          commonLabels(c.Name, kvapi.ComponentStore),
		OwnerReferences: kvOwner(c),
	}
}

// EngineConfig turns the KVCluster's engine settings into engine.yaml.
func EngineConfig(c *kvapi.KVCluster) (engineconfig.Config, error) {
	e := c.Spec.Engine
	ratio, err := strconv.ParseFloat(e.Compaction.Ratio, 64)
	if err != nil {
		return engineconfig.Config{}, fmt.Errorf("engine.compaction.ratio %q: %w", e.Compaction.Ratio, err)
	}
	cfg := engineconfig.Config{
		Memstore:        engineconfig.Memstore{Policy: string(e.Memstore.Policy), Bytes: e.Memstore.Bytes.Value()},
		BlockCacheBytes: e.BlockCacheBytes.Value(),
		Compaction: engineconfig.Compaction{
			MinFiles: int(e.Compaction.MinFiles), MaxFiles: int(e.Compaction.MaxFiles),
			Ratio: ratio, MaxBytes: e.Compaction.MaxBytes.Value(),
		},
		Offload:  string(e.Offload),
		Warmup:   engineconfig.Warmup{Mode: string(e.Warmup.Mode)},
		SyncMode: string(e.SyncMode),
	}
	if e.Warmup.RateBytesPerSecond != nil {
		cfg.Warmup.RateBytesPerSecond = *e.Warmup.RateBytesPerSecond
	}
	return cfg, nil
}

// BuildStoreConfigMap is the ConfigMap holding engine.yaml.
func BuildStoreConfigMap(c *kvapi.KVCluster) (*corev1.ConfigMap, error) {
	cfg, err := EngineConfig(c)
	if err != nil {
		return nil, err
	}
	data, err := engineconfig.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: storeMeta(c, storeConfigMapName(c)),
		Data:       map[string]string{engineconfig.FileName: string(data)},
	}
	stampHash(cm, cm.Data)
	return cm, nil
}

func storePorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: "grpc", Port: kvapi.StoreGRPCPort, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: kvapi.MetricsPort, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
	}
}

// BuildStoreHeadlessService gives each storage pod a stable DNS name and is
// what the ServiceMonitor scrapes.
func BuildStoreHeadlessService(c *kvapi.KVCluster) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: storeMeta(c, storeHeadlessName(c)),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 selectorLabels(c.Name, kvapi.ComponentStore),
			Ports:                    storePorts(),
			PublishNotReadyAddresses: true,
		},
	}
	s.Labels["kv.bellows.dev/service"] = "headless"
	stampHash(s, s.Spec)
	return s
}

// BuildStoreClientService is the clients' entry point (gRPC only).
func BuildStoreClientService(c *kvapi.KVCluster) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: storeMeta(c, storeClientName(c)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(c.Name, kvapi.ComponentStore),
			Ports:    storePorts()[:1],
		},
	}
	s.Labels["kv.bellows.dev/service"] = "client"
	stampHash(s, s.Spec)
	return s
}

// storeArgs are `bellows store` flags (docs/interfaces.md).
func storeArgs(c *kvapi.KVCluster) []string {
	args := []string{
		"store",
		fmt.Sprintf("--listen=:%d", kvapi.StoreGRPCPort),
		fmt.Sprintf("--metrics-listen=:%d", kvapi.MetricsPort),
		"--bucket=" + c.Spec.Bucket.URL,
		"--wal-dir=" + walMountPath,
		"--config=" + configMountDir + "/" + engineconfig.FileName,
	}
	if len(c.Spec.Regions.SplitKeys) > 0 {
		args = append(args, "--split-keys="+strings.Join(c.Spec.Regions.SplitKeys, ","))
	} else {
		args = append(args, fmt.Sprintf("--regions=%d", c.Spec.Regions.RegionCount()))
	}
	args = append(args, fmt.Sprintf("--region-owner=$(POD_INDEX)/%d", c.Spec.Replicas))
	// Every store forwards requests for the others' regions, so the client
	// Service (which load-balances) serves any key. Peers are the headless
	// Service's endpoints, its port "grpc".
	args = append(args, fmt.Sprintf("--peer-service=%s/%s", c.Namespace, storeHeadlessName(c)))
	if ref := c.Spec.CompactionPoolRef; ref != nil && c.Spec.Engine.Offload != "Disabled" {
		args = append(args, fmt.Sprintf("--compactor-service=%s/%s", c.Namespace, poolServiceName(ref.Name)))
	}
	return args
}

// BuildStoreStatefulSet is the storage pods. Updates roll one pod at a time
// (OrderedReady, RollingUpdate): a pod is replaced only once the previous
// one is Ready; the operator additionally waits for a rollout to finish
// before it writes the next change.
func BuildStoreStatefulSet(c *kvapi.KVCluster, cm *corev1.ConfigMap) *appsv1.StatefulSet {
	labels := commonLabels(c.Name, kvapi.ComponentStore)
	env := []corev1.EnvVar{
		{Name: "POD_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	var envFrom []corev1.EnvFromSource
	if ref := c.Spec.Bucket.CredentialsSecretRef; ref != nil {
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *ref}})
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}},
			PeriodSeconds: period, FailureThreshold: 3,
		}
	}
	container := corev1.Container{
		Name:            "store",
		Image:           c.Spec.Image,
		ImagePullPolicy: c.Spec.ImagePullPolicy,
		Args:            storeArgs(c),
		Env:             env,
		EnvFrom:         envFrom,
		Ports: []corev1.ContainerPort{
			{Name: "grpc", ContainerPort: kvapi.StoreGRPCPort, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: kvapi.MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:       c.Spec.Resources,
		ReadinessProbe:  probe("/readyz", 5),
		LivenessProbe:   probe("/healthz", 10),
		SecurityContext: containerSecurityContext(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: walVolume, MountPath: walMountPath},
			{Name: configVolume, MountPath: configMountDir, ReadOnly: true},
		},
	}
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: walVolume, Labels: selectorLabels(c.Name, kvapi.ComponentStore)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.Spec.Storage.Size}},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: storeMeta(c, storeStatefulSetName(c)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(c.Spec.Replicas),
			ServiceName:         storeHeadlessName(c),
			Selector:            &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name, kvapi.ComponentStore)},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type:          appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: map[string]string{configHashAnnotation: specHash(cm)},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            storeIdentityName(c),
					SecurityContext:               podSecurityContext(),
					Containers:                    []corev1.Container{container},
					TerminationGracePeriodSeconds: ptr.To(storeGracePeriod),
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
	stampHash(sts, sts.Spec)
	return sts
}

// BuildStorePDB lets at most one storage pod be voluntarily disrupted at a time.
func BuildStorePDB(c *kvapi.KVCluster) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: storeMeta(c, storePDBName(c)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name, kvapi.ComponentStore)},
		},
	}
	stampHash(p, p.Spec)
	return p
}

// BuildStoreServiceAccount is the storage pods' identity.
func BuildStoreServiceAccount(c *kvapi.KVCluster) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{ObjectMeta: storeMeta(c, storeIdentityName(c))}
	stampHash(sa, nil)
	return sa
}

// storeRoleRules let a store discover the compaction workers and its peers:
// it lists and watches the EndpointSlices of the CompactionPool's Service
// (label kubernetes.io/service-name=<pool>-compactor) and of its own headless
// Service (<cluster>-headless) in its own namespace. The
// operator must hold these permissions itself to grant them (see the RBAC
// markers in kvcluster_controller.go).
func storeRoleRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"discovery.k8s.io"},
		Resources: []string{"endpointslices"},
		Verbs:     []string{"get", "list", "watch"},
	}}
}

// BuildStoreRole is what the storage pods may do in their namespace.
func BuildStoreRole(c *kvapi.KVCluster) *rbacv1.Role {
	r := &rbacv1.Role{ObjectMeta: storeMeta(c, storeIdentityName(c)), Rules: storeRoleRules()}
	stampHash(r, r.Rules)
	return r
}

// BuildStoreRoleBinding grants BuildStoreRole to BuildStoreServiceAccount.
func BuildStoreRoleBinding(c *kvapi.KVCluster) *rbacv1.RoleBinding {
	b := &rbacv1.RoleBinding{
		ObjectMeta: storeMeta(c, storeIdentityName(c)),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: storeIdentityName(c)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: storeIdentityName(c), Namespace: c.Namespace}},
	}
	stampHash(b, struct {
		RoleRef  rbacv1.RoleRef
		Subjects []rbacv1.Subject
	}{b.RoleRef, b.Subjects})
	return b
}

// buildServiceMonitor scrapes the "metrics" port of the Services labelled
// with selector.
func buildServiceMonitor(meta metav1.ObjectMeta, selector map[string]string) *unstructured.Unstructured {
	sm := &unstructured.Unstructured{}
	sm.SetGroupVersionKind(ServiceMonitorGVK)
	sm.SetName(meta.Name)
	sm.SetNamespace(meta.Namespace)
	sm.SetLabels(meta.Labels)
	sm.SetOwnerReferences(meta.OwnerReferences)
	match := map[string]any{}
	for k, v := range selector {
		match[k] = v
	}
	spec := map[string]any{
		"selector":  map[string]any{"matchLabels": match},
		"endpoints": []any{map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s"}},
	}
	sm.Object["spec"] = spec
	stampHash(sm, spec)
	return sm
}

// BuildStoreServiceMonitor scrapes the storage pods through the headless Service.
func BuildStoreServiceMonitor(c *kvapi.KVCluster) *unstructured.Unstructured {
	sel := selectorLabels(c.Name, kvapi.ComponentStore)
	sel["kv.bellows.dev/service"] = "headless"
	return buildServiceMonitor(storeMeta(c, c.Name+"-store"), sel)
}

// RegionAssignments says which regions each pod serves: region i belongs to
// the pod with ordinal i mod replicas (what --region-owner ORDINAL/REPLICAS
// means to the store).
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
		out = append(out, kvapi.RegionAssignment{
			Pod: fmt.Sprintf("%s-%d", storeStatefulSetName(c), ord), Regions: s, Count: int32(len(idx)),
		})
	}
	return out
}
