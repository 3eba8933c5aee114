package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersappsv1 "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/bellows-kv/bellows/internal/contract"
)

// StatefulSetReplicas follows one StatefulSet's spec.replicas from an
// informer cache (a watch on that one object): the stores' replica count,
// which decides which regions each store owns (--replicas-from), and the
// operator's mark of a scale-down under way (Serving).
type StatefulSetReplicas struct {
	namespace, name string
	lister          listersappsv1.StatefulSetNamespaceLister
	// Log receives one line per distinct malformed serving-replicas
	// annotation (nil: slog.Default()).
	Log *slog.Logger

	mu         sync.Mutex
	badServing string // the last malformed annotation value logged
}

// StartStatefulSetReplicas watches namespace/name and returns once its
// cache has synced (or ctx ends).
func StartStatefulSetReplicas(ctx context.Context, cfg *rest.Config, namespace, name string) (*StatefulSetReplicas, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return StartStatefulSetReplicasWith(ctx, cs, namespace, name)
}

// StartStatefulSetReplicasWith is StartStatefulSetReplicas with a given
// client (a fake one in tests).
func StartStatefulSetReplicasWith(ctx context.Context, cs kubernetes.Interface, namespace, name string) (*StatefulSetReplicas, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Apps().V1().StatefulSets()
	lister := inf.Lister()
	informer := inf.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("discovery: StatefulSet %s/%s did not sync: %w", namespace, name, ctx.Err())
	}
	return &StatefulSetReplicas{namespace: namespace, name: name, lister: lister.StatefulSets(namespace)}, nil
}

// Replicas is the StatefulSet's spec.replicas (1 when unset, as the API
// defaults it); ok false while the StatefulSet is not found.
func (s *StatefulSetReplicas) Replicas() (n int, ok bool) {
	sts, err := s.lister.Get(s.name)
	if err != nil {
		return 0, false
	}
	return replicasOf(sts), true
}

// Serving is how many of the Replicas stay: the operator's
// contract.ServingReplicasAnnotation when it is set, a whole number and
// below Replicas; else Replicas. The ordinals from Serving up to Replicas
// are leaving: the balancer drains them before the StatefulSet shrinks. A
// malformed annotation is ignored (and logged once per value): draining
// nothing is what the stores did before the mark existed. ok false while
// the StatefulSet is not found.
func (s *StatefulSetReplicas) Serving() (m int, ok bool) {
	sts, err := s.lister.Get(s.name)
	if err != nil {
		return 0, false
	}
	n := replicasOf(sts)
	v, set := sts.Annotations[contract.ServingReplicasAnnotation]
	if !set {
		return n, true
	}
	m, err = strconv.Atoi(v)
	if err != nil || m < 1 || m > n {
		s.logBad(v, n)
		return n, true
	}
	return m, true
}

func (s *StatefulSetReplicas) logBad(v string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.badServing == v {
		return
	}
	s.badServing = v
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("ignoring a malformed annotation: no store is drained", "statefulset", s.namespace+"/"+s.name,
		"annotation", contract.ServingReplicasAnnotation, "value", v, "replicas", n, "want", fmt.Sprintf("a whole number from 1 to %d", n))
}

func replicasOf(sts *appsv1.StatefulSet) int {
	if sts.Spec.Replicas == nil {
		return 1
	}
	return int(*sts.Spec.Replicas)
}
