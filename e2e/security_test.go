//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bellowsclient "github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// 6. Security: with the defaults, every port of the stores and the workers
// speaks TLS only; a pod without credentials can neither read nor write; a
// read-only client can read but neither write nor call Admin; a worker
// without the cluster's certificate gets no job; and the stores' and
// workers' certificates are rotated under a writing client with no failed
// write and every acknowledged write read back (docs/security.md).
func (e *env) security(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stores := e.pods(t, contract.ComponentStore, clusterName)
	workers := e.pods(t, contract.ComponentCompactor, poolName)
	if len(stores) == 0 || len(workers) == 0 {
		t.Fatalf("%d storage pods and %d workers; want some of each", len(stores), len(workers))
	}

	t.Run("plaintext is refused on every port", func(t *testing.T) {
		for _, p := range append(append([]corev1.Pod(nil), stores...), workers...) {
			if !specs.PodServesTLS(&p) {
				t.Errorf("pod %s runs without --tls-dir", p.Name)
			}
			grpcPort := contract.StoreGRPCPort
			if strings.Contains(p.Labels[contract.LabelComponent], contract.ComponentCompactor) {
				grpcPort = contract.CompactorGRPCPort
			}
			conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", p.Status.PodIP, grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			if grpcPort == contract.StoreGRPCPort {
				_, err = kvpb.NewKVClient(conn).Regions(cctx, &kvpb.RegionsRequest{})
			} else {
				_, err = compactionpb.NewCompactorClient(conn).Status(cctx, &compactionpb.StatusRequest{})
			}
			ccancel()
			conn.Close()
			if err == nil {
				t.Errorf("%s: a plaintext gRPC call on port %d succeeded", p.Name, grpcPort)
			}
			hc := &http.Client{Timeout: 5 * time.Second}
			resp, err := hc.Get(fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, contract.MetricsPort))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "bellows_") {
					t.Errorf("%s: plaintext /metrics answered %s", p.Name, resp.Status)
				}
			}
			// Over TLS, but without a client certificate: the probes' paths
			// answer, /metrics does not.
			noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			resp, err = noCert.Get(fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, contract.MetricsPort))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s: /metrics over TLS without a certificate answered %s, want 401", p.Name, resp.Status)
				}
			}
		}
	})

	t.Run("the operator serves its metrics and probes over TLS only", func(t *testing.T) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(operatorNS)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			t.Fatalf("no operator pod in %s", operatorNS)
		}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				for _, port := range c.Ports {
					if port.ContainerPort != contract.OperatorMetricsPort {
						t.Errorf("%s has port %d besides its metrics port: every port must be TLS", p.Name, port.ContainerPort)
					}
				}
			}
			base := fmt.Sprintf("%s:%d", p.Status.PodIP, contract.OperatorMetricsPort)
			hc := &http.Client{Timeout: 5 * time.Second}
			if resp, err := hc.Get("http://" + base + "/metrics"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Errorf("%s: plaintext /metrics answered %s", p.Name, resp.Status)
				}
			}
			tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			for _, path := range []string{"/metrics", contract.PathHealthz, contract.PathReadyz} {
				resp, err := tlsClient.Get("https://" + base + path)
				if err != nil {
					t.Errorf("%s %s over TLS: %v", p.Name, path, err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s %s over TLS: %s", p.Name, path, resp.Status)
				}
			}
		}
	})

	t.Run("NetworkPolicies guard the stores' and workers' ports", func(t *testing.T) {
		// The local cluster's CNI (bridge) does not enforce them: what can
		// be checked here is that they exist, select the pods and admit
		// the ports docs/security.md says.
		for _, name := range []string{clusterName + "-store", poolName + "-compactor"} {
			var np networkingv1.NetworkPolicy
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &np); err != nil {
				t.Errorf("NetworkPolicy %s: %v", name, err)
				continue
			}
			if len(np.Spec.Ingress) == 0 || len(np.Spec.PodSelector.MatchLabels) == 0 {
				t.Errorf("NetworkPolicy %s admits nothing or selects every pod: %+v", name, np.Spec)
			}
		}
	})

	image := e.storeImage(t)
	t.Run("a pod without credentials can neither read nor write", func(t *testing.T) {
		key := "security-no-credentials"
		var svc corev1.Service
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort) // no cluster DNS here
		for _, args := range [][]string{
			{"kv", "put", key, "x"},
			{"kv", "get", "k"},
		} {
			out, phase := e.runPod(t, ctx, "no-credentials", image, append(args, "--addr", addr, "--tls-dir", "", "--timeout", "10s"), nil)
			if phase != corev1.PodFailed {
				t.Errorf("bellows %s from a pod without credentials: %s, want it to fail:\n%s", strings.Join(args, " "), phase, out)
			}
		}
		if _, found, _, err := kv.Get(ctx, []byte(key)); err != nil || found {
			t.Errorf("the key a pod without credentials tried to write: found %v, err %v; want it absent", found, err)
		}
	})

	t.Run("a read-only client cannot write or call Admin", func(t *testing.T) {
		var svc corev1.Service
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort),
			grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS(t, clusterName, "read"))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var key []byte
		for k := range l.snapshot() {
			key = []byte(k)
			break
		}
		if _, err := kvpb.NewKVClient(conn).Get(ctx, &kvpb.GetRequest{Key: key}); err != nil {
			t.Errorf("a read with the read certificate: %v", err)
		}
		_, err = kvpb.NewKVClient(conn).Put(ctx, &kvpb.PutRequest{Key: []byte("security-read-only"), Value: []byte("x")})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs the write role") {
			t.Errorf("a write with the read certificate: %v; want PERMISSION_DENIED naming the write role", err)
		}
		_, err = kvpb.NewAdminClient(conn).Flush(ctx, &kvpb.FlushRequest{})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs the admin role") {
			t.Errorf("Admin.Flush with the read certificate: %v; want PERMISSION_DENIED naming the admin role", err)
		}
	})

	t.Run("a client with a read token can read, and not write", func(t *testing.T) {
		var secret corev1.Secret
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName + "-token-read"}, &secret); err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(secret.Data[specs.CACertKey]) {
			t.Fatalf("Secret %s holds no ca.crt", secret.Name)
		}
		var svc corev1.Service
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, &svc); err != nil {
			t.Fatal(err)
		}
		// No client certificate: the CA to check the stores, and the token.
		conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: tlsconfig.ServerName})),
			bellowsclient.WithToken(string(secret.Data[specs.TokenKey])))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := kvpb.NewKVClient(conn).Get(ctx, &kvpb.GetRequest{Key: []byte("security-token")}); err != nil {
			t.Errorf("a read with the read token: %v", err)
		}
		_, err = kvpb.NewKVClient(conn).Put(ctx, &kvpb.PutRequest{Key: []byte("security-token"), Value: []byte("x")})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs the write role") {
			t.Errorf("a write with the read token: %v; want PERMISSION_DENIED naming the write role", err)
		}
		// And without the token, nothing.
		bare, err := grpc.NewClient(fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, contract.StoreGRPCPort),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: tlsconfig.ServerName})))
		if err != nil {
			t.Fatal(err)
		}
		defer bare.Close()
		if _, err := kvpb.NewKVClient(bare).Get(ctx, &kvpb.GetRequest{Key: []byte("security-token")}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("a read over TLS with neither certificate nor token: %v; want UNAUTHENTICATED", err)
		}
	})

	t.Run("a worker without the cluster's certificate gets no job", func(t *testing.T) {
		e.fakeWorkerGetsNoJob(t, ctx, kv, l, image)
	})

	t.Run("certificates rotate under a writing client", func(t *testing.T) {
		e.rotateUnderWrites(t, ctx, kv, l)
	})
}

