package discovery

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func ptr[T any](v T) *T { return &v }

func slice(name string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "pool-compactor"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(port)}, {Name: ptr("metrics"), Port: ptr(int32(9090))}},
		Endpoints:   eps,
	}
}

func ep(ip string, ready, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Terminating: ptr(terminating)}}
}

// TestEndpointSlicesFollowTheAPIServer runs against a real kube-apiserver
// and etcd (envtest; `make envtest-bins` builds them). Missing binaries
// fail the test: it never skips.
func TestEndpointSlicesFollowTheAPIServer(t *testing.T) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Fatalf("envtest binaries missing in %s: run `make envtest-bins`: %v", dir, err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kv"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices1 := cs.DiscoveryV1().EndpointSlices("kv")
	if _, err := slices1.Create(ctx, slice("a", 7500, ep("10.0.0.1", true, false), ep("10.0.0.2", false, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A slice of another Service is ignored.
	other := slice("other", 7500, ep("10.9.9.9", true, false))
	other.Labels[discoveryv1.LabelServiceName] = "else"
	if _, err := slices1.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := StartEndpointSlices(ctx, cfg, "kv", "pool-compactor", "grpc")
	if err != nil {
		t.Fatal(err)
	}
	await := func(want ...string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got = d.Compactors()
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("Compactors() = %v, want %v: %v", got, want, err)
		}
	}
	await("10.0.0.1:7500")
	// Scale up: a second slice; the not-ready endpoint becomes ready.
	if _, err := slices1.Create(ctx, slice("b", 7500, ep("10.0.0.3", true, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := slice("a", 7500, ep("10.0.0.1", true, false), ep("10.0.0.2", true, false))
	cur, _ := slices1.Get(ctx, "a", metav1.GetOptions{})
	a.ResourceVersion = cur.ResourceVersion
	if _, err := slices1.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("10.0.0.1:7500", "10.0.0.2:7500", "10.0.0.3:7500")
	// Scale down: a draining worker is terminating and gets no new jobs; a
	// deleted slice takes its workers with it.
	cur, _ = slices1.Get(ctx, "a", metav1.GetOptions{})
	a = slice("a", 7500, ep("10.0.0.1", true, false), ep("10.0.0.2", true, true))
	a.ResourceVersion = cur.ResourceVersion
	if _, err := slices1.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := slices1.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await("10.0.0.1:7500")
}

func TestParseService(t *testing.T) {
	for _, bad := range []string{"", "name", "/name", "ns/", "a/b/c"} {
		if _, _, err := ParseService(bad); err == nil {
			t.Errorf("ParseService(%q) accepted", bad)
		}
	}
	if ns, n, err := ParseService("kv/pool-compactor"); err != nil || ns != "kv" || n != "pool-compactor" {
		t.Fatalf("ParseService: %q %q %v", ns, n, err)
	}
}
