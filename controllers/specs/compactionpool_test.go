package specs

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func intstrName(s string) intstr.IntOrString { return intstr.FromString(s) }

// TestPoolArgs compares the whole flag list.
func TestPoolArgs(t *testing.T) {
	want := []string{"compactor", "--listen=:7500", "--metrics-listen=:9090", "--cache-bytes=6GiB", "--transfer-rate=8MB/s", "--drain-timeout=10m0s",
		"--tls-dir=/etc/bellows-tls"}
	if got := PoolArgs(defaultedPool()); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %q\nwant %q", got, want)
	}
	// TLS Disabled: no --tls-dir.
	want = []string{"compactor", "--listen=:7500", "--metrics-listen=:9090", "--cache-bytes=1536MiB", "--transfer-rate=8500kB/s", "--drain-timeout=1m30s"}
	if got := BuildPoolDeployment(fullPool()).Spec.Template.Spec.Containers[0].Args; !reflect.DeepEqual(got, want) {
		t.Errorf("the Deployment's container args:\n got %q\nwant %q", got, want)
	}
}

func TestPoolBuilders(t *testing.T) {
	p := defaultedPool()
	d := BuildPoolDeployment(p)
	c := d.Spec.Template.Spec.Containers[0]
	if want := (&corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstrName("metrics"), Scheme: corev1.URISchemeHTTPS}}}); !reflect.DeepEqual(c.Lifecycle, want) {
		t.Errorf("lifecycle %+v: workers must drain in preStop, over HTTPS with TLS", c.Lifecycle)
	}
	if got := BuildPoolDeployment(fullPool()).Spec.Template.Spec.Containers[0].Lifecycle.PreStop.HTTPGet.Scheme; got != "" {
		t.Errorf("preStop scheme %q without TLS, want the default HTTP", got)
	}
	if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != int64((10*time.Minute+30*time.Second)/time.Second) {
		t.Errorf("grace period %d must cover the drain timeout", g)
	}
	if g := *BuildPoolDeployment(fullPool()).Spec.Template.Spec.TerminationGracePeriodSeconds; g != 120 {
		t.Errorf("grace period %d, want 90s drain + 30s", g)
	}
	if *d.Spec.Replicas != 1 || *BuildPoolDeployment(fullPool()).Spec.Replicas != 4 {
		t.Errorf("replicas %d, want spec.replicas", *d.Spec.Replicas)
	}
	if PoolSelector(p) != "app.kubernetes.io/component=compactor,app.kubernetes.io/instance=w,app.kubernetes.io/name=bellows" {
		t.Errorf("selector %q", PoolSelector(p))
	}
	wantPorts := []corev1.ServicePort{
		{Name: "grpc", Port: 7500, TargetPort: intstrName("grpc"), Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9090, TargetPort: intstrName("metrics"), Protocol: corev1.ProtocolTCP},
	}
	if s := BuildPoolService(p); s.Name != "w-compactor" || !reflect.DeepEqual(s.Spec.Ports, wantPorts) {
		t.Errorf("service %s ports %+v", s.Name, s.Spec.Ports)
	}
	sm := BuildPoolServiceMonitor(p)
	if sm.GroupVersionKind() != ServiceMonitorGVK || sm.GetName() != "w-compactor" {
		t.Errorf("service monitor %+v", sm.Object)
	}
	for _, o := range []metav1.Object{d, BuildPoolService(p), BuildPoolPDB(p), sm} {
		if ref := metav1.GetControllerOf(o); ref == nil || ref.Kind != "CompactionPool" || ref.Name != "w" || ref.UID != "u" {
			t.Errorf("%T %s owner reference %+v", o, o.GetName(), ref)
		}
	}
}

// TestPoolLabels: full label maps on every object, the immutable subset as
// selectors.
func TestPoolLabels(t *testing.T) {
	p := defaultedPool()
	common := map[string]string{
		"app.kubernetes.io/name": "bellows", "app.kubernetes.io/instance": "w", "app.kubernetes.io/component": "compactor",
		"app.kubernetes.io/managed-by": "bellows-operator", "app.kubernetes.io/part-of": "bellows",
	}
	selector := map[string]string{"app.kubernetes.io/name": "bellows", "app.kubernetes.io/instance": "w", "app.kubernetes.io/component": "compactor"}
	d, svc, pdb, sm := BuildPoolDeployment(p), BuildPoolService(p), BuildPoolPDB(p), BuildPoolServiceMonitor(p)
	for _, o := range []metav1.Object{d, svc, pdb, sm} {
		if !reflect.DeepEqual(o.GetLabels(), common) {
			t.Errorf("%T labels %v, want %v", o, o.GetLabels(), common)
		}
	}
	if !reflect.DeepEqual(d.Spec.Template.Labels, common) || !reflect.DeepEqual(d.Spec.Selector.MatchLabels, selector) ||
		!reflect.DeepEqual(svc.Spec.Selector, selector) || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, selector) {
		t.Errorf("pod labels %v, selectors %v %v %v", d.Spec.Template.Labels, d.Spec.Selector.MatchLabels, svc.Spec.Selector, pdb.Spec.Selector.MatchLabels)
	}
}

func TestFlagFormats(t *testing.T) {
	for n, want := range map[int64]string{6 << 30: "6GiB", 6e9: "6GB", 1536 << 20: "1536MiB", 100: "100B"} {
		if got := formatBytesFlag(n); got != want {
			t.Errorf("formatBytesFlag(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{8e6: "8MB/s", 1e9: "1GB/s", 8_500_000: "8500kB/s", 7: "7B/s"} {
		if got := formatRateFlag(n); got != want {
			t.Errorf("formatRateFlag(%d) = %q, want %q", n, got, want)
		}
	}
}

// Workers open each job's bucket themselves, so they need its credentials;
// and they run as the image's non-root user.
func TestPoolWorkersGetBucketCredentialsAndRunNonRoot(t *testing.T) {
	p := defaultedPool()
	if env := BuildPoolDeployment(p).Spec.Template.Spec.Containers[0].EnvFrom; len(env) != 0 {
		t.Errorf("no bucket credentials configured, yet envFrom %+v", env)
	}
	p.Spec.Bucket.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "bucket"}
	spec := BuildPoolDeployment(p).Spec.Template.Spec
	want := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "bucket"}}}}
	if env := spec.Containers[0].EnvFrom; !reflect.DeepEqual(env, want) {
		t.Errorf("envFrom %+v, want the Secret bucket", env)
	}
	checkNonRoot(t, spec)
}