// storeImage is the image the demo cluster's stores run: the bellows image.
func (e *env) storeImage(t *testing.T) string {
	t.Helper()
	var sts appsv1.StatefulSet
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}, &sts); err != nil {
		t.Fatal(err)
	}
	return sts.Spec.Template.Spec.Containers[0].Image
}

// runPod runs the bellows image with args in a pod of its own (restricted
// like every pod of the namespace) until it ends, and returns its log and
// final phase. mutate, if set, adjusts the pod first.
func (e *env) runPod(t *testing.T, ctx context.Context, name, image string, args []string, mutate func(*corev1.Pod)) (string, corev1.PodPhase) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SecurityContext: specs.PodSecurityContext(),
			Containers: []corev1.Container{{
				Name: "bellows", Image: image, ImagePullPolicy: corev1.PullNever, Args: args,
				SecurityContext: specs.ContainerSecurityContext(),
			}},
		},
	}
	if mutate != nil {
		mutate(pod)
	}
	if err := e.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) }()
	var phase corev1.PodPhase
	eventually(t, 2*time.Minute, "pod "+pod.Name+" to end", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, "", err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase), nil
	})
	out, _ := e.try("kubectl", "logs", "-n", ns, pod.Name)
	return out, phase
}

// fakeWorkerGetsNoJob runs a compaction worker with a node certificate of
// another CA behind the pool's Service (the pool's labels, but not its
// ReplicaSet's pod-template-hash, so the Deployment leaves it alone), has
// every region compacted, and checks that the fake worker ran none of the
// jobs while the pool's workers ran them.
func (e *env) fakeWorkerGetsNoJob(t *testing.T, ctx context.Context, kv *kvClient, l *ledger, image string) {
	other, err := tlsconfig.NewCA("not the cluster's CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Minute)
	cert, key, err := other.Issue("fake-worker", tlsconfig.Node, nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fake-worker-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{specs.CACertKey: other.PEM, corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
	if err := e.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.c.Delete(context.Background(), secret) }()
	var pool appsv1.Deployment
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName + "-compactor"}, &pool); err != nil {
		t.Fatal(err)
	}
	fake := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fake-worker", Labels: pool.Spec.Selector.MatchLabels},
		Spec: corev1.PodSpec{
			SecurityContext: specs.PodSecurityContext(),
			Containers: []corev1.Container{{
				Name: "compactor", Image: image, ImagePullPolicy: corev1.PullNever,
				Args: []string{"compactor", fmt.Sprintf("--listen=:%d", contract.CompactorGRPCPort), fmt.Sprintf("--metrics-listen=:%d", contract.MetricsPort),
					"--name=fake-worker", "--cache-bytes=64MiB", "--tls-dir=/tls"},
				Ports: []corev1.ContainerPort{{Name: contract.PortNameGRPC, ContainerPort: contract.CompactorGRPCPort}, {Name: contract.PortNameMetrics, ContainerPort: contract.MetricsPort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: contract.PathReadyz, Port: intstr.FromString(contract.PortNameMetrics), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 1},
				SecurityContext: specs.ContainerSecurityContext(),
				VolumeMounts:    []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name, DefaultMode: ptr.To(int32(0o440))}}}},
		},
	}
	if err := e.c.Create(ctx, fake); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.c.Delete(context.Background(), fake, client.GracePeriodSeconds(0)) }()
	eventually(t, 2*time.Minute, "the fake worker to be Ready behind the pool's Service", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(fake), &p); err != nil {
			return false, "", err
		}
		*fake = p
		return podReady(&p), string(p.Status.Phase), nil
	})
	// Read with a client certificate of the fake's own CA: the fake's
	// count of the jobs it ran.
	fakeClientCert, fakeClientKey, err := other.Issue("reader", tlsconfig.Reader, nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fakeTLS, err := tlsconfig.ClientFromPEM(other.PEM, fakeClientCert, fakeClientKey)
	if err != nil {
		t.Fatal(err)
	}
	fakeJobs := func() float64 {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: fakeTLS}}
		resp, err := hc.Get(fmt.Sprintf("https://%s:%d/metrics", fake.Status.PodIP, contract.MetricsPort))
		if err != nil {
			t.Fatalf("the fake worker's /metrics: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var n float64
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "bellows_compactor_jobs_total") {
				var v float64
				if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
					n += v
				}
			}
		}
		return n
	}
	// The pool's own workers, without the fake (whose /metrics refuses
	// the namespace's monitoring certificate).
	poolWorkers := func() float64 {
		var n float64
		for _, p := range e.pods(t, contract.ComponentCompactor, poolName) {
			if p.Name == fake.Name || p.Status.PodIP == "" {
				continue
			}
			s, err := e.scrape(ctx, &p)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			n += s.sum("bellows_compactor_jobs_total")
		}
		return n
	}
	before := poolWorkers()
	if err != nil {
		t.Fatal(err)
	}
	// A major compaction of every region, each offered to the workers
	// the stores see (the fake among them).
	write(t, ctx, kv, l, "security-fake-worker", 200, 256)
	for _, r := range flushAll(t, ctx, kv) {
		if _, err := compact(ctx, kv, r); err != nil {
			t.Fatalf("compact %s: %v", r.region, err)
		}
	}
	if n := fakeJobs(); n != 0 {
		t.Errorf("the worker of another CA ran %v jobs; want none", n)
	}
	ran := poolWorkers() - before
	if ran < 1 {
		t.Errorf("the pool's workers ran %v jobs for the compactions; want them to have run them", ran)
	}
	t.Logf("the pool's workers ran %v jobs, the fake none", ran)
	verifyLedger(t, ctx, kv, l)
}

