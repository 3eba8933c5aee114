package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

func TestPoolBuilders(t *testing.T) {
	p := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}}
	p.SetDefaults()
	d := BuildPoolDeployment(p)
	c := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"compactor", "--listen=:7500", "--metrics-listen=:9090", "--cache-bytes=6GiB", "--transfer-rate=8MB/s", "--drain-timeout=10m0s"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.HTTPGet.Path != DrainPath {
		t.Error("workers must drain in preStop")
	}
	if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != int64((10*time.Minute+30*time.Second)/time.Second) {
		t.Errorf("grace period %d must cover the drain timeout", g)
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d", *d.Spec.Replicas)
	}
	if PoolSelector(p) != "app.kubernetes.io/component=compactor,app.kubernetes.io/instance=w,app.kubernetes.io/name=bellows" {
		t.Errorf("selector %q", PoolSelector(p))
	}
	if s := BuildPoolService(p); s.Name != "w-compactor" || s.Spec.Ports[0].Port != 7500 {
		t.Errorf("service %+v", s)
	}
	sm := BuildPoolServiceMonitor(p)
	if sm.GetKind() != "ServiceMonitor" || metav1.GetControllerOf(sm) == nil {
		t.Errorf("service monitor %+v", sm.Object)
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
	_ = resource.MustParse
}

// Workers open each job's bucket themselves, so they need its credentials;
// and they run as the image's non-root user.
func TestPoolWorkersGetBucketCredentialsAndRunNonRoot(t *testing.T) {
	p := &kvapi.CompactionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}}
	p.SetDefaults()
	if env := BuildPoolDeployment(p).Spec.Template.Spec.Containers[0].EnvFrom; len(env) != 0 {
		t.Errorf("no bucket credentials configured, yet envFrom %+v", env)
	}
	p.Spec.Bucket.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "bucket"}
	spec := BuildPoolDeployment(p).Spec.Template.Spec
	env := spec.Containers[0].EnvFrom
	if len(env) != 1 || env[0].SecretRef == nil || env[0].SecretRef.Name != "bucket" {
		t.Errorf("envFrom %+v, want the Secret bucket", env)
	}
	checkNonRoot(t, spec)
}

func checkNonRoot(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	psc, sc := spec.SecurityContext, spec.Containers[0].SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.FSGroup == nil || *psc.FSGroup != imageUID {
		t.Errorf("pod security context %+v: want non-root with fsGroup %d", psc, imageUID)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v", sc)
	}
}
