package operator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// TestTheOperatorRunsUnderItsOwnRBAC runs the whole operator as a user that
// holds exactly config/rbac's ClusterRole (controller-gen's, from the
// markers; the chart installs the same rules) and leader-election Role, the
// way the chart binds them, and drives every path of its reconcilers that
// writes: it must elect itself, sync its informers (list and watch of every
// kind it watches), create each child of a KVCluster and a CompactionPool
// (including the storage pods' Role, which it may only grant because it holds
// what the Role grants), update each when someone changes it, write the
// statuses of all four kinds, create Backups on a schedule and record events.
// A verb the markers lack fails here instead of in a cluster.
//
// Then it stops the operator: the Lease must be handed over at once (no
// holder), so a standby replica takes over within its retry period instead
// of after the lease duration. (One test: controller-runtime lets a process
// run its controllers once.)
func TestTheOperatorRunsUnderItsOwnRBAC(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	ctx := context.Background()
	env, admin := startAPIServer(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(gomega.Succeed())
	g.Expect(kvapi.AddToScheme(scheme)).To(gomega.Succeed())
	c, err := client.New(admin, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	const opNS, appNS, user = "bellows-system", "apps", "bellows-operator"
	for _, ns := range []string{opNS, appNS} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	var role rbacv1.ClusterRole
	readYAML(t, filepath.Join("..", "..", "..", "config", "rbac", "role.yaml"), &role)
	var election rbacv1.Role
	readYAML(t, filepath.Join("..", "..", "..", "config", "rbac", "leader_election_role.yaml"), &election)
	election.Namespace = opNS
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, o := range []client.Object{
		&role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}},
		&election,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: election.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: election.Name}},
	} {
		g.Expect(c.Create(ctx, o)).To(gomega.Succeed())
	}
	u, err := env.AddUser(envtest.User{Name: user}, admin)
	g.Expect(err).NotTo(gomega.HaveOccurred())

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	cfg := Default()
	cfg.Kube, cfg.LeaderElectionNS, cfg.Namespace = u.Config(), opNS, opNS
	cfg.MetricsAddr, cfg.ProbeAddr = "0", "0"
	go func() { done <- Run(runCtx, cfg) }()

	pool := &kvapi.CompactionPool{}
	readYAML(t, filepath.Join("..", "..", "..", "config", "samples", "kv_v1alpha1_compactionpool.yaml"), pool)
	cluster := &kvapi.KVCluster{}
	readYAML(t, filepath.Join("..", "..", "..", "config", "samples", "kv_v1alpha1_kvcluster.yaml"), cluster)
	backup := &kvapi.Backup{}
	readYAML(t, filepath.Join("..", "..", "..", "config", "samples", "kv_v1alpha1_backup.yaml"), backup)
	schedule := &kvapi.ScheduledBackup{}
	readYAML(t, filepath.Join("..", "..", "..", "config", "samples", "kv_v1alpha1_scheduledbackup.yaml"), schedule)
	for _, o := range []client.Object{pool, cluster, backup, schedule} {
		o.SetNamespace(appNS)
		g.Expect(c.Create(ctx, o)).To(gomega.Succeed())
	}

	// The leader's Lease.
	g.Eventually(func(g gomega.Gomega) {
		var l coordinationv1.Lease
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: contract.LeaderElectionID}, &l)).To(gomega.Succeed())
		g.Expect(l.Spec.HolderIdentity).NotTo(gomega.BeNil())
	}).Should(gomega.Succeed())

	sm := func(name string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetGroupVersionKind(specs.ServiceMonitorGVK)
		o.SetNamespace(appNS)
		o.SetName(name)
		return o
	}
	at := func(o client.Object, name string) client.Object {
		o.SetNamespace(appNS)
		o.SetName(name)
		return o
	}
	// Every child the operator writes, as it writes it.
	kids := []client.Object{
		at(&corev1.ServiceAccount{}, "demo-store"), at(&rbacv1.Role{}, "demo-store"), at(&rbacv1.RoleBinding{}, "demo-store"),
		at(&networkingv1.NetworkPolicy{}, "demo-store"), at(&corev1.Service{}, "demo-headless"), at(&corev1.Service{}, "demo"),
		at(&policyv1.PodDisruptionBudget{}, "demo"), sm("demo-store"), at(&corev1.ConfigMap{}, "demo-engine"),
		at(&corev1.Secret{}, cluster.StoreTLSSecretName()), at(&corev1.Secret{}, cluster.TokensSecretName()),
		at(&networkingv1.NetworkPolicy{}, "workers-compactor"), at(&appsv1.Deployment{}, "workers-compactor"),
		at(&corev1.Service{}, "workers-compactor"), at(&policyv1.PodDisruptionBudget{}, "workers-compactor"), sm("workers-compactor"),
	}
	sts := at(&appsv1.StatefulSet{}, "demo").(*appsv1.StatefulSet)
	g.Eventually(func(g gomega.Gomega) {
		for _, o := range append(kids, sts) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(gomega.Succeed(), "%T %s", o, o.GetName())
		}
	}).Should(gomega.Succeed())

	// The statuses, and no reconcile error (a forbidden call would be one).
	g.Eventually(func(g gomega.Gomega) {
		var kv kvapi.KVCluster
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), &kv)).To(gomega.Succeed())
		g.Expect(kv.Status.ObservedGeneration).To(gomega.Equal(kv.Generation))
		g.Expect(meta.IsStatusConditionFalse(kv.Status.Conditions, kvapi.ConditionDegraded)).To(gomega.BeTrue(), "%+v", kv.Status.Conditions)
		var p kvapi.CompactionPool
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(gomega.Succeed())
		g.Expect(p.Status.ObservedGeneration).To(gomega.Equal(p.Generation))
		g.Expect(meta.IsStatusConditionFalse(p.Status.Conditions, kvapi.ConditionDegraded)).To(gomega.BeTrue(), "%+v", p.Status.Conditions)
		for _, cond := range p.Status.Conditions {
			g.Expect(strings.ToLower(cond.Message)).NotTo(gomega.ContainSubstring("forbidden"), "pool condition %s", cond.Type)
		}
		var b kvapi.Backup
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(backup), &b)).To(gomega.Succeed())
		g.Expect(b.Status.Phase).To(gomega.Equal(kvapi.BackupPending)) // the cluster is not Ready
		var sb kvapi.ScheduledBackup
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(schedule), &sb)).To(gomega.Succeed())
		g.Expect(sb.Status.LastBackup).NotTo(gomega.BeEmpty())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: appNS, Name: sb.Status.LastBackup}, &kvapi.Backup{})).To(gomega.Succeed())
	}).Should(gomega.Succeed())

	// Someone changes every child: the operator updates each back. The
	// StatefulSet first looks rolled out (no StatefulSet controller runs
	// here), or the rollout gate would hold its update back.
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: *sts.Spec.Replicas, ReadyReplicas: *sts.Spec.Replicas,
		UpdatedReplicas: *sts.Spec.Replicas, CurrentRevision: "r", UpdateRevision: "r"}
	g.Expect(c.Status().Update(ctx, sts)).To(gomega.Succeed())
	tampered := append(kids[:len(kids):len(kids)], sts)
	certificate := func(o client.Object) bool { return o.GetName() == cluster.StoreTLSSecretName() }
	for _, o := range tampered {
		if certificate(o) {
			continue // a certificate is renewed, not reverted
		}
		g.Eventually(func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			ann := o.GetAnnotations()
			ann[contract.SpecHashAnnotation] = "tampered"
			o.SetAnnotations(ann)
			return c.Update(ctx, o)
		}).Should(gomega.Succeed())
	}
	for _, o := range tampered {
		if certificate(o) {
			continue
		}
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(gomega.Succeed())
			g.Expect(o.GetAnnotations()[contract.SpecHashAnnotation]).NotTo(gomega.Equal("tampered"), "%T %s not updated", o, o.GetName())
		}).Should(gomega.Succeed())
	}

	// Its events (events.k8s.io), written as the operator.
	g.Eventually(func(g gomega.Gomega) {
		var evs eventsv1.EventList
		g.Expect(c.List(ctx, &evs, client.InNamespace(appNS))).To(gomega.Succeed())
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			reasons[e.Reason] = true
		}
		g.Expect(reasons).To(gomega.HaveKey("Created"))
		g.Expect(reasons).To(gomega.HaveKey("Updated"))
	}).Should(gomega.Succeed())

	// Stopped, the leader hands the Lease over. Renewed at least once
	// first: the elector has taken in its own acquisition. Stopped between
	// writing the Lease and reading the answer, it would release with the
	// record it had before and lose to a conflict (seen once: "Failed to
	// release lease ... the object has been modified"), which is client-go's
	// race, not what this test is about.
	lease := func() coordinationv1.Lease {
		var l coordinationv1.Lease
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: contract.LeaderElectionID}, &l)).To(gomega.Succeed())
		return l
	}
	g.Eventually(func() bool {
		l := lease()
		return l.Spec.HolderIdentity != nil && l.Spec.AcquireTime != nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(l.Spec.AcquireTime.Time)
	}).Should(gomega.BeTrue(), "the operator never took and renewed the Lease")
	stop()
	select {
	case err := <-done:
		g.Expect(err).NotTo(gomega.HaveOccurred(), "Run")
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if h := lease().Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("the stopped leader still holds the Lease (%q): a standby waits for it to expire", *h)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