// rotateUnderWrites deletes the stores' and the workers' certificate
// Secrets while a client writes; the operator issues new ones, the kubelet
// updates the pods' volumes, and every process serves its new certificate
// without a restart. No write may fail, and every acknowledged write reads
// back.
func (e *env) rotateUnderWrites(t *testing.T, ctx context.Context, kv *kvClient, l *ledger) {
	admin := e.clientTLS(t, clusterName, "admin")
	served := func(addr string) (*big.Int, error) {
		d := &net.Dialer{Timeout: 3 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", addr, admin)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	targets := map[string]string{} // address → pod
	for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
		targets[fmt.Sprintf("%s:%d", p.Status.PodIP, contract.StoreGRPCPort)] = p.Name
	}
	for _, p := range e.pods(t, contract.ComponentCompactor, poolName) {
		targets[fmt.Sprintf("%s:%d", p.Status.PodIP, contract.CompactorGRPCPort)] = p.Name
	}
	old := map[string]*big.Int{}
	for addr, pod := range targets {
		sn, err := served(addr)
		if err != nil {
			t.Fatalf("%s (%s): %v", pod, addr, err)
		}
		old[addr] = sn
	}
	restarts := e.restartCounts(t)

	wctx, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			key := keyFor("security-rotation", i)
			val := []byte(fmt.Sprintf("rotation-%d", i))
			if _, err := kv.Put(wctx, key, val); err != nil {
				if wctx.Err() != nil {
					return
				}
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
				continue
			}
			l.ack(key, val)
			writes.Add(1)
		}
	})
	for _, name := range []string{clusterName + "-store-tls", poolName + "-worker-tls"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := e.c.Delete(ctx, s); err != nil {
			t.Fatalf("delete Secret %s: %v", name, err)
		}
	}
	// The kubelet refreshes a Secret's volume on its sync period (a minute
	// by default, plus its cache's TTL).
	eventually(t, 4*time.Minute, "every store and worker to serve a new certificate", func(ctx context.Context) (bool, string, error) {
		var waiting []string
		for addr, pod := range targets {
			sn, err := served(addr)
			if err != nil || sn.Cmp(old[addr]) == 0 {
				waiting = append(waiting, pod)
			}
		}
		return len(waiting) == 0, fmt.Sprintf("still the old certificate: %v (%d writes so far)", waiting, writes.Load()), nil
	})
	// A few more writes on the new certificates (peers and workers too).
	target := writes.Load() + 50
	eventually(t, time.Minute, "50 writes after the rotation", func(context.Context) (bool, string, error) {
		return writes.Load() >= target, fmt.Sprintf("%d of %d", writes.Load(), target), nil
	})
	stopWriting()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d writes failed across the rotation; the first: %v", n, n+writes.Load(), *firstErr.Load())
	}
	t.Logf("%d writes across the rotation, none failed", writes.Load())
	for pod, n := range e.restartCounts(t) {
		if was, ok := restarts[pod]; ok && n != was {
			t.Errorf("%s restarted across the rotation (%d → %d restarts); a rotation must need no restart", pod, was, n)
		}
	}
	// The new certificates are the cluster's: a client of the cluster
	// still verifies every server (its CA, the name bellows-node).
	cfg := e.clientTLS(t, clusterName, "admin")
	for addr, pod := range targets {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Errorf("%s after the rotation: %v", pod, err)
			continue
		}
		conn.Close()
	}
	verifyLedger(t, ctx, kv, l)
}

// restartCounts is every store's and worker's container restart count.
func (e *env) restartCounts(t *testing.T) map[string]int32 {
	out := map[string]int32{}
	for _, c := range []struct{ component, instance string }{{contract.ComponentStore, clusterName}, {contract.ComponentCompactor, poolName}} {
		for _, p := range e.pods(t, c.component, c.instance) {
			for _, s := range p.Status.ContainerStatuses {
				out[p.Name] += s.RestartCount
			}
		}
	}
	return out
}
