package discovery

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersappsv1 "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// StatefulSetReplicas follows one StatefulSet's spec.replicas from an
// informer cache (a watch on that one object): the stores' replica count,
// which decides which regions each store owns (--replicas-from).
type StatefulSetReplicas struct {
	namespace, name string
	lister          listersappsv1.StatefulSetNamespaceLister
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

func replicasOf(sts *appsv1.StatefulSet) int {
	if sts.Spec.Replicas == nil {
		return 1
	}
	return int(*sts.Spec.Replicas)
}
