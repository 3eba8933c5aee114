package specs

// The objects a CompactionPool owns.

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// formatBytesFlag renders bytes in the compactor's flag syntax, exactly and
// as short as possible: 6GiB for 6Gi, 6GB for 6G, else plain bytes (100B).
func formatBytesFlag(n int64) string {
	best := fmt.Sprintf("%dB", n)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}} {
		if n >= u.size && n%u.size == 0 {
			if s := fmt.Sprintf("%d%s", n/u.size, u.suffix); len(s) < len(best) {
				best = s
			}
		}
	}
	return best
}

// formatRateFlag renders bytes/s in the compactor's flag syntax (8MB/s).
func formatRateFlag(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s/s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%dB/s", n)
}

// PoolArgs are `bellows compactor` flags (docs/interfaces.md).
func PoolArgs(p *kvapi.CompactionPool) []string {
	args := []string{
		"compactor",
		contract.Arg(contract.FlagListen, fmt.Sprintf(":%d", contract.CompactorGRPCPort)),
		contract.Arg(contract.FlagMetricsListen, fmt.Sprintf(":%d", contract.MetricsPort)),
		contract.Arg(contract.FlagCacheBytes, formatBytesFlag(p.Spec.CacheBytes.Value())),
		contract.Arg(contract.FlagTransferRate, formatRateFlag(p.Spec.TransferRateBytesPerSecond)),
		contract.Arg(contract.FlagDrainTimeout, p.Spec.DrainTimeoutOrDefault()),
	}
	if p.Spec.TLS.TLSEnabled() {
		args = append(args, contract.Arg(contract.FlagTLSDir, contract.TLSMountPath))
	}
	return args
}

// BuildPoolDeployment is the workers. Scale-down removes the pods with the
// lowest pod-deletion-cost first (the operator sets it from each worker's
// in-flight jobs); a removed worker drains in preStop, and its grace period
// is the drain timeout plus headroom.
func BuildPoolDeployment(p *kvapi.CompactionPool) *appsv1.Deployment {
	grace := int64(contract.WorkerGracePeriod(p.Spec.DrainTimeoutOrDefault()) / time.Second)
	container := corev1.Container{
		Name:            "compactor",
		Image:           p.Spec.Image,
		ImagePullPolicy: p.Spec.ImagePullPolicy,
		Args:            PoolArgs(p),
		Ports:           containerPorts(contract.CompactorGRPCPort),
		Resources:       WorkerResources(p),
		ReadinessProbe:  httpProbe(contract.PathReadyz, 5),
		LivenessProbe:   httpProbe(contract.PathHealthz, 10),
		SecurityContext: ContainerSecurityContext(),
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: contract.PathDrain, Port: intstr.FromString(contract.PortNameMetrics)},
		}},
	}
	// Jobs name their bucket by URL; the worker opens it with these credentials.
	if ref := p.Spec.Bucket.CredentialsSecretRef; ref != nil {
		container.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *ref}}}
	}
	d := &appsv1.Deployment{
		ObjectMeta: poolMeta(p, p.DeploymentName()),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(p.DesiredReplicasOrDefault()),
			Selector: &metav1.LabelSelector{MatchLabels: PoolSelectorLabels(p)},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: CommonLabels(p.Name, contract.ComponentCompactor)},
				Spec: corev1.PodSpec{
					Containers:      []corev1.Container{container},
					SecurityContext: PodSecurityContext(),
					// A worker never calls the API server: it runs as the
					// namespace's default ServiceAccount without its token.
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(grace),
				},
			},
		},
	}
	if p.Spec.TLS.TLSEnabled() {
		withTLS(&d.Spec.Template.Spec, p.WorkerTLSSecretName())
	}
	applyScheduling(&d.Spec.Template.Spec, p.Spec.Scheduling, PoolSelectorLabels(p))
	StampHash(d, d.Spec)
	return d
}

// BuildPoolService is what storage pods discover workers through
// (--compactor-service, EndpointSlices) and what the ServiceMonitor scrapes.
func BuildPoolService(p *kvapi.CompactionPool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: poolMeta(p, p.ServiceName()),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: PoolSelectorLabels(p),
			Ports:    servicePorts(contract.CompactorGRPCPort),
		},
	}
	StampHash(s, s.Spec)
	return s
}

// BuildPoolPDB lets one worker be disrupted at a time.
func BuildPoolPDB(p *kvapi.CompactionPool) *policyv1.PodDisruptionBudget {
	return buildOneAtATimePDB(poolMeta(p, p.PodDisruptionBudgetName()), PoolSelectorLabels(p))
}

// BuildPoolServiceMonitor scrapes the workers through the pool's Service.
func BuildPoolServiceMonitor(p *kvapi.CompactionPool) *unstructured.Unstructured {
	return buildServiceMonitor(poolMeta(p, p.ServiceMonitorName()), PoolSelectorLabels(p), p.Spec.TLS.TLSEnabled())
}
